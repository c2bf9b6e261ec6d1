package scaledown_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// The ClusterAutoscaler the Actuator acts for, and another that exists.
const (
	ownUID     types.UID = "9d1a0b8e-0000-4000-8000-000000000001"
	anotherUID types.UID = "9d1a0b8e-0000-4000-8000-000000000002"
)

var testOwner = ownership.Owner{UID: ownUID, ClusterAutoscalers: clusterAutoscalers{anotherUID: {Namespace: "default", Name: "another"}}}

// clusterAutoscalers are the ClusterAutoscalers that exist, by UID.
type clusterAutoscalers map[types.UID]types.NamespacedName

func (c clusterAutoscalers) Find(_ context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	key, found := c[uid]
	return key, found, nil
}

// actuatorFixture is an Actuator on a fake clientset whose Eviction API
// marks pods terminating until the end of the grace period it is given, as
// a real API server does, unless refuse says a PodDisruptionBudget forbids
// it.
type actuatorFixture struct {
	ctx      context.Context
	clock    *clocktesting.FakeClock
	client   *fake.Clientset
	recorder *record.FakeRecorder
	actuator *scaledown.Actuator
	refuse   func(podName string) bool
	// resourceSlices publish the nodes' DRA devices, as the cache has them.
	resourceSlices []*resourceapi.ResourceSlice
}

func newActuatorFixture(t *testing.T, objects ...runtime.Object) *actuatorFixture {
	_, ctx := ktesting.NewTestContext(t)
	f := &actuatorFixture{
		ctx: ctx, clock: clocktesting.NewFakeClock(st.Now), client: fake.NewClientset(objects...),
		recorder: record.NewFakeRecorder(100), refuse: func(string) bool { return false },
	}
	f.client.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		eviction := action.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if f.refuse(eviction.Name) {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10)
		}
		gvr := corev1.SchemeGroupVersion.WithResource("pods")
		obj, err := f.client.Tracker().Get(gvr, eviction.Namespace, eviction.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		gracePeriod := time.Duration(*eviction.DeleteOptions.GracePeriodSeconds) * time.Second
		pod.DeletionTimestamp = ptr.To(metav1.NewTime(f.clock.Now().Add(gracePeriod)))
		return true, nil, f.client.Tracker().Update(gvr, pod, pod.Namespace)
	})
	actuator, err := scaledown.NewActuator(f.client, f.recorder, testOwner, scaledown.ActuatorOptions{
		MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 10 * time.Minute, NodeDeletionTimeout: 5 * time.Minute, Clock: f.clock,
	})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	f.actuator = actuator
	return f
}

// start starts the removals of plan on the pods as a cache in step with
// the API server has them.
func (f *actuatorFixture) start(g Gomega, plan *scaledown.Plan) {
	f.actuator.Start(f.ctx, plan, f.cache(g))
}

// advance runs the actuator's per-loop step on the nodes as the API server
// has them, the pods as a cache in step with it has them, and the given
// groups.
func (f *actuatorFixture) advance(g Gomega, groups ...nodegroups.NodeGroup) []scaledown.Released {
	return f.actuator.Continue(f.ctx, scaledown.View{Nodes: f.nodes(g), Pods: f.cache(g), Groups: groups})
}

// cache is what a cache in step with the API server has of the nodes and
// their pods.
func (f *actuatorFixture) cache(g Gomega) *snapshot.Snapshot {
	in := snapshot.Input{Nodes: f.nodes(g), ResourceSlices: f.resourceSlices}
	for _, pod := range f.pods(g) {
		in.Pods = append(in.Pods, &pod)
	}
	return snapshot.New(in)
}

// pods are the pods of the API server, read from the fake's tracker, so
// that no list of pods is recorded but the actuator's.
func (f *actuatorFixture) pods(g Gomega) []corev1.Pod {
	list, err := f.client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "")
	g.Expect(err).NotTo(HaveOccurred())
	return list.(*corev1.PodList).Items
}

func (f *actuatorFixture) nodes(g Gomega) []*corev1.Node {
	list, err := f.client.CoreV1().Nodes().List(f.ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	nodes := make([]*corev1.Node, 0, len(list.Items))
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	return nodes
}

func (f *actuatorFixture) node(g Gomega, name string) *corev1.Node {
	node, err := f.client.CoreV1().Nodes().Get(f.ctx, name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	return node
}

// terminating are the names of the pods marked for deletion.
func (f *actuatorFixture) terminating(g Gomega) []string {
	names := []string{}
	for _, pod := range f.pods(g) {
		if pod.DeletionTimestamp != nil {
			names = append(names, pod.Name)
		}
	}
	return names
}

// finishTerminating deletes the terminating pods, as a kubelet would.
func (f *actuatorFixture) finishTerminating(g Gomega) {
	for _, name := range f.terminating(g) {
		g.Expect(f.client.CoreV1().Pods("default").Delete(f.ctx, name, metav1.DeleteOptions{})).To(Succeed())
	}
}

func (f *actuatorFixture) events() []string {
	var events []string
	for {
		select {
		case event := <-f.recorder.Events:
			events = append(events, event)
		default:
			return events
		}
	}
}

func expectTainted(g Gomega, node *corev1.Node, tainted bool) {
	g.Expect(scaledown.HasDeletionTaint(node)).To(Equal(tainted), "node %s tainted", node.Name)
}

const (
	eventMarked    = "Normal ScaleDown marked the node as toBeDeleted/unschedulable"
	eventEvicting  = "Normal ScaleDown deleting pod for node scale down"
	eventFailedPfx = "Warning ScaleDownFailed "
)

func TestEmptyNodesAreDeletedInBulk(t *testing.T) {
	g := NewWithT(t)
	a1, a2, b1 := node("a1"), node("a2"), node("b1")
	f := newActuatorFixture(t, a1, a2, b1, pod("agent-a1", "100m", "a1", daemonSetPod), pod("static-b1", "100m", "b1", mirrorPod))
	groupA, groupB := newGroup("ng-a", a1, a2), newGroup("ng-b", b1)

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: groupA}, {Node: b1, Group: groupB}, {Node: a2, Group: groupA}}})

	g.Expect(groupA.Deleted).To(Equal([]string{"a1", "a2"}), "one call for the group")
	g.Expect(groupB.Deleted).To(Equal([]string{"b1"}))
	for _, name := range []string{"a1", "a2", "b1"} {
		expectTainted(g, f.node(g, name), true)
	}
	g.Expect(f.terminating(g)).To(BeEmpty(), "DaemonSet and mirror pods are not evicted")
	g.Expect(f.events()).To(Equal([]string{eventMarked, eventMarked, eventMarked}))
	g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{
		Deleting: map[string]bool{"a1": true, "a2": true, "b1": true}, Deleted: map[string]bool{"a1": true, "a2": true, "b1": true},
		LastDeletion: st.Now, DeletedNodes: 3,
	}), "deleted nodes stay in progress while they are listed")
}

