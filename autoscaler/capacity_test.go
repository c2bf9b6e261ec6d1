package autoscaler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// staticBuffers lists the same buffers in every loop, or fails with err.
type staticBuffers struct {
	list []buffers.Buffer
	err  error
}

func (b *staticBuffers) ListBuffers(context.Context) ([]buffers.Buffer, error)  { return b.list, b.err }
func (b *staticBuffers) WriteStatus(context.Context, map[string]buffers.Window) {}

// bufferOf is the buffer default/warm of replicas pods requesting 2 cpu
// and 1Gi.
func bufferOf(replicas int32) buffers.Buffer {
	const name = "warm"
	template := st.Pod("template", "2", "1Gi")
	return buffers.Buffer{
		Namespace: "default", Name: name, UID: types.UID("uid-buffer-" + name),
		CreationTimestamp: metav1.NewTime(st.Now.Add(-time.Hour)),
		Template:          corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: template.Spec},
		Replicas:          replicas,
	}
}

// withBuffers has the fixture's engine keep room for what lister lists.
func (f *fixture) withBuffers(t *testing.T, lister buffers.Lister) *fixture {
	t.Helper()
	return f.with(t, func(opts *autoscaler.Options) { opts.Buffers = lister })
}

// bufferRow is the status of the buffer of bufferOf.
func bufferRow(status autoscaler.Status) autoscaler.BufferStatus {
	for _, row := range status.Buffers {
		if row.Buffer == "default/warm" {
			return row
		}
	}
	return autoscaler.BufferStatus{}
}

// bufferBesideABusyNode is a group of 4-cpu nodes, up to maxSize, whose one
// node runs a 3-cpu pod, and a buffer of two 2-cpu pods.
func bufferBesideABusyNode(t *testing.T, maxSize int) (*fakeGroup, *fixture) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: maxSize, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	return group, newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{bufferOf(2)}})
}

// A buffer whose pods fit on no node that exists gets nodes of its own,
// as pending pods would, and nothing is written for its pods: they do not
// exist.
func TestABufferThatFitsNowhereGetsNewNodes(t *testing.T) {
	g := NewWithT(t)
	group, f := bufferBesideABusyNode(t, 10)

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}), "one 4-cpu node holds both 2-cpu buffer pods")
	g.Expect(bufferRow(status)).To(Equal(autoscaler.BufferStatus{Buffer: "default/warm", Replicas: 2, Upcoming: 2}))
	g.Expect(status.UnschedulablePods).To(BeZero(), "buffer pods are not pods of the cluster")
	g.Expect(f.podEvents()).To(BeEmpty(), "no event names a pod that does not exist")
	g.Expect(statusPatches(f)).To(BeZero(), "no pod that does not exist is nominated")
}

// A scale-up for a buffer's room is told on the buffer, once for all its
// pods, as upstream tells it; a buffer no group can make room for is told
// why, once while the reason stays.
func TestABufferIsToldWhetherItsRoomTriggeredAScaleUp(t *testing.T) {
	g := NewWithT(t)
	_, f := bufferBesideABusyNode(t, 10)

	f.runOnce(t)

	g.Expect(f.bufferEvents()).To(ConsistOf(
		"Normal TriggeredScaleUp pod triggered scale-up: [{MachineDeployment/default/md-0 1->2 (max: 10)}]"))

	full, f := bufferBesideABusyNode(t, 1)

	f.runOnce(t)
	f.runOnce(t)

	g.Expect(full.increases).To(BeEmpty())
	g.Expect(f.bufferEvents()).To(ConsistOf(HavePrefix("Normal NotTriggerScaleUp ")), "told once")
}

// The room a buffer holds on a node that exists keeps that node: without
// the buffer, the empty node goes once unneeded long enough.
func TestTheNodeABufferHoldsIsNotScaledDown(t *testing.T) {
	for _, tc := range []struct {
		name        string
		buffers     []buffers.Buffer
		wantDeleted int
	}{
		{name: "without a buffer", wantDeleted: 1},
		{name: "with a buffer of one 2-cpu pod", buffers: []buffers.Buffer{bufferOf(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
				withBuffers(t, &staticBuffers{list: tc.buffers})

			status := f.runPastUnneededTime(context.Background(), t)

			g.Expect(group.increases).To(BeEmpty())
			g.Expect(group.deletedNodes).To(HaveLen(tc.wantDeleted))
			if tc.buffers != nil {
				g.Expect(bufferRow(status)).To(Equal(autoscaler.BufferStatus{Buffer: "default/warm", Replicas: 1, Held: 1}))
			}
		})
	}
}

// Real pods take a buffer's room; the buffer then gets room again, on a
// new node.
func TestABufferTakenByRealPodsIsRestored(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{bufferOf(1)}})
	g.Expect(bufferRow(f.runOnce(t)).Held).To(Equal(1))

	// A burst that the buffer's room let start at once, on the empty node.
	for _, pod := range st.Replicas("burst", 2, "1500m", "1Gi", st.OwnedBy("burst"), st.OnNode(nodes[1].Name)) {
		g.Expect(f.cluster.Create(context.Background(), pod)).To(Succeed())
	}
	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}))
	g.Expect(bufferRow(status)).To(Equal(autoscaler.BufferStatus{Buffer: "default/warm", Replicas: 1, Upcoming: 1}))
}

// Real pods win every tie with a buffer: where room for one pod is left,
// the real pod waits for it and the buffer gets the new node.
func TestRealPodsWinTheRoomABufferWouldTake(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "2", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	// Smaller than the buffer's pod, which largest-first would place first.
	waiting := st.Pod("web-0", "1500m", "1Gi", st.OwnedBy("web"))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, waiting)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{bufferOf(1)}})

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}))
	g.Expect(bufferRow(status)).To(Equal(autoscaler.BufferStatus{Buffer: "default/warm", Replicas: 1, Upcoming: 1}),
		"the buffer's pod goes to the new node, the real one to the room left")
}

// Buffers that cannot be read leave the loop to go on without them.
func TestUnreadableBuffersDoNotStopTheLoop(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 2, "3", "1Gi", st.OwnedBy("web"))...)...).
		withBuffers(t, &staticBuffers{err: errors.New("the server could not find the requested resource")})

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}), "one pod fits on the empty node, the other gets a new one")
	g.Expect(status.BuffersError).To(ContainSubstring("could not find the requested resource"))
	g.Expect(status.Buffers).To(BeEmpty())
}
