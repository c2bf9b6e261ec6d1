package simulator_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// TestScansPlaceAsAFullScanDoes drives two schedulers on two copies of one
// cluster through the same random sequence of forks, reverts, commits,
// node removals, node additions and pod placements, one with Scans and
// one without: every pod must land on the same node, and every pod that
// fits nowhere must be told with the same message.
func TestScansPlaceAsAFullScanDoes(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			rnd := rand.New(rand.NewPCG(seed, 1))
			in := scansCluster(rnd)
			remembering := simulator.NewScheduler(ctx, snapshot.New(in))
			scanning := simulator.NewScheduler(ctx, snapshot.New(in))
			scans := remembering.NewScans()
			ready := func(n *snapshot.NodeInfo) bool { return n.Node().Labels["ready"] != "false" }
			level, pods, added := 0, 0, 0
			for step := range 60 {
				switch op := rnd.IntN(10); {
				case op == 0:
					remembering.Fork()
					scanning.Fork()
					level++
				case op == 1 && level > 0:
					remembering.Revert()
					scanning.Revert()
					level--
				case op == 2 && level > 0:
					remembering.Commit()
					scanning.Commit()
					level--
				case op == 3:
					nodes := scanning.Snapshot().NodeInfos()
					if len(nodes) > 1 {
						name := nodes[rnd.IntN(len(nodes))].Name()
						g.Expect(remembering.RemoveNode(name)).To(Succeed())
						g.Expect(scanning.RemoveNode(name)).To(Succeed())
					}
				case op == 4:
					node := st.Node(fmt.Sprintf("added-%d", added), "4", "8Gi")
					added++
					g.Expect(remembering.AddNode(snapshot.NewNodeInfo(node))).To(Succeed())
					g.Expect(scanning.AddNode(snapshot.NewNodeInfo(node.DeepCopy()))).To(Succeed())
				default:
					batch := scansPods(rnd, pods, 1+rnd.IntN(12))
					pods += len(batch)
					stop := rnd.IntN(2) == 0
					got := remembering.SchedulePods(batch, simulator.ScheduleOptions{NodeFilter: ready, Scans: scans, StopAtUnschedulable: stop})
					want := scanning.SchedulePods(copies(batch), simulator.ScheduleOptions{NodeFilter: ready, StopAtUnschedulable: stop})
					g.Expect(placements(got)).To(Equal(placements(want)), "step %d: the pods land where a full scan puts them", step)
					g.Expect(messages(got)).To(Equal(messages(want)), "step %d: the pods that fit nowhere are told why alike", step)
				}
			}
		})
	}
}

// scansCluster has nodes of three sizes, some unready, some tainted, some
// labelled, partly filled.
func scansCluster(rnd *rand.Rand) snapshot.Input {
	var in snapshot.Input
	for i := range 12 + rnd.IntN(12) {
		opts := []st.NodeOption{st.WithNodeLabels("disk", []string{"ssd", "hdd"}[rnd.IntN(2)])}
		if rnd.IntN(8) == 0 {
			opts = append(opts, st.WithNodeLabels("ready", "false"))
		}
		if rnd.IntN(6) == 0 {
			opts = append(opts, st.WithTaint("dedicated", "batch", corev1.TaintEffectNoSchedule))
		}
		cpu := []string{"2", "4", "8"}[rnd.IntN(3)]
		node := st.Node(fmt.Sprintf("node-%02d", i), cpu, "16Gi", opts...)
		in.Nodes = append(in.Nodes, node)
		for j := range rnd.IntN(4) {
			in.Pods = append(in.Pods, st.Pod(fmt.Sprintf("%s-bound-%d", node.Name, j), "500m", "1Gi", st.OnNode(node.Name)))
		}
	}
	return in
}

// scansPods are n bare pods of a few kinds: requests, a node selector, a
// toleration, a host port; pods of one kind are alike but for their name.
func scansPods(rnd *rand.Rand, first, n int) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range n {
		cpu := []string{"250m", "500m", "1", "3"}[rnd.IntN(4)]
		var opts []st.PodOption
		switch rnd.IntN(5) {
		case 0:
			opts = append(opts, st.WithNodeSelector("disk", "ssd"))
		case 1:
			opts = append(opts, st.WithToleration("dedicated", "batch", corev1.TaintEffectNoSchedule))
		case 2:
			opts = append(opts, st.WithHostPort(8080))
		}
		pods = append(pods, st.Pod(fmt.Sprintf("pod-%03d", first+i), cpu, "1Gi", opts...))
	}
	return pods
}

func copies(pods []*corev1.Pod) []*corev1.Pod {
	copied := make([]*corev1.Pod, len(pods))
	for i, pod := range pods {
		copied[i] = pod.DeepCopy()
	}
	return copied
}

func messages(result simulator.ScheduleResult) map[string]string {
	told := map[string]string{}
	for _, u := range result.Unschedulable {
		told[u.Pod.Name] = u.Message()
	}
	return told
}
