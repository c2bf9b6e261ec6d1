package autoscaler_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

	f.runPastUnneededTime(context.Background(), t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name))
	g.Expect(f.podEvents()).NotTo(ContainElement(ContainSubstring("deleting pod for node scale down")), "its pod goes with it, not evicted before")
}

// movableWebFixture is a group of two nodes, the first busy, the second
// running only web-0, of the ReplicaSet web, which fits on the first: the
// second node is unneeded, and drained after the unneeded time.
func movableWebFixture(t *testing.T, others ...client.Object) (*fixture, *fakeGroup, []*corev1.Node) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	web := st.Pod("web-0", "500m", "512Mi", st.OwnedBy("web"), st.OnNode(nodes[1].Name))
	return newFixture(t, []*fakeGroup{group}, append(objects(nodes, busy, web), others...)...), group, nodes
}

// recordedLogs returns a context whose logger keeps what it logs, and
// what it logged so far.
func recordedLogs(t *testing.T) (context.Context, func() string) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return klog.NewContext(context.Background(), logger), func() string {
		return logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	}
}

var evicted = ContainElement(ContainSubstring("deleting pod for node scale down"))

// The upstream FAQ promises that a pod no controller object backs keeps
// its node: once evicted, nothing recreates it. A ReplicaSet deleted
// without its pods (kubectl delete --cascade=orphan, or before the garbage
// collector gets to them) leaves such pods.
func TestNodeWhosePodsReplicaSetIsGoneIsKept(t *testing.T) {
	t.Run("the ReplicaSet exists: the node is drained", func(t *testing.T) {
		g := NewWithT(t)
		f, _, _ := movableWebFixture(t)

		f.runPastUnneededTime(context.Background(), t)

		g.Expect(f.podEvents()).To(evicted)
	})
	t.Run("the ReplicaSet is gone: the node is kept", func(t *testing.T) {
		g := NewWithT(t)
		ctx, logs := recordedLogs(t)
		f, _, nodes := movableWebFixture(t)
		g.Expect(f.cluster.Delete(ctx, &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}})).To(Succeed())

		f.runPastUnneededTime(ctx, t)

		g.Expect(f.podEvents()).NotTo(evicted)
		g.Expect(f.engine.Status().UnneededNodes).To(BeZero())
		g.Expect(logs()).To(ContainSubstring(fmt.Sprintf(
			`Node cannot be removed loop=2 node=%q reason="BlockedByPod" message="pod default/web-0: NotReplicated: the pod's ReplicaSet web no longer exists to recreate it"`, nodes[1].Name)))
	})
}

// Controllers that cannot be read (a workload role without them, a cache
// whose informer cannot sync) do not stop the loop, nor hold it longer
// than OptionalReadTimeout: scale-up goes on, and scale-down keeps the
// nodes of the pods whose controllers it cannot find.
func TestControllersThatCannotBeReadKeepTheNodesOfTheirPods(t *testing.T) {
	for _, failure := range readFailures(&metav1.PartialObjectMetadataList{}) {
		t.Run(failure.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx, logs := recordedLogs(t)
			f, group, _ := movableWebFixture(t, st.Pod("pending-0", "3800m", "1Gi", st.OwnedBy("pending")))
			f.engine = f.engineReading(t, failure.cluster(f.cluster))

			f.runPastUnneededTime(ctx, t)

			g.Expect(group.increases).To(Equal([]int{1}), "a node for the pending pod")
			g.Expect(f.podEvents()).NotTo(evicted)
			g.Expect(logs()).To(ContainSubstring(fmt.Sprintf(
				`message="pod default/web-0: NotReplicated: cannot tell whether the pod's ReplicaSet web still exists: listing ReplicationControllers of the cluster: %s"`, failure.err)))
		})
	}
}