// The empty nodes consolidation chose are counted apart, for the reason
// label of the scale-down metric.
func TestEmptyNodesOfConsolidationAreCountedApart(t *testing.T) {
	g := NewWithT(t)
	a1, a2 := node("a1"), node("a2")
	f := newActuatorFixture(t, a1, a2)
	group := newGroup("ng", a1, a2)

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: group, ByConsolidation: true}, {Node: a2, Group: group}}})

	g.Expect(group.Deleted).To(Equal([]string{"a1", "a2"}))
	progress := f.actuator.Progress()
	g.Expect(progress.DeletedNodes).To(Equal(2))
	g.Expect(progress.ConsolidatedNodes).To(Equal(1))
}

func TestEmptyNodeThatGotAPodStays(t *testing.T) {
	g := NewWithT(t)
	a1 := node("a1")
	f := newActuatorFixture(t, a1, pod("newcomer", "100m", "a1"))
	group := newGroup("ng", a1)

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: group}}})

	g.Expect(group.Deleted).To(BeEmpty())
	expectTainted(g, f.node(g, "a1"), false)
	g.Expect(f.actuator.Progress().LastFailure).To(BeZero(), "a race with the scheduler is no failure")
}

// The pods of a node whose kubelet died are deleted by taint-based
// eviction and stay terminating: past their grace period and the margin
// they hold the node no more, or it would be tainted and given back in
// every loop.
func TestEmptyNodeWhosePodsAreStuckTerminating(t *testing.T) {
	tests := []struct {
		name           string
		gracePeriodEnd time.Time
		wantDeleted    bool
	}{
		{name: "is kept while a pod is within its grace period", gracePeriodEnd: st.Now.Add(10 * time.Second)},
		{name: "is kept while a pod is within the margin past its grace period", gracePeriodEnd: st.Now.Add(-30 * time.Second)},
		{name: "is deleted once the pods are past their grace period and the margin", gracePeriodEnd: st.Now.Add(-31 * time.Second), wantDeleted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			dead := node("dead", notReady)
			f := newActuatorFixture(t, dead, pod("web-0", "100m", "dead", st.Terminating(tt.gracePeriodEnd)))
			group := newGroup("ng", dead)

			f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: dead, Group: group}}})

			if !tt.wantDeleted {
				g.Expect(group.Deleted).To(BeEmpty())
				expectTainted(g, f.node(g, "dead"), false)
				return
			}
			g.Expect(group.Deleted).To(Equal([]string{"dead"}))
			expectTainted(g, f.node(g, "dead"), true)
			g.Expect(f.actuator.Progress().LastFailure).To(BeZero())
		})
	}
}

func TestFailedDeletionLeavesNothingBehind(t *testing.T) {
	g := NewWithT(t)
	a1 := node("a1")
	f := newActuatorFixture(t, a1)
	group := newGroup("ng", a1)
	group.DeleteNodesErr = errors.New("the API server is unavailable")

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: group}}})

	g.Expect(group.Deleted).To(BeEmpty())
	expectTainted(g, f.node(g, "a1"), false)
	g.Expect(f.events()).To(ConsistOf(eventMarked, HavePrefix(eventFailedPfx+"failed to delete empty node: the API server is unavailable")))
	g.Expect(f.actuator.Progress().LastFailure).To(Equal(st.Now))
}

// A group may pass the check and still refuse at the write, e.g. while a
// Machine that a MachineHealthCheck remediates is being replaced: the
// removal no longer holds, which is no failure.
var refusalAtTheWrite = &nodegroups.RefusedError{Reason: "MachineSet/default/ms-0: not lowering replicas from 3: 2 Machines exist besides those being deleted"}

func TestRefusalAtTheWriteCancelsAnEmptyNodesRemoval(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n)
	group := newGroup("ng", n, node("other"))
	group.DeleteNodesErr = refusalAtTheWrite

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: n, Group: group}}})

	f.expectCancelledAtTheWrite(g, group)
}

