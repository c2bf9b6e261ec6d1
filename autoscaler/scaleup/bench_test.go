package scaleup_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

const (
	podsPerNode      = 30
	pendingShare     = 20 // one pod in 20 (5%) is pending
	pendingOwners    = 50
	runningPodCPU    = "500m"
	runningPodMemory = "1Gi"
)

// syntheticCluster has nodes nodes in groups node groups (three zones,
// five pools, two groups tainted) full of 500m pods, and 5% of 30 pods per
// node pending across 50 Deployments, some with node selectors,
// tolerations, hostname anti-affinity or zone spread.
func syntheticCluster(nodes, nodeGroups int) snapshot.Input {
	in := snapshot.Input{}
	groups := make([]*st.NodeGroup, nodeGroups)
	for i := range groups {
		zone := fmt.Sprintf("zone-%d", i%3)
		opts := []st.NodeOption{st.WithNodeLabels(corev1.LabelTopologyZone, zone, "pool", fmt.Sprintf("pool-%d", i%5))}
		if i < 2 {
			opts = append(opts, st.WithTaint("dedicated", "batch", corev1.TaintEffectNoSchedule))
		}
		groups[i] = &st.NodeGroup{Name: fmt.Sprintf("MachineDeployment/default/md-%02d", i), Max: nodes, Template: st.Node(fmt.Sprintf("md-%02d", i), "16", "64Gi", opts...)}
		in.NodeGroups = append(in.NodeGroups, groups[i])
	}
	total := nodes * podsPerNode
	running := total - total/pendingShare
	for n := range nodes {
		group := groups[n%nodeGroups]
		node := group.Template.DeepCopy()
		node.Name = fmt.Sprintf("node-%05d", n)
		node.Labels = map[string]string{}
		for k, v := range group.Template.Labels {
			node.Labels[k] = v
		}
		node.Labels[corev1.LabelHostname] = node.Name
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
		in.Nodes = append(in.Nodes, node)
	}
	for p := range running {
		node := in.Nodes[p%nodes]
		in.Pods = append(in.Pods, st.Pod(fmt.Sprintf("running-%06d", p), runningPodCPU, runningPodMemory,
			st.OwnedBy(fmt.Sprintf("app-%d", p/50)), st.OnNode(node.Name), st.WithPodLabels("app", fmt.Sprintf("app-%d", p/50))))
	}
	for p := range total - running {
		in.Pods = append(in.Pods, pendingPod(p))
	}
	return in
}

// pendingPod is the p-th pending pod of the synthetic cluster.
func pendingPod(p int) *corev1.Pod {
	owner := p % pendingOwners
	opts := []st.PodOption{st.OwnedBy(fmt.Sprintf("pending-%d", owner)), st.WithPodLabels("app", fmt.Sprintf("pending-%d", owner))}
	switch owner % 10 {
	case 1:
		opts = append(opts, st.WithNodeSelector("pool", fmt.Sprintf("pool-%d", owner%5)))
	case 2:
		opts = append(opts, st.WithToleration("dedicated", "batch", corev1.TaintEffectNoSchedule))
	case 3:
		opts = append(opts, withRequiredAntiAffinity(corev1.LabelHostname, "app", fmt.Sprintf("pending-%d", owner)))
	case 4:
		opts = append(opts, withZoneSpread("app", fmt.Sprintf("pending-%d", owner)))
	}
	return st.Pod(fmt.Sprintf("pending-%06d", p), fmt.Sprintf("%dm", 1500+100*(owner%10)), "2Gi", opts...)
}

// withBacklog gives the synthetic cluster pending pods of the same mix up
// to pending in all.
func withBacklog(in snapshot.Input, pending int) snapshot.Input {
	had := 0
	for _, pod := range in.Pods {
		if pod.Spec.NodeName == "" {
			had++
		}
	}
	for p := had; p < pending; p++ {
		in.Pods = append(in.Pods, pendingPod(p))
	}
	return in
}

// BenchmarkScaleUpBacklog measures one scale-up decision on the 1,000-node
// synthetic cluster with 50,000 pending pods of its mix, and with volumes
// (withVolumes), with the default MaxPendingPodsPerLoop, twice as many, and
// no bound.
func BenchmarkScaleUpBacklog(b *testing.B) {
	// withVolumes changes the pods it is given: each mix has its own.
	backlog := func() snapshot.Input { return withBacklog(syntheticCluster(1000, benchmark.DefaultGroups), 50000) }
	for _, mix := range []struct {
		name string
		in   snapshot.Input
	}{{"mix", backlog()}, {"volumes", withVolumes(backlog())}} {
		name, in := mix.name, mix.in
		for _, maxPods := range []int{autoscaler.DefaultConfig().MaxPendingPodsPerLoop, 20000, 0} {
			b.Run(fmt.Sprintf("%s/maxPendingPodsPerLoop=%d", name, maxPods), func(b *testing.B) {
				benchmarkScaleUp(b, in, func(o *scaleup.Options) { o.MaxPendingPodsPerLoop = maxPods })
			})
		}
	}
}

