package scaledown_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
)

// TestPlanLeavesRoomForEveryMovedPod checks, over generated clusters, the
// promise of a scale-down pass that removes several nodes: the remaining
// nodes hold every pod of the removed ones. The plan is replayed on a
// fresh snapshot with a fresh scheduler, node after node in the plan's
// order, reading each node's pods from the replay itself, so that pods
// moved onto a node by an earlier removal move again with it; and the
// requests of the removed nodes' pods must not exceed what the remaining
// nodes have free, whatever the order.
func TestPlanLeavesRoomForEveryMovedPod(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			in := generatedCluster(seed)
			// Every node is a candidate with a threshold of 1, and all of
			// them may go at once.
			threshold := []float64{0.5, 0.8, 1}[seed%3]
			opts := options(func(o *scaledown.Options) {
				o.Groups.ScaleDownUtilizationThreshold = threshold
				o.MaxParallelDrains, o.MaxEmptyBulkDelete = len(in.Nodes), len(in.Nodes)
			})

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, snapshot.New(in), opts, scaledown.Progress{})

			t.Logf("%d of %d nodes removed, %d empty", len(plan.Unneeded), len(in.Nodes), len(plan.Empty))
			g.Expect(len(plan.Empty)+len(plan.Drain)).To(Equal(len(plan.Unneeded)), "every unneeded node is removed at once")
			replay := snapshot.New(in)
			sched := simulator.NewScheduler(ctx, replay)
			removed := map[string]bool{}
			var moved snapshot.Resources
			for _, u := range plan.Unneeded {
				name := u.Node.Name
				removed[name] = true
				var pods []*corev1.Pod
				for _, podInfo := range replay.NodeInfo(name).Pods() {
					if !podInfo.Pod.IsDaemonSetPod() {
						pod := podInfo.Pod.Full()
						pod.Spec.NodeName = ""
						pods = append(pods, pod)
						moved.Add(podInfo.Requests)
					}
				}
				g.Expect(sched.RemoveNode(name)).To(Succeed())
				result := sched.SchedulePods(pods, simulator.ScheduleOptions{NodeFilter: func(n *snapshot.NodeInfo) bool { return nodefacts.KubeletReady(n.Node()) }})
				g.Expect(result.Unschedulable).To(BeEmpty(), "the pods of %s, removed after %d other nodes, fit on the remaining nodes", name, len(removed)-1)
			}

			var free snapshot.Resources
			for _, nodeInfo := range snapshot.New(in).NodeInfos() {
				if !removed[nodeInfo.Name()] && nodefacts.KubeletReady(nodeInfo.Node()) && !nodeInfo.Node().Spec.Unschedulable {
					free.Add(nodeInfo.Allocatable())
					free.Sub(nodeInfo.Requested())
				}
			}
			g.Expect(moved.MilliCPU).To(BeNumerically("<=", free.MilliCPU), "cpu of the moved pods")
			g.Expect(moved.Memory).To(BeNumerically("<=", free.Memory), "memory of the moved pods")
		})
	}
}

// generatedCluster is a cluster of clustergen, one in two with DRA devices
// and claims, one in three with volumes, whose nodes all belong to one
// node group of min size 0 and run a DaemonSet pod, and whose bound pods
// belong to ReplicaSets that exist: every pod may move.
func generatedCluster(seed uint64) snapshot.Input {
	return generatedClusterOf(clustergen.Options{Seed: seed, NodesPerKind: 5, PendingPods: 1, DRA: seed%2 == 1, Volumes: seed%3 == 2})
}

// generatedClusterOf is generatedCluster with the generator's options.
func generatedClusterOf(opts clustergen.Options) snapshot.Input {
	c := clustergen.Generate(opts)
	group := &st.NodeGroup{Name: "ng", Max: 1000}
	in := snapshot.Input{
		Namespaces: c.Namespaces, CSINodes: c.CSINodes, StorageClasses: c.StorageClasses,
		PersistentVolumes: c.PersistentVolumes, PersistentVolumeClaims: c.PersistentVolumeClaims,
		DeviceClasses: c.DeviceClasses, ResourceSlices: c.ResourceSlices, ResourceClaims: c.ResourceClaims,
		NodeGroups: []nodegroups.NodeGroup{group},
	}
	for _, node := range c.Nodes {
		node.CreationTimestamp = metav1.NewTime(st.Now.Add(-24 * time.Hour))
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
		in.Nodes = append(in.Nodes, node)
		in.Pods = append(in.Pods, pod("agent-"+node.Name, "50m", node.Name, daemonSetPod))
	}
	for _, bound := range c.BoundPods {
		st.OwnedBy(bound.Labels[clustergen.AppLabel])(bound)
		bound.UID = types.UID("uid-" + bound.Namespace + "-" + bound.Name)
		in.Pods = append(in.Pods, bound)
	}
	in.Controllers = st.Controllers(in.Pods...)
	return in
}