func TestRefusalAtTheWriteCancelsADrainedNodesRemoval(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	group := newGroup("ng", n, node("other"))
	group.DeleteNodesErr = refusalAtTheWrite
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	f.finishTerminating(g)
	f.clock.Step(10 * time.Second)

	f.advance(g, group)

	f.expectCancelledAtTheWrite(g, group)
}

func (f *actuatorFixture) expectCancelledAtTheWrite(g Gomega, group *testGroup) {
	g.Expect(group.Deleted).To(BeEmpty())
	expectTainted(g, f.node(g, "n"), false)
	events := f.events()
	g.Expect(events).To(ContainElement("Normal ScaleDownCancelled node released, its removal no longer holds: " + refusalAtTheWrite.Reason))
	g.Expect(events).NotTo(ContainElement(HavePrefix(eventFailedPfx)))
	g.Expect(f.actuator.Progress().LastFailure).To(BeZero(), "a refused removal is no failure")
}

func TestDrainEvictsPodsThenDeletesTheNode(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"), pod("web-1", "100m", "n"), pod("agent", "100m", "n", daemonSetPod),
		pod("custom-agent", "100m", "n", st.CustomDaemonSetPod("agent")), pod("low", "100m", "n", st.WithPriority(-100)), pod("elsewhere", "100m", "other"))
	group := newGroup("ng", n, node("other"))

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})

	expectTainted(g, f.node(g, "n"), true)
	g.Expect(f.terminating(g)).To(ConsistOf("web-0", "web-1", "low"))
	g.Expect(f.events()).To(Equal([]string{eventMarked, eventEvicting, eventEvicting, eventEvicting}))
	g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{Deleting: map[string]bool{"n": true}, Deleted: map[string]bool{}, Draining: 1, EvictedPods: 3}))

	f.clock.Step(10 * time.Second)
	f.advance(g)
	g.Expect(group.Deleted).To(BeEmpty(), "the node stays while its pods terminate")
	g.Expect(f.events()).To(BeEmpty(), "a pod is announced once")

	f.finishTerminating(g)
	f.clock.Step(10 * time.Second)
	f.advance(g)
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
	g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{
		Deleting: map[string]bool{"n": true}, Deleted: map[string]bool{"n": true},
		LastDeletion: st.Now.Add(20 * time.Second), DeletedNodes: 1, EvictedPods: 3,
	}), "a drained node stays in progress, never to be chosen again, while it is listed")
}

// The nodes of a plan are all tainted before any of their pods is
// evicted, as upstream's actuator taints its batch first: kube-scheduler
// must not place a pod evicted from the first node on the second, which
// would evict it again a moment later (the day on the local stack saw
// it, docs/cost.md).
func TestNodesOfAPlanAreTaintedBeforeAnyPodIsEvicted(t *testing.T) {
	g := NewWithT(t)
	a, b := node("a"), node("b")
	f := newActuatorFixture(t, a, b, pod("web-0", "100m", "a"), pod("web-1", "100m", "b"))
	group := newGroup("ng", a, b, node("other"))

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: a, Group: group}, {Node: b, Group: group}}})

	var writes []string
	for _, action := range f.client.Actions() {
		write, ok := action.(interface{ GetObject() runtime.Object })
		if !ok || action.GetVerb() != "update" && action.GetVerb() != "create" {
			continue
		}
		switch object := write.GetObject().(type) {
		case *corev1.Node:
			writes = append(writes, "taint "+object.Name)
		case *policyv1.Eviction:
			writes = append(writes, "evict "+object.Name)
		}
	}
	g.Expect(writes).To(Equal([]string{"taint a", "taint b", "evict web-0", "evict web-1"}))
}

// podLists are the lists of pods the actuator asked the API server for.
func (f *actuatorFixture) podLists() []metav1.ListOptions {
	var lists []metav1.ListOptions
	for _, action := range f.client.Actions() {
		if list, ok := action.(k8stesting.ListActionImpl); ok && list.GetResource().Resource == "pods" {
			lists = append(lists, list.ListOptions)
		}
	}
	return lists
}

// A drain reads the pods it evicts and waits for from the loop's cache:
// the API server is asked once, when the cache has none left, not older
// than the taint, which it serves from its watch cache (the envtest of
// drainenvtest checks the resourceVersion, which the fake drops). So is
// the check of an empty node.
func TestPodsOfANodeAreListedFromTheAPIServerOnlyBeforeItIsHandedOver(t *testing.T) {
	g := NewWithT(t)
	drained, empty := node("drained"), node("empty")
	f := newActuatorFixture(t, drained, empty, pod("web-0", "100m", "drained"), pod("web-1", "100m", "drained"))
	group := newGroup("ng", drained, empty, node("other"))

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: empty, Group: group}}, Drain: []scaledown.Removal{{Node: drained, Group: group}}})
	g.Expect(group.Deleted).To(Equal([]string{"empty"}))
	g.Expect(f.podLists()).To(Equal([]metav1.ListOptions{{FieldSelector: "spec.nodeName=empty", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}}),
		"the empty node, once tainted")
	g.Expect(f.terminating(g)).To(ConsistOf("web-0", "web-1"))

	for range 3 {
		f.clock.Step(10 * time.Second)
		f.advance(g, group)
	}
	g.Expect(f.podLists()).To(HaveLen(1), "the drained node's pods come from the cache while it has some")

	f.finishTerminating(g)
	f.advance(g, group)
	g.Expect(group.Deleted).To(Equal([]string{"empty", "drained"}))
	g.Expect(f.podLists()).To(HaveLen(2))
	g.Expect(f.podLists()[1]).To(Equal(metav1.ListOptions{FieldSelector: "spec.nodeName=drained", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}),
		"the drained node, once the cache has no pod left on it")
}

