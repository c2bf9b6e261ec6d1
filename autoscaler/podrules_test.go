package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A DaemonSet controller other than the DaemonSet (OpenKruise's Advanced
// DaemonSet, for one) annotates its pods daemonset-pod=true: they belong
// to their node, which is empty with them and goes at once, nothing
// evicted.
func TestNodeWithOnlyAPodOfACustomDaemonSetIsRemovedAsEmpty(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	agent := st.Pod("agent-1", "100m", "128Mi", st.CustomDaemonSetPod("agent"), st.OnNode(nodes[1].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, agent)...)

	f.runOnce(t)
	f.clock.Step(10*time.Minute + time.Second)
	f.runOnce(t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name))
	g.Expect(f.podEvents()).NotTo(ContainElement(ContainSubstring("deleting pod for node scale down")), "its pod goes with it, not evicted before")
}

// The upstream FAQ promises that a pod no controller object backs keeps
// its node: once evicted, nothing recreates it. A ReplicaSet deleted
// without its pods (kubectl delete --cascade=orphan, or before the garbage
// collector gets to them) leaves such pods.
func TestNodeWhosePodsReplicaSetIsGoneIsKept(t *testing.T) {
	for _, tt := range []struct {
		name             string
		deleteReplicaSet bool
	}{
		{name: "the ReplicaSet exists: the node is drained"},
		{name: "the ReplicaSet is gone: the node is kept", deleteReplicaSet: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
			web := st.Pod("web-0", "500m", "512Mi", st.OwnedBy("web"), st.OnNode(nodes[1].Name))
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, web)...)
			if tt.deleteReplicaSet {
				g.Expect(f.cluster.Delete(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: web.Namespace, Name: "web"}})).To(Succeed())
			}

			for range 2 {
				status := f.engine.RunOnce(ctx, f.clock.Now())
				g.Expect(status.Err).NotTo(HaveOccurred())
				f.clock.Step(10*time.Minute + time.Second)
			}

			evicted := ContainElement(ContainSubstring("deleting pod for node scale down"))
			if !tt.deleteReplicaSet {
				g.Expect(f.podEvents()).To(evicted)
				return
			}
			g.Expect(f.podEvents()).NotTo(evicted)
			g.Expect(f.engine.Status().UnneededNodes).To(BeZero())
			g.Expect(logger.GetSink().(ktesting.Underlier).GetBuffer().String()).To(ContainSubstring(fmt.Sprintf(
				`Node cannot be removed loop=2 node=%q reason="BlockedByPod" message="pod default/web-0: NotReplicated: the pod's ReplicaSet web no longer exists to recreate it"`, nodes[1].Name)))
		})
	}
}

// Controllers that cannot be read (a workload role without them, a cache
// whose informer cannot sync) do not stop the loop, nor hold it longer
// than OptionalReadTimeout: scale-up goes on, and scale-down keeps the
// nodes of the pods whose controllers it cannot find.
func TestControllersThatCannotBeReadKeepTheNodesOfTheirPods(t *testing.T) {
	for _, tt := range []struct {
		name string
		// cluster wraps the fixture's reader.
		cluster     func(client.Reader) client.Reader
		wantMessage string
	}{
		{
			name: "a list that fails, as an RBAC denial does",
			cluster: func(reader client.Reader) client.Reader {
				return failingList{Reader: reader, fails: &metav1.PartialObjectMetadataList{}}
			},
			wantMessage: "listing ReplicationControllers of the cluster: forbidden",
		},
		{
			name: "a list that hangs, as a cache's does",
			cluster: func(reader client.Reader) client.Reader {
				return hangingList{Reader: reader, hangs: &metav1.PartialObjectMetadataList{}}
			},
			wantMessage: "listing ReplicationControllers of the cluster: context deadline exceeded",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx := klog.NewContext(context.Background(), logger)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			f := newFixture(t, []*fakeGroup{group}, objects(nodes,
				st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name)),
				st.Pod("web-0", "500m", "512Mi", st.OwnedBy("web"), st.OnNode(nodes[1].Name)),
				st.Pod("pending-0", "3800m", "1Gi", st.OwnedBy("pending")))...)
			engine, err := autoscaler.New(autoscaler.Options{
				ClusterName: "default/workload", Config: autoscaler.DefaultConfig(), NodeGroups: f.provider,
				Cluster:             tt.cluster(f.cluster),
				OptionalReadTimeout: 100 * time.Millisecond,
				Clientset:           f.clientset, Recorder: f.recorder, Clock: f.clock,
			})
			g.Expect(err).NotTo(HaveOccurred())

			for range 2 {
				g.Expect(engine.RunOnce(ctx, f.clock.Now()).Err).NotTo(HaveOccurred(), "the loop goes on without the controllers")
				f.clock.Step(10*time.Minute + time.Second)
			}

			g.Expect(group.increases).To(Equal([]int{1}), "a node for the pending pod")
			g.Expect(f.podEvents()).NotTo(ContainElement(ContainSubstring("deleting pod for node scale down")))
			g.Expect(logger.GetSink().(ktesting.Underlier).GetBuffer().String()).To(ContainSubstring(fmt.Sprintf(
				`message="pod default/web-0: NotReplicated: cannot tell whether the pod's ReplicaSet web still exists: %s"`, tt.wantMessage)))
		})
	}
}