const benchmarkDriver = "ebs.csi.example.com"

// withVolumes gives the synthetic cluster volumes: every node a CSI attach
// limit of 25, every tenth running pod a CSI volume in its node's zone,
// the pods of one pending Deployment in ten a claim each bound to a zonal
// volume (as StatefulSet pods have), and of another one in ten a claim of
// a WaitForFirstConsumer class limited to two zones. Pods with claims of
// their own are pod groups of their own: the costly case.
func withVolumes(in snapshot.Input) snapshot.Input {
	in.StorageClasses = []*storagev1.StorageClass{st.StorageClass("two-zones", benchmarkDriver, storagev1.VolumeBindingWaitForFirstConsumer, "zone-0", "zone-1")}
	zoneOf := map[string]string{}
	for _, node := range in.Nodes {
		zoneOf[node.Name] = node.Labels[corev1.LabelTopologyZone]
		in.CSINodes = append(in.CSINodes, st.CSINode(node.Name, benchmarkDriver, 25))
	}
	bind := func(pod *corev1.Pod, zone string) {
		claim, volume := "data-"+pod.Name, "pv-"+pod.Name
		st.WithClaims(claim)(pod)
		in.PersistentVolumeClaims = append(in.PersistentVolumeClaims, st.BoundClaim(claim, volume))
		in.PersistentVolumes = append(in.PersistentVolumes, st.PersistentVolume(volume,
			st.BoundTo(claim), st.CSIVolume(benchmarkDriver), st.RequiringNode(corev1.LabelTopologyZone, zone)))
	}
	for i, pod := range in.Pods {
		switch owner := pod.OwnerReferences[0].Name; {
		case pod.Spec.NodeName != "" && i%10 == 0:
			bind(pod, zoneOf[pod.Spec.NodeName])
		case owner == "pending-5" || owner == "pending-15" || owner == "pending-25" || owner == "pending-35" || owner == "pending-45":
			bind(pod, fmt.Sprintf("zone-%d", i%3))
		case owner == "pending-6" || owner == "pending-16" || owner == "pending-26" || owner == "pending-36" || owner == "pending-46":
			claim := "scratch-" + pod.Name
			st.WithClaims(claim)(pod)
			in.PersistentVolumeClaims = append(in.PersistentVolumeClaims, st.UnboundClaim(claim, "two-zones"))
		}
	}
	return in
}

// gpuGroups is the number of node groups of the synthetic cluster whose
// nodes publish GPUs through DRA, and gpusPerNode how many.
const (
	gpuGroups   = 4
	gpusPerNode = 8
)

// withClaims gives the synthetic cluster DRA devices: the nodes of the
// first gpuGroups groups publish a ResourceSlice of 8 GPUs each, 6 of them
// allocated to claims of 3 running pods of the node; the pods of one
// pending Deployment in ten ask, each through a claim of its own made from
// a template, for 2 GPUs of the class, whose CEL selector matches the
// driver and the model. Pods with claims are pod groups of their own.
func withClaims(in snapshot.Input) snapshot.Input {
	in.DeviceClasses = []*resourceapi.DeviceClass{st.DeviceClass("gpu", st.GPUDriver, `device.attributes["gpu.example.com"].model == "a100"`)}
	in.ResourceClaimTemplates = []*resourceapi.ResourceClaimTemplate{st.ResourceClaimTemplate("two-gpus", "gpu", 2)}
	gpuNodes := map[string]bool{}
	for _, group := range in.NodeGroups[:gpuGroups] {
		for _, name := range group.(*st.NodeGroup).Nodes {
			gpuNodes[name] = true
			in.ResourceSlices = append(in.ResourceSlices, st.ResourceSlice(name, st.GPUDriver, st.GPUs(gpusPerNode, "a100")...))
		}
	}
	held := map[string]int{}
	for _, pod := range in.Pods {
		node := pod.Spec.NodeName
		if node != "" && gpuNodes[node] && held[node] < 3 {
			first := 2 * held[node]
			claim := st.AllocatedOn(st.ResourceClaim("gpus-"+pod.Name, "gpu", 2), node, st.GPUDriver,
				fmt.Sprintf("gpu-%d", first), fmt.Sprintf("gpu-%d", first+1))
			st.WithResourceClaim(claim.Name)(pod)
			in.ResourceClaims = append(in.ResourceClaims, claim)
			held[node]++
			continue
		}
		if owner := pod.OwnerReferences[0].Name; node == "" && strings.HasPrefix(owner, "pending-") && strings.HasSuffix(owner, "7") {
			st.WithResourceClaimTemplate("gpus", "two-gpus")(pod)
		}
	}
	return in
}