// The cache may not have a pod bound to the node yet, e.g. one the
// scheduler bound just before the taint: it is evicted all the same before
// the node goes.
func TestDrainEvictsAPodTheCacheHasNotSeenBeforeTheNodeGoes(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	group := newGroup("ng", n, node("other"))
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	f.finishTerminating(g)
	lagging := f.cache(g)
	_, err := f.client.CoreV1().Pods("default").Create(f.ctx, pod("late", "100m", "n"), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	f.clock.Step(10 * time.Second)
	f.actuator.Continue(f.ctx, scaledown.View{Nodes: f.nodes(g), Pods: lagging, Groups: []nodegroups.NodeGroup{group}})
	g.Expect(group.Deleted).To(BeEmpty(), "the node stays while a pod the cache missed runs on it")
	g.Expect(f.terminating(g)).To(ConsistOf("late"))

	f.finishTerminating(g)
	f.clock.Step(10 * time.Second)
	f.actuator.Continue(f.ctx, scaledown.View{Nodes: f.nodes(g), Pods: lagging, Groups: []nodegroups.NodeGroup{group}})
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
}

// A pod kube-scheduler binds to a node between consolidation's decision
// and the taint was not in the decision, which moves no pod bound less
// than consolidateAfter before: the node is given back before any pod is
// evicted, though the loop's cache, as the decision, has not seen the pod
// yet (issue 47: the day evicted a worker 1.5 s after its binding).
func TestConsolidationGivesBackANodeThatGotAPodAfterItsDecision(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	group := newGroup("ng", n, node("other"))
	decided := f.cache(g)
	_, err := f.client.CoreV1().Pods("default").Create(f.ctx, pod("late", "100m", "n"), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	f.actuator.Start(f.ctx, &scaledown.Plan{Drain: []scaledown.Removal{
		{Node: n, Group: group, ByConsolidation: true, Moves: map[types.UID]bool{"uid-web-0": true}},
	}}, decided)

	g.Expect(f.terminating(g)).To(BeEmpty(), "no pod is evicted, the decision's neither")
	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.events()).To(Equal([]string{eventMarked, "Normal ScaleDownCancelled node released, its removal no longer holds: " +
		"pod default/late was bound to the node after consolidation chose it, and consolidation disrupts no pod bound less than consolidateAfter before"}))
	g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{Deleting: map[string]bool{}, Deleted: map[string]bool{}}),
		"given back, no failure")

	f.clock.Step(10 * time.Second)
	f.advance(g, group)
	g.Expect(f.terminating(g)).To(BeEmpty())
	g.Expect(group.Deleted).To(BeEmpty(), "the Machine is not marked")
	g.Expect(group.Target).To(Equal(2), "the replicas are not lowered")
}

// The rule keeps consolidation from nothing it decided: the pods of the
// decision are evicted and the node goes, DaemonSet pods that came since
// included, which no drain evicts.
func TestConsolidationDrainsTheNodeWhenItRunsOnlyThePodsOfItsDecision(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"), pod("web-1", "100m", "n"), pod("agent", "100m", "n", daemonSetPod))
	group := newGroup("ng", n, node("other"))

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{
		{Node: n, Group: group, ByConsolidation: true, Moves: map[types.UID]bool{"uid-web-0": true, "uid-web-1": true}},
	}})
	expectTainted(g, f.node(g, "n"), true)
	g.Expect(f.terminating(g)).To(ConsistOf("web-0", "web-1"))

	f.finishTerminating(g)
	f.clock.Step(10 * time.Second)
	f.advance(g, group)
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
	g.Expect(f.actuator.Progress().ConsolidatedNodes).To(Equal(1))
}

// Scale-down evicts what runs on the node it drains, a pod bound since
// its decision included, as upstream's does: its pods are not promised
// consolidateAfter.
func TestScaleDownEvictsAPodBoundAfterItsDecision(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	group := newGroup("ng", n, node("other"))
	decided := f.cache(g)
	_, err := f.client.CoreV1().Pods("default").Create(f.ctx, pod("late", "100m", "n"), metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	f.actuator.Start(f.ctx, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}}, decided)
	f.clock.Step(10 * time.Second)
	f.advance(g, group)

	g.Expect(f.terminating(g)).To(ConsistOf("web-0", "late"))
	expectTainted(g, f.node(g, "n"), true)
}

// The loop that finishes a drain plans next from the snapshot it took
// before: the drained node is still in it, empty. Removing it again would
// lower its group's replicas a second time, and Cluster API would remove a
// Machine of its own choosing.
func TestDeletedNodeIsNotRemovedAgain(t *testing.T) {
	g := NewWithT(t)
	drained, busy := node("drained"), node("busy")
	busyPod := pod("busy-0", "3", "busy")
	f := newActuatorFixture(t, drained, busy, pod("web-0", "100m", "drained"), busyPod)
	group := newGroup("ng", drained, busy)
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: drained, Group: group}}})
	f.finishTerminating(g)
	f.advance(g)
	g.Expect(group.Deleted).To(Equal([]string{"drained"}))
	g.Expect(f.actuator.Progress().Deleting).To(Equal(map[string]bool{"drained": true}), "a deleted node is being deleted until it is gone")

	// The group as the loop read it, before the deletion.
	read := newGroup("ng", drained, busy)
	snap := snapshot.New(snapshot.Input{Nodes: []*corev1.Node{drained, busy}, Pods: []*corev1.Pod{busyPod}, NodeGroups: []nodegroups.NodeGroup{read}})
	plan := scaledown.NewPlanner(f.clock).Plan(f.ctx, snap, options(), f.actuator.Progress())
	g.Expect(plan.Empty).To(BeEmpty())
	g.Expect(reasons(plan.Kept)).To(HaveKeyWithValue("drained", scaledown.ReasonCurrentlyBeingDeleted))

	g.Expect(f.client.CoreV1().Nodes().Delete(f.ctx, "drained", metav1.DeleteOptions{})).To(Succeed())
	f.advance(g)
	g.Expect(f.actuator.Progress().Deleting).To(BeEmpty(), "a node that is gone is forgotten")
}

