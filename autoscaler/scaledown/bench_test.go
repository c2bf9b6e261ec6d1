package scaledown_test

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

const (
	podsPerNode   = 30
	idleShare     = 5  // one node in 5 (20%) is underutilized
	busyPods      = 34 // 300m/1Gi each: 66% of cpu
	idlePods      = 9  // 200m/512Mi each: 12% of cpu
	podsPerOwner  = 50
	benchNodeSize = "16"
)

// underutilizedCluster has nodes 16-core nodes in nodeGroups node groups,
// each with a DaemonSet pod; four in five run 34 pods of 300m, one in five
// 9 pods of 200m, 30 pods per node on average, all owned by ReplicaSets of
// 50 pods, which exist.
func underutilizedCluster(nodes, nodeGroups int) snapshot.Input {
	return clusterOf(nodes, nodeGroups, false)
}

// clusterOf is underutilizedCluster, but with stuck every other
// underutilized node runs, instead of its 9 small pods, one pod of 9 cores
// spread over the zones: 57% of its cpu, under a threshold of 0.6, but no
// other node has room for the pod, so the node stays after the pod was
// tried on every node.
func clusterOf(nodes, nodeGroups int, stuck bool) snapshot.Input {
	in := snapshot.Input{}
	groups := make([]*st.NodeGroup, nodeGroups)
	for i := range groups {
		groups[i] = &st.NodeGroup{Name: fmt.Sprintf("MachineDeployment/default/md-%02d", i), Max: nodes}
		in.NodeGroups = append(in.NodeGroups, groups[i])
	}
	pods := 0
	addPods := func(nodeName string, n int, cpu, memory string, opts ...st.PodOption) {
		for range n {
			owner := fmt.Sprintf("app-%d", pods/podsPerOwner)
			opts := append([]st.PodOption{st.OwnedBy(owner), st.OnNode(nodeName), st.WithPodLabels("app", owner)}, opts...)
			in.Pods = append(in.Pods, st.Pod(fmt.Sprintf("pod-%06d", pods), cpu, memory, opts...))
			pods++
		}
	}
	for n := range nodes {
		group := groups[n%nodeGroups]
		node := node(fmt.Sprintf("node-%05d", n))
		node = st.Node(node.Name, benchNodeSize, "64Gi", createdAt(node.CreationTimestamp.Time), st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("zone-%d", n%3)))
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
		in.Nodes = append(in.Nodes, node)
		in.Pods = append(in.Pods, pod(fmt.Sprintf("agent-%05d", n), "100m", node.Name, daemonSetPod))
		switch {
		case n%idleShare == 0 && stuck && n/idleShare%2 == 1:
			addPods(node.Name, 1, "9", "4Gi", spreadOverZones)
		case n%idleShare == 0:
			addPods(node.Name, idlePods, "200m", "512Mi")
		default:
			addPods(node.Name, busyPods, "300m", "1Gi")
		}
	}
	in.Controllers = st.Controllers(in.Pods...)
	return in
}

// spreadOverZones spreads the pods of the app over the zones, at most one
// more in one than in another.
func spreadOverZones(pod *corev1.Pod) {
	pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
		MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": pod.Labels["app"]}},
	})
}

// BenchmarkPlan measures one scale-down planning pass on a snapshot the
// loop has already built (it is shared with scale-up). It also reports the
// heap the snapshot holds (benchmark.NewSnapshot).
// The 10,000-node size takes about 2 GB for its input: run it alone, with
// -benchtime 1x or a few x.
func BenchmarkPlan(b *testing.B) {
	for _, size := range benchmark.PlanSizes {
		b.Run(size.Name(podsPerNode), func(b *testing.B) {
			in := underutilizedCluster(size.Nodes, size.Groups)
			ctx := klog.NewContext(b.Context(), klog.Background().V(1))
			snap, heap := benchmark.NewSnapshot(in)
			opts := options()
			plan := planPasses(ctx, b, snap, opts)
			b.ReportMetric(float64(len(plan.Unneeded)), "unneeded-nodes")
			heap.Report(b)
		})
	}
}

var _ nodegroups.NodeGroup = &st.NodeGroup{}

// BenchmarkConsolidate measures a planning pass with delete consolidation
// on, over the clusters of 1,000 nodes of BenchmarkPlan under a threshold
// that keeps every node from scale-down, so that consolidation runs: the
// nodes it removes are the 9-pod ones, whose pods fit on the others, up
// to its budget and its simulations. Under Replace, it also tries to
// replace them by new nodes of four groups (built from their members),
// which saves no more here. It must take under a second.
func BenchmarkConsolidate(b *testing.B) {
	for _, policy := range []scaledown.ConsolidationPolicy{scaledown.ConsolidationDelete, scaledown.ConsolidationReplace} {
		for _, size := range benchmark.PlanSizes {
			if size.Nodes != 1000 {
				continue
			}
			name := size.Name(podsPerNode)
			if policy != scaledown.ConsolidationDelete {
				name += "/policy=" + string(policy)
			}
			b.Run(name, func(b *testing.B) { benchmarkConsolidate(b, size, policy) })
		}
	}
}

