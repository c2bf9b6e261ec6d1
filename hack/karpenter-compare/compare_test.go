package compare

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/fake"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

// instanceTypeCount is the size of Karpenter's benchmark catalogue.
const instanceTypeCount = 400

var podCounts = []int{100, 1000, 5000}

// BenchmarkKarpenter times Karpenter's Solve on the benchmark pods, set up
// as Karpenter's own benchmark does: one NodePool without limits over 400
// fake instance types, no existing nodes.
func BenchmarkKarpenter(b *testing.B) {
	for _, count := range podCounts {
		b.Run(fmt.Sprintf("pods=%d", count), func(b *testing.B) {
			pods := diversePods(count)
			ctx := KarpenterContext(context.Background())
			scheduler, err := NewKarpenterScheduler(ctx, fake.InstanceTypes(instanceTypeCount), pods)
			if err != nil {
				b.Fatal(err)
			}
			var results scheduling.Results
			cpu := benchmark.StartCPU(b)
			for b.Loop() {
				var err error
				if results, err = scheduler.Solve(ctx, pods); err != nil {
					b.Fatal(err)
				}
			}
			cpu.Report()
			cores := 0
			for _, claim := range results.NewNodeClaims {
				cores += cheapestCores(claim.InstanceTypeOptions)
			}
			b.ReportMetric(float64(count-len(results.PodErrors)), "pods-placed")
			b.ReportMetric(float64(len(results.NewNodeClaims)), "nodes")
			b.ReportMetric(float64(cores), "cores")
		})
	}
}

// cheapestCores are the cores of the cheapest instance type a NodeClaim
// may launch as, the one Karpenter launches.
func cheapestCores(options []*cloudprovider.InstanceType) int {
	cheapest := slices.MinFunc(options, func(a, b *cloudprovider.InstanceType) int {
		return compareFloat(a.Offerings.Cheapest().Price, b.Offerings.Cheapest().Price)
	})
	return int(cheapest.Capacity.Cpu().Value())
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// BenchmarkCapiAutoscaler times one scale-up decision (Plan) for the
// benchmark pods, all pending and unschedulable, on an empty cluster
// whose node groups are Karpenter's instance types: all 400, or every
// 20th, each in one zone of three in turn. The options are the engine's
// defaults (least-waste expander) without the cap on nodes per scale-up,
// which Karpenter does not have. It reports the nodes and cores the
// decision adds and the rounds it took to choose them.
func BenchmarkCapiAutoscaler(b *testing.B) {
	for _, every := range []int{1, 20} {
		for _, count := range podCounts {
			b.Run(fmt.Sprintf("groups=%d/pods=%d", instanceTypeCount/every, count), func(b *testing.B) {
				in := capiCluster(diversePods(count), every)
				ctx := klog.NewContext(b.Context(), klog.Background().V(1))
				planner := newPlanner(b)
				snap := snapshot.New(in)
				var plan *scaleup.Plan
				cpu := benchmark.StartCPU(b)
				for b.Loop() {
					plan = planner.Plan(ctx, snap, scaleup.State{})
				}
				cpu.Report()
				nodes, cores := added(snap, plan)
				b.ReportMetric(float64(len(plan.Helped)), "pods-placed")
				b.ReportMetric(float64(nodes), "nodes")
				b.ReportMetric(float64(cores), "cores")
				b.ReportMetric(float64(len(plan.Rounds)), "rounds")
				b.ReportMetric(float64(loopsToHelpAll(ctx, b, planner, in)), "loops")
			})
		}
	}
}

func newPlanner(b *testing.B) *scaleup.ScaleUp {
	planner, err := scaleup.New(scaleup.Options{
		PriorityCutoff: -10,
		Expanders:      []string{scaleup.ExpanderLeastWaste},
		Clock:          clocktesting.NewFakePassiveClock(time.Now()),
		Rand:           rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		b.Fatal(err)
	}
	return planner
}

// capiCluster is an empty cluster with one node group for every every-th
// Karpenter instance type, and pods pending as kube-scheduler leaves them.
func capiCluster(pods []*corev1.Pod, every int) snapshot.Input {
	in := snapshot.Input{}
	for i, instanceType := range fake.InstanceTypes(instanceTypeCount) {
		if (i+1)%every != 0 {
			continue
		}
		capacity := instanceType.Capacity
		template := st.Node(instanceType.Name, capacity.Cpu().String(), capacity.Memory().String(),
			st.WithAllocatable(corev1.ResourcePods, capacity.Pods().String()),
			st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("test-zone-%d", i%3+1)))
		in.NodeGroups = append(in.NodeGroups, &st.NodeGroup{Name: "MachineDeployment/default/" + instanceType.Name, Max: 100000, Template: template})
	}
	for _, pod := range pods {
		pending := pod.DeepCopy()
		pending.Status.Conditions = append(pending.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		})
		in.Pods = append(in.Pods, pending)
	}
	return in
}

// added counts the nodes and cores a plan adds.
func added(snap *snapshot.Snapshot, plan *scaleup.Plan) (nodes, cores int) {
	for _, increase := range plan.Increases {
		template := snap.Template(increase.Group.ID())
		nodes += increase.Delta
		cores += increase.Delta * int(template.Node().Status.Capacity.Cpu().Value())
	}
	return nodes, cores
}

// loopsToHelpAll runs decisions as the engine's loops would, each seeing
// the nodes the ones before asked for as on their way, until one helps no
// more pods, and returns how many helped.
func loopsToHelpAll(ctx context.Context, b *testing.B, planner *scaleup.ScaleUp, in snapshot.Input) int {
	groups := map[string]*st.NodeGroup{}
	for _, group := range in.NodeGroups {
		copied := *group.(*st.NodeGroup)
		groups[copied.ID()] = &copied
	}
	in.NodeGroups = nil
	for _, group := range groups {
		in.NodeGroups = append(in.NodeGroups, group)
	}
	var nominations []scaleup.Nomination
	for loops := 0; ; loops++ {
		plan := planner.Plan(ctx, snapshot.New(in), scaleup.State{Nominations: nominations})
		if len(plan.Increases) == 0 {
			return loops
		}
		for _, increase := range plan.Increases {
			if err := groups[increase.Group.ID()].IncreaseSize(ctx, increase.Delta); err != nil {
				b.Fatal(err)
			}
		}
		nominations = plan.Nominations
	}
}