func TestDrainRetriesEvictionsThatAPDBRefuses(t *testing.T) {
	tests := []struct {
		name        string
		refuseFor   time.Duration
		wantDeleted bool
	}{
		{name: "until the PDB allows it", refuseFor: 90 * time.Second, wantDeleted: true},
		{name: "and fails after the maximum eviction time", refuseFor: time.Hour, wantDeleted: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			n := node("n")
			f := newActuatorFixture(t, n, pod("web-0", "100m", "n"), pod("web-1", "100m", "n"))
			f.refuse = func(name string) bool { return name == "web-1" && f.clock.Since(st.Now) < tt.refuseFor }
			group := newGroup("ng", n)

			f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
			g.Expect(f.terminating(g)).To(ConsistOf("web-0"))
			for range 4 { // every 30s, as the loop would, for 2 minutes
				f.finishTerminating(g)
				f.clock.Step(30 * time.Second)
				f.advance(g)
			}
			f.finishTerminating(g)
			f.advance(g)

			if tt.wantDeleted {
				g.Expect(group.Deleted).To(Equal([]string{"n"}))
				return
			}
			g.Expect(group.Deleted).To(BeEmpty())
			expectTainted(g, f.node(g, "n"), false)
			g.Expect(f.events()).To(ContainElement(HavePrefix(eventFailedPfx + "failed to drain the node within 2m0s: evicting pod default/web-1: Cannot evict pod")))
			g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{Deleting: map[string]bool{}, Deleted: map[string]bool{}, LastFailure: st.Now.Add(2 * time.Minute), EvictedPods: 1}))
		})
	}
}

// An evicted pod still there past its grace period, capped, and the margin
// runs nothing any more (a finalizer holds it, or its kubelet is gone): the
// drain is over.
func TestDrainEndsWhenPodsOutliveTheirGracePeriod(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	stuck := pod("stuck", "100m", "n")
	stuck.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3600) // capped at 10m
	f := newActuatorFixture(t, n, stuck)
	group := newGroup("ng", n)

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	f.clock.Step(10*time.Minute + 30*time.Second)
	f.advance(g)
	g.Expect(f.actuator.Progress().Draining).To(Equal(1), "still within the capped grace period and the margin")

	f.clock.Step(time.Second)
	f.advance(g)
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
	g.Expect(f.actuator.Progress().LastFailure).To(BeZero())
}

// A pod that its owner deleted with a grace period longer than the cap is
// not waited for beyond the cap and the margin.
func TestDrainFailsWhenPodsDoNotTerminate(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	stubborn := pod("stubborn", "100m", "n", st.Terminating(st.Now.Add(time.Hour)))
	stubborn.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3600)
	f := newActuatorFixture(t, n, stubborn)
	group := newGroup("ng", n)

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	f.clock.Step(10*time.Minute + 30*time.Second)
	f.advance(g)
	g.Expect(f.actuator.Progress().Draining).To(Equal(1), "still within the capped grace period and the margin")

	f.clock.Step(time.Second)
	f.advance(g)
	g.Expect(group.Deleted).To(BeEmpty())
	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.events()).To(ContainElement(eventFailedPfx + "pod default/stubborn did not terminate within 10m30s of its eviction"))
	g.Expect(f.actuator.Progress().Draining).To(BeZero())
}

func TestContinueReleasesOnlyWhatTheAutoscalerLeft(t *testing.T) {
	g := NewWithT(t)
	taint := st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule)
	ours := withAnnotation(scaledown.TaintedAnnotation, "1767268800")
	cordonedByUs := func(n *corev1.Node) {
		n.Spec.Unschedulable = true
		withAnnotation(scaledown.CordonedAnnotation, "1767268800")(n)
	}
	cordonedByAdmin := func(n *corev1.Node) { n.Spec.Unschedulable = true }
	leftover, draining := node("leftover", taint, ours, cordonedByUs), node("draining")
	upstream := node("upstream", taint)
	admin := node("admin", taint, ours, cordonedByAdmin)
	other := node("other", st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule))
	f := newActuatorFixture(t, leftover, draining, upstream, admin, other, pod("web-0", "100m", "draining"))
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: draining, Group: newGroup("ng", draining)}}})

	f.advance(g)

	expectTainted(g, f.node(g, "leftover"), false)
	g.Expect(f.node(g, "leftover").Spec.Unschedulable).To(BeFalse(), "the autoscaler's cordon is undone")
	g.Expect(f.node(g, "leftover").Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
	expectTainted(g, f.node(g, "draining"), true)
	expectTainted(g, f.node(g, "upstream"), true)
	g.Expect(f.node(g, "upstream").Spec.Taints).To(HaveLen(1), "another autoscaler's taint is left alone")
	expectTainted(g, f.node(g, "admin"), false)
	g.Expect(f.node(g, "admin").Spec.Unschedulable).To(BeTrue(), "an administrator's cordon stays")
	g.Expect(f.node(g, "other").Spec.Taints).To(HaveLen(1), "other taints are left alone")
}