func benchmarkConsolidate(b *testing.B, size benchmark.ClusterSize, policy scaledown.ConsolidationPolicy) {
	in := underutilizedCluster(size.Nodes, size.Groups)
	ctx := klog.NewContext(b.Context(), klog.Background().V(1))
	snap, heap := benchmark.NewSnapshot(in)
	opts := options(func(o *scaledown.Options) {
		o.Groups.ScaleDownUtilizationThreshold = 0.1
		o.Consolidation = consolidation(policy)
	})
	if failed := simulator.SetTemplates(ctx, snap, opts.NodeRules); len(failed) > 0 {
		b.Fatal(failed)
	}
	plan := planPasses(ctx, b, snap, opts)
	if plan.Consolidation == nil {
		b.Fatal("consolidation removed nothing")
	}
	b.ReportMetric(float64(len(plan.Consolidation.Removals)), "consolidated-nodes")
	heap.Report(b)
}

// crowdedCluster has nodes 4-core 16Gi nodes in nodeGroups node groups,
// each with a DaemonSet pod and one pod of 2.5 cores that fits on no other
// node, and the node group md-large at zero nodes, whose 16-core template
// takes six of those pods. Prices are the defaults, proportional to
// capacity: six small nodes cost 1.5 times one large node.
func crowdedCluster(nodes, nodeGroups int, largePrice *pricing.Price) snapshot.Input {
	in := snapshot.Input{}
	groups := make([]*st.NodeGroup, nodeGroups)
	for i := range groups {
		groups[i] = &st.NodeGroup{Name: fmt.Sprintf("MachineDeployment/default/md-%02d", i), Max: nodes}
		in.NodeGroups = append(in.NodeGroups, groups[i])
	}
	in.NodeGroups = append(in.NodeGroups, &st.NodeGroup{Name: "MachineDeployment/default/md-large", Max: nodes, Template: st.Node("large", "16", "64Gi"), Price: largePrice})
	for n := range nodes {
		group := groups[n%nodeGroups]
		node := node(fmt.Sprintf("node-%05d", n), st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("zone-%d", n%3)))
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
		in.Nodes = append(in.Nodes, node)
		in.Pods = append(in.Pods,
			pod(fmt.Sprintf("agent-%05d", n), "100m", node.Name, daemonSetPod),
			st.Pod(fmt.Sprintf("pod-%05d", n), "2500m", "1Gi", st.OwnedBy(fmt.Sprintf("app-%d", n/podsPerOwner)), st.OnNode(node.Name)))
	}
	in.Controllers = st.Controllers(in.Pods...)
	return in
}

// BenchmarkConsolidateReplace measures a planning pass with replace
// consolidation on, over 1,000 crowded nodes: no node can be deleted (the
// delete pass runs its 100 simulations for nothing), and the replace pass
// replaces small nodes by large ones within the 100 simulations of the
// large group, and tries three small groups for nothing. With the large
// nodes priced out ("none"), every simulation of the pass is in vain: the
// most a pass does. It must take under a second. The templates are built
// once, as the engine builds them once per loop before it plans.
func BenchmarkConsolidateReplace(b *testing.B) {
	for _, bench := range []struct {
		groups     int
		largePrice *pricing.Price
	}{{groups: benchmark.DefaultGroups}, {groups: 100}, {groups: benchmark.DefaultGroups, largePrice: ptr.To[pricing.Price](100_000_000)}} {
		size := benchmark.ClusterSize{Nodes: 1000, Groups: bench.groups}
		name := size.Name(2)
		if bench.largePrice != nil {
			name += "/none"
		}
		b.Run(name, func(b *testing.B) {
			in := crowdedCluster(size.Nodes, size.Groups, bench.largePrice)
			ctx := klog.NewContext(b.Context(), klog.Background().V(1))
			snap, heap := benchmark.NewSnapshot(in)
			opts := options(func(o *scaledown.Options) {
				o.Consolidation = consolidation(scaledown.ConsolidationReplace)
			})
			if failed := simulator.SetTemplates(ctx, snap, opts.NodeRules); len(failed) > 0 {
				b.Fatal(failed)
			}
			plan := planPasses(ctx, b, snap, opts)
			switch {
			case bench.largePrice != nil && plan.Consolidation != nil:
				b.Fatal("consolidation replaced nodes by large nodes priced out")
			case bench.largePrice != nil:
			case plan.Consolidation == nil || plan.Consolidation.Replacement == nil:
				b.Fatal("consolidation replaced nothing")
			default:
				b.ReportMetric(float64(len(plan.Consolidation.Removals)), "replaced-nodes")
				b.ReportMetric(float64(plan.Consolidation.Replacement.Nodes()), "new-nodes")
			}
			heap.Report(b)
		})
	}
}