func withRequiredAntiAffinity(topologyKey, key, value string) st.PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}, TopologyKey: topologyKey,
			}},
		}}
	}
}

func withZoneSpread(key, value string) st.PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
		}}
	}
}

// BenchmarkScaleUp measures one scale-up decision from the listed objects:
// building the snapshot and planning.
// The 10,000-node size takes seconds per decision and about 2 GB for its
// input: run it alone with -benchtime 1x.
func BenchmarkScaleUp(b *testing.B) {
	for _, size := range []benchmark.ClusterSize{
		{Nodes: 100, Groups: benchmark.DefaultGroups},
		{Nodes: 1000, Groups: benchmark.DefaultGroups},
		{Nodes: 1000, Groups: 100},
		{Nodes: 1000, Groups: 500},
		{Nodes: 5000, Groups: benchmark.DefaultGroups},
		{Nodes: 10000, Groups: benchmark.DefaultGroups},
	} {
		b.Run(size.Name(podsPerNode), func(b *testing.B) {
			benchmarkScaleUp(b, syntheticCluster(size.Nodes, size.Groups))
		})
	}
	// Volumes make pods with claims of their own groups of one.
	b.Run(benchmark.ClusterSize{Nodes: 1000, Groups: benchmark.DefaultGroups}.Name(podsPerNode)+"/volumes", func(b *testing.B) {
		benchmarkScaleUp(b, withVolumes(syntheticCluster(1000, benchmark.DefaultGroups)))
	})
}

// BenchmarkScaleUpWithClaims measures scale-up decisions with DRA claims
// (withClaims): the claim check runs the allocator of
// k8s.io/dynamic-resource-allocation for every pod with claims on every
// node it tries.
func BenchmarkScaleUpWithClaims(b *testing.B) {
	for _, size := range []benchmark.ClusterSize{
		{Nodes: 100, Groups: benchmark.DefaultGroups},
		{Nodes: 1000, Groups: benchmark.DefaultGroups},
	} {
		b.Run(size.Name(podsPerNode), func(b *testing.B) {
			benchmarkScaleUp(b, withClaims(syntheticCluster(size.Nodes, size.Groups)))
		})
	}
}

// benchmarkedScaleUp is the scale-up the benchmarks measure: expanders
// least-waste then random, balancing on.
func benchmarkedScaleUp(b *testing.B, mutate ...func(*scaleup.Options)) *scaleup.ScaleUp {
	s, err := scaleup.New(options(append([]func(*scaleup.Options){func(o *scaleup.Options) {
		o.Expanders = []string{scaleup.ExpanderLeastWaste, scaleup.ExpanderRandom}
		o.BalanceSimilarNodeGroups = true
	}}, mutate...)...))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// benchmarkScaleUp measures decisions on in.
func benchmarkScaleUp(b *testing.B, in snapshot.Input, mutate ...func(*scaleup.Options)) {
	ctx := klog.NewContext(b.Context(), klog.Background().V(1))
	s := benchmarkedScaleUp(b, mutate...)
	b.ReportAllocs()
	var plan *scaleup.Plan
	cpu := benchmark.StartCPU(b)
	for b.Loop() {
		plan = s.Plan(ctx, snapshot.New(in), scaleup.State{})
	}
	// CPU time, garbage collection included, tells the cost of a
	// decision even when other processes share the machine.
	cpu.Report()
	b.ReportMetric(float64(len(plan.Helped)), "helped-pods")
	b.ReportMetric(float64(len(plan.NoScaleUp)), "no-scale-up-pods")
	b.ReportMetric(float64(len(plan.Deferred)), "deferred-pods")
	b.ReportMetric(float64(plan.NewNodes()), "new-nodes")
}

// BenchmarkScaleUpPlan measures planning alone on a snapshot built once,
// which planning leaves as it found it.
// It also reports the heap the snapshot holds (benchmark.NewSnapshot).
func BenchmarkScaleUpPlan(b *testing.B) {
	for _, size := range benchmark.PlanSizes {
		b.Run(size.Name(podsPerNode), func(b *testing.B) {
			in := syntheticCluster(size.Nodes, size.Groups)
			snap, heap := benchmark.NewSnapshot(in)
			ctx := klog.NewContext(b.Context(), klog.Background().V(1))
			s := benchmarkedScaleUp(b)
			b.ReportAllocs()
			var plan *scaleup.Plan
			cpu := benchmark.StartCPU(b)
			for b.Loop() {
				plan = s.Plan(ctx, snap, scaleup.State{})
			}
			cpu.Report()
			b.ReportMetric(float64(len(plan.Helped)), "helped-pods")
			b.ReportMetric(float64(len(plan.NoScaleUp)), "no-scale-up-pods")
			heap.Report(b)
		})
	}
}