// The taints and cordons of a ClusterAutoscaler are released as leftovers
// only by its own engine: another ClusterAutoscaler that exists may be
// draining the node. What a version before placed (no UID) is the current
// owner's, so that an upgrade loses nothing, and so is what a
// ClusterAutoscaler that no longer exists placed: nobody else will.
func TestContinueReleasesOnlyTheLeftoversOfItsClusterAutoscaler(t *testing.T) {
	g := NewWithT(t)
	taint := st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule)
	placedBy := func(uid types.UID) st.NodeOption {
		return func(n *corev1.Node) {
			value := "1767268800"
			if uid != "" {
				value = ownership.Stamp(uid, value)
			}
			n.Spec.Unschedulable = true
			withAnnotation(scaledown.TaintedAnnotation, value)(n)
			withAnnotation(scaledown.CordonedAnnotation, value)(n)
		}
	}
	f := newActuatorFixture(t,
		node("own", taint, placedBy(ownUID)),
		node("legacy", taint, placedBy("")),
		node("orphaned", taint, placedBy("9d1a0b8e-0000-4000-8000-00000000dead")),
		node("anothers", taint, placedBy(anotherUID)))

	f.advance(g)

	for _, name := range []string{"own", "legacy", "orphaned"} {
		expectTainted(g, f.node(g, name), false)
		g.Expect(f.node(g, name).Spec.Unschedulable).To(BeFalse(), "node %s is uncordoned", name)
		g.Expect(f.node(g, name).Annotations).To(BeEmpty(), "node %s", name)
	}
	expectTainted(g, f.node(g, "anothers"), true)
	g.Expect(f.node(g, "anothers").Spec.Unschedulable).To(BeTrue(), "another ClusterAutoscaler's cordon stays")
	g.Expect(f.node(g, "anothers").Annotations).To(HaveKeyWithValue(scaledown.TaintedAnnotation, ownership.Stamp(anotherUID, "1767268800")))
}

// The taint and cordon the Actuator places name its ClusterAutoscaler.
func TestTaintAndCordonNameTheClusterAutoscaler(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	f.actuator.SetOptions(scaledown.ActuatorOptions{MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 10 * time.Minute,
		NodeDeletionTimeout: 5 * time.Minute, Clock: f.clock, CordonNodeBeforeTerminating: true})

	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: newGroup("ng", n)}}})

	stamp := ownership.Stamp(ownUID, strconv.FormatInt(f.clock.Now().Unix(), 10))
	g.Expect(f.node(g, "n").Annotations).To(Equal(map[string]string{scaledown.TaintedAnnotation: stamp, scaledown.CordonedAnnotation: stamp}))
}

func TestCleanUpTaintsKeepsDeletedNodesTaintedUntilTheyAreGone(t *testing.T) {
	g := NewWithT(t)
	empty, drained := node("empty"), node("drained")
	f := newActuatorFixture(t, empty, drained, pod("web-0", "100m", "drained"))
	group := newGroup("ng", empty, drained)
	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: empty, Group: group}}, Drain: []scaledown.Removal{{Node: drained, Group: group}}})
	f.finishTerminating(g)
	f.advance(g)
	g.Expect(group.Deleted).To(ConsistOf("empty", "drained"))

	// Cluster API deletes the Machines, and then the Nodes, some time later.
	f.advance(g)
	expectTainted(g, f.node(g, "empty"), true)
	expectTainted(g, f.node(g, "drained"), true)

	// A node of the same name that joins later is not the deleted one.
	f.actuator.Continue(f.ctx, scaledown.View{})
	f.advance(g)
	expectTainted(g, f.node(g, "empty"), false)
}

func TestNodesAreCordonedBeforeRemovalOnlyWhenAsked(t *testing.T) {
	for _, cordon := range []bool{false, true} {
		t.Run(fmt.Sprintf("cordonNodeBeforeTerminating=%t", cordon), func(t *testing.T) {
			g := NewWithT(t)
			empty, kept := node("empty"), node("kept")
			f := newActuatorFixture(t, empty, kept)
			f.actuator.SetOptions(scaledown.ActuatorOptions{
				MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 10 * time.Minute, NodeDeletionTimeout: 5 * time.Minute, Clock: f.clock,
				CordonNodeBeforeTerminating: cordon,
			})
			group := newGroup("ng", empty)
			atMinimum := newGroup("at-min", kept)
			atMinimum.Min = 1 // DeleteNodes refuses: the removal is given up

			f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: empty, Group: group}, {Node: kept, Group: atMinimum}}})

			g.Expect(group.Deleted).To(ConsistOf("empty"))
			deleted := f.node(g, "empty")
			expectTainted(g, deleted, true)
			g.Expect(deleted.Spec.Unschedulable).To(Equal(cordon), "cordoned before deletion")
			g.Expect(f.node(g, "kept").Spec.Unschedulable).To(BeFalse(), "a removal given up leaves the node schedulable")
		})
	}
}