// BenchmarkPlanWorkers measures a scale-down pass on 1 and 2 workers
// (Options.Workers, DefaultMinParallelWork): over the 1,000 nodes of
// BenchmarkPlan, where every candidate goes and the pass stays on one
// goroutine, and over 1,000 and 5,000 nodes with stuck nodes, one in ten
// (clusterOf), which the workers try together. The 5,000-node pass takes
// seconds: run it with -benchtime 1x or a few x.
func BenchmarkPlanWorkers(b *testing.B) {
	for _, size := range []struct {
		nodes int
		stuck bool
	}{{1000, false}, {1000, true}, {5000, true}} {
		in := clusterOf(size.nodes, benchmark.DefaultGroups, size.stuck)
		snap, _ := benchmark.NewSnapshot(in)
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("nodes=%d/stuck=%v/workers=%d", size.nodes, size.stuck, workers), func(b *testing.B) {
				ctx := klog.NewContext(b.Context(), klog.Background().V(1))
				opts := options(func(o *scaledown.Options) {
					o.Groups.ScaleDownUtilizationThreshold = 0.6
					o.Workers, o.MinParallelWork = workers, scaledown.DefaultMinParallelWork
				})
				plan := planPasses(ctx, b, snap, opts)
				b.ReportMetric(float64(len(plan.Unneeded)), "unneeded-nodes")
			})
		}
	}
}

// planPasses plans a new pass in each iteration, with a new planner each
// time (one that remembers the last pass would order the candidates
// differently), reports the CPU time, garbage collection included, which
// tells the cost of a pass even when other processes share the machine,
// and returns the last plan.
func planPasses(ctx context.Context, b *testing.B, snap *snapshot.Snapshot, opts scaledown.Options) *scaledown.Plan {
	b.Helper()
	b.ReportAllocs()
	var plan *scaledown.Plan
	cpu := benchmark.StartCPU(b)
	for b.Loop() {
		planner := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now))
		plan = planner.Plan(ctx, snap, opts, scaledown.Progress{})
	}
	cpu.Report()
	return plan
}

// consolidation are the engine's consolidation options with policy.
func consolidation(policy scaledown.ConsolidationPolicy) scaledown.ConsolidationOptions {
	return scaledown.ConsolidationOptions{
		Policy: policy, Budget: intstr.FromString("10%"),
		MaxSimulations: autoscaler.DefaultConfig().Consolidation.MaxSimulations,
	}
}

// BenchmarkConsolidateWorkers measures consolidation passes on 1 and 2
// workers (Options.Workers, DefaultMinParallelWork) over 1,000 nodes: the
// deletion of BenchmarkConsolidate, whose candidates mostly go, and the
// replacement of BenchmarkConsolidateReplace with the large nodes priced
// out, whose every simulation stays, the most a pass does.
func BenchmarkConsolidateWorkers(b *testing.B) {
	for _, bench := range []struct {
		name   string
		in     snapshot.Input
		policy scaledown.ConsolidationPolicy
		// threshold keeps scale-down from removing nodes itself.
		threshold float64
	}{
		{name: "delete", in: underutilizedCluster(1000, benchmark.DefaultGroups), policy: scaledown.ConsolidationDelete, threshold: 0.1},
		{name: "replace/none", in: crowdedCluster(1000, benchmark.DefaultGroups, ptr.To[pricing.Price](100_000_000)), policy: scaledown.ConsolidationReplace, threshold: 0.5},
	} {
		snap, _ := benchmark.NewSnapshot(bench.in)
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("nodes=1000/%s/workers=%d", bench.name, workers), func(b *testing.B) {
				ctx := klog.NewContext(b.Context(), klog.Background().V(1))
				opts := options(func(o *scaledown.Options) {
					o.Groups.ScaleDownUtilizationThreshold = bench.threshold
					o.Consolidation = consolidation(bench.policy)
					o.Workers, o.MinParallelWork = workers, scaledown.DefaultMinParallelWork
				})
				if failed := simulator.SetTemplates(ctx, snap, opts.NodeRules); len(failed) > 0 {
					b.Fatal(failed)
				}
				plan := planPasses(ctx, b, snap, opts)
				removed := 0
				if plan.Consolidation != nil {
					removed = len(plan.Consolidation.Removals)
				}
				b.ReportMetric(float64(removed), "consolidated-nodes")
			})
		}
	}
}