// A drain takes minutes; when it ends the group may be rolling out, paused,
// no longer autoscaled or at a raised min size. Lowering its replicas then
// could remove a Machine nobody chose: every step asks the group afresh.
func TestDrainIsGivenBackWhenItsGroupNoLongerAllowsIt(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"), pod("web-1", "100m", "n"))
	f.refuse = func(name string) bool { return name == "web-1" }
	group := newGroup("ng", n, node("other"))
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	g.Expect(f.terminating(g)).To(ConsistOf("web-0"))
	f.events()

	group.ScaleDownRefusal = &nodegroups.RefusedError{Reason: "MachineDeployment/default/md is rolling out (generation 3 not yet observed)"}
	f.finishTerminating(g)
	f.refuse = func(string) bool { return false }
	f.clock.Step(10 * time.Second)
	f.advance(g, group)

	g.Expect(group.Deleted).To(BeEmpty(), "nothing is deleted once the decision no longer holds")
	g.Expect(f.terminating(g)).To(BeEmpty(), "no more pods are evicted")
	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.events()).To(ConsistOf("Normal ScaleDownCancelled node released, its removal no longer holds: MachineDeployment/default/md is rolling out (generation 3 not yet observed)"))
	g.Expect(f.actuator.Progress()).To(Equal(scaledown.Progress{Deleting: map[string]bool{}, Deleted: map[string]bool{}, EvictedPods: 1}),
		"a cancelled removal is no failure")
}

func TestEmptyNodesOfAGroupThatNoLongerAllowsItAreNotTainted(t *testing.T) {
	g := NewWithT(t)
	a1 := node("a1")
	f := newActuatorFixture(t, a1)
	group := newGroup("ng", a1)
	group.ScaleDownRefusal = &nodegroups.RefusedError{Reason: "MachineDeployment/default/md is paused"}

	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: group}}})

	g.Expect(group.Deleted).To(BeEmpty())
	g.Expect(f.node(g, "a1").Spec.Taints).To(BeEmpty())
	g.Expect(f.events()).To(ConsistOf(HavePrefix("Normal ScaleDownCancelled")))
}

// A group that cannot be read says nothing about the decision: the drain
// waits, within its time limit.
func TestDrainWaitsWhileItsGroupCannotBeRead(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	f.refuse = func(string) bool { return true }
	group := newGroup("ng", n, node("other"))
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})
	group.ScaleDownRefusal = errors.New("the API server is unavailable")

	f.clock.Step(time.Minute)
	f.advance(g, group)
	expectTainted(g, f.node(g, "n"), true)
	g.Expect(f.actuator.Progress().Draining).To(Equal(1))

	f.clock.Step(time.Minute)
	f.advance(g, group)
	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.events()).To(ContainElement(HavePrefix(eventFailedPfx + "could not check that node group ng may still lose the node within 2m0s: the API server is unavailable")))
}

// Each loop re-checks a drain against the cluster's minimums, counted
// over the nodes the loop lists, the drained node included until it goes:
// the nodes of 4 cores and 2 devices of a DRA driver each, n drained and
// other staying.
func TestDrainIsRecheckedAgainstTheClusterMinimums(t *testing.T) {
	for _, tt := range []struct {
		name     string
		minimums scaledown.ClusterMinimums
		// wantReleased is the end of the message of the release; "" when
		// the drain goes on.
		wantReleased string
	}{
		{name: "a minimum raised above what the cluster keeps", minimums: scaledown.ClusterMinimums{Cores: 8},
			wantReleased: "the cluster would have fewer than the minimum 8 cores"},
		{name: "the cluster keeps its minimum cores", minimums: scaledown.ClusterMinimums{Cores: 4}},
		{name: "a minimum of a DRA driver's devices raised above what the cluster keeps",
			minimums:     scaledown.ClusterMinimums{GPUs: map[corev1.ResourceName]int64{st.GPUDriver: 4}},
			wantReleased: "the cluster would have fewer than the minimum 4 gpu.example.com"},
		{name: "the cluster keeps its minimum devices of a DRA driver", minimums: scaledown.ClusterMinimums{GPUs: map[corev1.ResourceName]int64{st.GPUDriver: 2}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			n, other := node("n"), node("other")
			f := newActuatorFixture(t, n, other, pod("web-0", "100m", "n"))
			f.resourceSlices = []*resourceapi.ResourceSlice{
				st.ResourceSlice("n", st.GPUDriver, st.GPUs(2, "a100")...),
				st.ResourceSlice("other", st.GPUDriver, st.GPUs(2, "a100")...),
			}
			f.refuse = func(string) bool { return true }
			group := newGroup("ng", n, other)
			f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}})

			f.actuator.Continue(f.ctx, scaledown.View{Nodes: f.nodes(g), Pods: f.cache(g), Groups: []nodegroups.NodeGroup{group}, Minimums: tt.minimums})

			if tt.wantReleased != "" {
				expectTainted(g, f.node(g, "n"), false)
				g.Expect(f.events()).To(ContainElement("Normal ScaleDownCancelled node released, its removal no longer holds: " + tt.wantReleased))
				return
			}
			expectTainted(g, f.node(g, "n"), true)
			g.Expect(f.actuator.Progress().Draining).To(Equal(1), "the drain goes on")
			g.Expect(f.events()).NotTo(ContainElement(HavePrefix("Normal ScaleDownCancelled")))
		})
	}
}

func TestReleaseAllGivesBackDrainsButNotHandedOverNodes(t *testing.T) {
	g := NewWithT(t)
	empty, busy := node("empty"), node("busy")
	f := newActuatorFixture(t, empty, busy, pod("web-0", "100m", "busy"))
	f.refuse = func(string) bool { return true }
	group := newGroup("ng", empty, busy)
	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: empty, Group: group}}, Drain: []scaledown.Removal{{Node: busy, Group: group}}})

	f.actuator.ReleaseAll(f.ctx, "the Cluster was paused")

	expectTainted(g, f.node(g, "busy"), false)
	expectTainted(g, f.node(g, "empty"), true)
	g.Expect(f.actuator.Progress().Deleting).To(Equal(map[string]bool{"empty": true}))
	g.Expect(f.events()).To(ContainElement("Normal ScaleDownCancelled node released, its removal no longer holds: the Cluster was paused"))
}

func TestReleaseUndoesTheCordonEvenWhenCordoningWasTurnedOff(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	f.refuse = func(string) bool { return true }
	opts := scaledown.ActuatorOptions{MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 10 * time.Minute, NodeDeletionTimeout: 5 * time.Minute, Clock: f.clock, CordonNodeBeforeTerminating: true}
	f.actuator.SetOptions(opts)
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: newGroup("ng", n)}}})
	g.Expect(f.node(g, "n").Spec.Unschedulable).To(BeTrue())

	opts.CordonNodeBeforeTerminating = false
	f.actuator.SetOptions(opts)
	f.actuator.ReleaseAll(f.ctx, "scale-down is disabled")

	g.Expect(f.node(g, "n").Spec.Unschedulable).To(BeFalse(), "the node the autoscaler cordoned is uncordoned")
	g.Expect(f.node(g, "n").Annotations).To(BeEmpty())
}

func TestAdministratorsCordonSurvivesARelease(t *testing.T) {
	g := NewWithT(t)
	n := node("n", func(n *corev1.Node) { n.Spec.Unschedulable = true })
	f := newActuatorFixture(t, n, pod("web-0", "100m", "n"))
	f.refuse = func(string) bool { return true }
	opts := scaledown.ActuatorOptions{MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 10 * time.Minute, NodeDeletionTimeout: 5 * time.Minute, Clock: f.clock, CordonNodeBeforeTerminating: true}
	f.actuator.SetOptions(opts)
	f.start(g, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: newGroup("ng", n)}}})

	f.actuator.ReleaseAll(f.ctx, "scale-down is disabled")

	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.node(g, "n").Spec.Unschedulable).To(BeTrue(), "the administrator cordoned it")
}

func TestNodeAnotherAutoscalerIsRemovingIsLeftAlone(t *testing.T) {
	tests := []struct {
		name string
		// annotations are those of the deletion taint's node, which say
		// who placed the taint.
		annotations map[string]string
	}{
		{name: "the upstream autoscaler's taint, without our annotation"},
		{
			name:        "the taint of another ClusterAutoscaler's engine",
			annotations: map[string]string{scaledown.TaintedAnnotation: ownership.Stamp(anotherUID, "1767268800")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			theirs := node("theirs", st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule))
			theirs.Annotations = tt.annotations
			f := newActuatorFixture(t, theirs)
			group := newGroup("ng", theirs)

			f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: theirs, Group: group}}})
			f.advance(g, group)

			g.Expect(group.Deleted).To(BeEmpty())
			expectTainted(g, f.node(g, "theirs"), true)
			g.Expect(f.node(g, "theirs").Annotations).To(Equal(tt.annotations), "their taint's annotations are untouched")
			g.Expect(f.actuator.Progress().LastFailure).To(BeZero())
		})
	}
}

// A node handed to Cluster API whose Machine is not deleted, e.g. because
// a GitOps tool wrote the old replicas back, must not stay tainted and
// marked for ever.
func TestHandedOverNodeIsGivenBackWhenItsGroupDoesNotRemoveIt(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n)
	group := newGroup("ng", n)
	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: n, Group: group}}})
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
	f.events()

	// The replicas went back up: the node is a member again, not deleting.
	current := newGroup("ng", n)
	f.clock.Step(4 * time.Minute)
	g.Expect(f.advance(g, current)).To(BeEmpty())
	expectTainted(g, f.node(g, "n"), true)

	f.clock.Step(time.Minute)
	released := f.advance(g, current)

	g.Expect(released).To(ConsistOf(HaveField("Node", "n")))
	g.Expect(released[0].Message).To(ContainSubstring("was handed to node group ng for deletion 5m0s ago and is still there"))
	g.Expect(current.Cancelled).To(Equal([]string{"n"}), "its deletion mark is removed")
	expectTainted(g, f.node(g, "n"), false)
	g.Expect(f.events()).To(ConsistOf(HavePrefix(eventFailedPfx + "node n was handed to node group ng")))
	g.Expect(f.actuator.Progress().Deleting).To(BeEmpty())
}

func TestHandedOverNodeWhoseInstanceIsDeletingKeepsItsTaint(t *testing.T) {
	g := NewWithT(t)
	n := node("n")
	f := newActuatorFixture(t, n)
	f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: n, Group: newGroup("ng", n)}}})

	f.clock.Step(time.Hour)
	released := f.advance(g, &deletingGroup{NodeGroup: newGroup("ng", n)})

	g.Expect(released).To(BeEmpty(), "Cluster API is draining it; that takes as long as it takes")
	expectTainted(g, f.node(g, "n"), true)
}

// deletingGroup reports its members as being deleted.
type deletingGroup struct{ nodegroups.NodeGroup }

func (g *deletingGroup) Instances() []nodegroups.Instance {
	instances := g.NodeGroup.Instances()
	for i := range instances {
		instances[i].State = nodegroups.InstanceDeleting
	}
	return instances
}
