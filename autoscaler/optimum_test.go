package autoscaler_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// mixGroup is a node group of a mix of `make optimum` (hack/optimum):
// nodes of cpu cores and gib GiB, less 100m and 10Mi kube-reserved, at a
// price per hour, in a zone.
type mixGroup struct {
	name     string
	cpu, gib int64
	price    pricing.Price
	zone     string
}

// mixApp is an app of a mix: replicas alike pods, spread over the zones
// (maxSkew 1) when spread, one a node when anti (required pod
// anti-affinity by hostname).
type mixApp struct {
	name             string
	replicas         int
	milliCPU, memMiB int64
	spread, anti     bool
}

// mixCluster is the cluster of a mix, as hack/optimum builds it: a group
// per mixGroup without nodes, a tainted control-plane node in each zone
// (so that each zone is a topology domain) and the apps' pods pending.
func mixCluster(groups []mixGroup, apps []mixApp) ([]*fakeGroup, []client.Object) {
	var fakeGroups []*fakeGroup
	var nodes []*corev1.Node
	zones := map[string]bool{}
	for _, g := range groups {
		template := st.Node("template-"+g.name, fmt.Sprint(g.cpu), fmt.Sprintf("%dGi", g.gib),
			st.WithAllocatable(corev1.ResourceCPU, fmt.Sprintf("%dm", g.cpu*1000-100)),
			st.WithAllocatable(corev1.ResourceMemory, fmt.Sprintf("%dMi", g.gib*1024-10)),
			st.WithNodeLabels(corev1.LabelTopologyZone, g.zone, corev1.LabelInstanceTypeStable, g.name))
		fakeGroups = append(fakeGroups, &fakeGroup{id: "MachineDeployment/default/" + g.name, max: 100, template: template, price: ptr.To(g.price)})
		if !zones[g.zone] {
			zones[g.zone] = true
			nodes = append(nodes, st.Node("control-plane-"+g.zone, "4", "16Gi", st.WithNodeLabels(corev1.LabelTopologyZone, g.zone),
				st.WithTaint("node-role.kubernetes.io/control-plane", "", corev1.TaintEffectNoSchedule)))
		}
	}
	var pods []*corev1.Pod
	for _, app := range apps {
		opts := []st.PodOption{st.WithPodLabels("app", app.name)}
		if app.spread {
			opts = append(opts, spreadOver(corev1.LabelTopologyZone, app.name))
		}
		if app.anti {
			opts = append(opts, apartFrom(app.name))
		}
		pods = append(pods, st.Replicas(app.name, app.replicas, fmt.Sprintf("%dm", app.milliCPU), fmt.Sprintf("%dMi", app.memMiB), opts...)...)
	}
	return fakeGroups, objects(nodes, pods...)
}

// apartFrom keeps the pods of app one a node, as a required pod
// anti-affinity by hostname does.
func apartFrom(app string) st.PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, TopologyKey: corev1.LabelHostname,
			}},
		}}
	}
}

// The cost of the engine's scale-up, with the price expander first, on
// mixes of `make optimum -seed=1` where it was furthest from the exact
// optimum CBC computes, or from Karpenter's, and on one where it is at
// the optimum and Karpenter is not (docs/cost.md, "Distance to the
// optimum"); 1/14, 1/18, 1/22 and 1/35 with anti-affinity, where a
// plan planned another way costs less; 2/08, 2/12 and 1/32, where the
// plan's pods must all be placed again to fit fewer or cheaper nodes.
// Consolidation (Delete) removes no node on these mixes: the
// plan is what the cluster keeps. Where the plan is above the optimum,
// the bound is the plan's cost today, so that it does not grow; the
// optimum is the bound to reach.
func TestScaleUpCostOnMixesFarFromTheOptimum(t *testing.T) {
	for _, tc := range []struct {
		mix     string
		groups  []mixGroup
		apps    []mixApp
		bound   pricing.Price
		optimum pricing.Price
	}{
		{
			// At the optimum, 1 × md-1-16c32g and 1 × md-2-2c8g, which
			// Karpenter finds too: 3 × md-3-8c16g, the cheapest option for
			// all the pods, whose last node runs two small pods, cost 31%
			// more until the plan sized that node to its pods, and 2 ×
			// md-3-8c16g and 1 × md-2-2c8g 0.8% more until it sized the
			// last node of the other options too.
			mix: "1/02",
			groups: []mixGroup{
				{"md-0-16c128g", 16, 128, 1_224_372, "zone-a"},
				{"md-1-16c32g", 16, 32, 739_517, "zone-b"},
				{"md-2-2c8g", 2, 8, 115_373, "zone-c"},
				{"md-3-8c16g", 8, 16, 373_347, "zone-a"},
				{"md-4-8c64g", 8, 64, 573_478, "zone-b"},
			},
			apps: []mixApp{
				{"app-0", 4, 250, 2048, false, false},
				{"app-1", 1, 3000, 2048, false, false},
				{"app-2", 8, 1500, 1024, false, false},
			},
			bound: 854_890, optimum: 854_890,
		},
		{
			// At the optimum, 1 × md-0-32c128g and 1 × md-1-16c32g, which
			// Karpenter finds too, since the plan sizes the last node of
			// every option that could cost less than the one chosen: it
			// bought 3 × md-1-16c32g, 5.4% more, when it sized only the
			// chosen option's.
			mix: "1/24",
			groups: []mixGroup{
				{"md-0-32c128g", 32, 128, 1_545_787, "zone-a"},
				{"md-1-16c32g", 16, 32, 837_434, "zone-b"},
			},
			apps: []mixApp{
				{"app-0", 11, 250, 256, false, false},
				{"app-1", 1, 1000, 256, false, false},
				{"app-2", 3, 3000, 4096, false, false},
				{"app-3", 9, 100, 512, false, false},
				{"app-4", 1, 500, 1024, false, false},
				{"app-5", 12, 500, 512, false, false},
				{"app-6", 8, 3000, 256, false, false},
				{"app-7", 1, 1000, 2048, false, false},
				{"app-8", 5, 250, 4096, false, false},
			},
			bound: 2_383_221, optimum: 2_383_221,
		},
		{
			// At the optimum, 3 × md-0-16c32g and 1 × md-1-8c32g, which
			// Karpenter finds too; 12% above it, 4 × md-0-16c32g, until
			// the plan sized the last node of the option to its pods.
			mix: "1/38",
			groups: []mixGroup{
				{"md-0-16c32g", 16, 32, 623_822, "zone-a"},
				{"md-1-8c32g", 8, 32, 356_318, "zone-b"},
				{"md-2-4c32g", 4, 32, 321_726, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 6, 2000, 4096, false, false},
				{"app-1", 10, 3000, 1024, false, false},
				{"app-2", 3, 1000, 512, false, false},
				{"app-3", 2, 250, 1024, false, true},
				{"app-4", 6, 250, 1024, false, false},
				{"app-5", 5, 1000, 1024, false, false},
			},
			bound: 2_227_784, optimum: 2_227_784,
		},
		{
			// At the optimum, where Karpenter's scheduler pays 96% more
			// (a 32c256g node for the large pods).
			mix: "1/37",
			groups: []mixGroup{
				{"md-0-32c64g", 32, 64, 1_543_799, "zone-a"},
				{"md-1-8c32g", 8, 32, 446_081, "zone-b"},
				{"md-2-2c4g", 2, 4, 95_205, "zone-c"},
				{"md-3-16c32g", 16, 32, 513_379, "zone-a"},
				{"md-4-32c256g", 32, 256, 2_557_152, "zone-b"},
			},
			apps: []mixApp{
				{"app-0", 9, 3000, 4096, false, false},
				{"app-1", 5, 500, 2048, true, false},
				{"app-2", 5, 500, 2048, true, false},
			},
			bound: 1_663_249, optimum: 1_663_249,
		},
		{
			// At the optimum (2 × md-0-16c64g, 3 × md-1-8c16g, 3 ×
			// md-2-4c16g), below Karpenter's (1.7% above), since the
			// plan moves pods off its new nodes, two at a time too.
			// Planned densest for its first round alone, 0.8% above it:
			// 1 × md-0-16c64g for the pods that pack densest, then 6 ×
			// md-1-8c16g and 1 × md-2-4c16g as the expanders choose.
			// Before, 9 × md-1-8c16g, 8.5% above, the cheapest
			// option for all the pods, since the anti-affinity pods of
			// app-2 need 8 nodes of any group; 3.4% above planned
			// densest first for every round.
			mix: "1/18",
			groups: []mixGroup{
				{"md-0-16c64g", 16, 64, 629_939, "zone-a"},
				{"md-1-8c16g", 8, 16, 351_222, "zone-b"},
				{"md-2-4c16g", 4, 16, 200_270, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 1, 2000, 512, false, false},
				{"app-1", 5, 4000, 1024, false, false},
				{"app-2", 8, 1500, 512, false, true},
				{"app-3", 4, 3000, 1024, false, true},
				{"app-4", 4, 100, 2048, false, true},
				{"app-5", 1, 3000, 1024, false, true},
			},
			bound: 2_914_354, optimum: 2_914_354,
		},
		{
			// At the optimum (2 × md-0-16c32g, 8 × md-2-8c16g, 1 ×
			// md-5-4c8g), since the plan moves pods between its new
			// nodes. Planned densest first alone, 4.4% above it: 3 ×
			// md-0-16c32g, 7 × md-2-8c16g and 1 × md-5-4c8g; 38% before.
			mix: "1/14",
			groups: []mixGroup{
				{"md-0-16c32g", 16, 32, 563_502, "zone-a"},
				{"md-1-16c64g", 16, 64, 957_548, "zone-b"},
				{"md-2-8c16g", 8, 16, 374_768, "zone-c"},
				{"md-3-8c32g", 8, 32, 431_129, "zone-a"},
				{"md-4-2c4g", 2, 4, 102_189, "zone-b"},
				{"md-5-4c8g", 4, 8, 173_614, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 10, 4000, 1024, false, true},
				{"app-1", 11, 2000, 1024, false, true},
				{"app-2", 8, 1500, 4096, false, false},
				{"app-3", 6, 500, 256, false, false},
				{"app-4", 2, 2000, 8192, false, true},
				{"app-5", 3, 2000, 8192, false, false},
				{"app-6", 6, 1000, 512, false, false},
			},
			bound: 4_298_762, optimum: 4_298_762,
		},
		{
			// At the optimum (8 × md-1-4c8g, 2 × md-2-16c32g), since the
			// plan moves pods between its new nodes. Planned densest
			// first alone, 0.02% above it: 4 × md-1-4c8g and 3 ×
			// md-2-16c32g; 6.3% before.
			mix: "1/22",
			groups: []mixGroup{
				{"md-0-4c32g", 4, 32, 297_524, "zone-a"},
				{"md-1-4c8g", 4, 8, 144_161, "zone-b"},
				{"md-2-16c32g", 16, 32, 577_141, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 2, 250, 4096, false, false},
				{"app-1", 9, 1500, 1024, false, false},
				{"app-2", 11, 1500, 4096, false, false},
				{"app-3", 10, 2000, 128, false, false},
				{"app-4", 5, 1500, 512, false, true},
			},
			bound: 2_307_570, optimum: 2_307_570,
		},
		{
			// At the optimum, 6 × md-0-2c16g and 18 × md-1-4c16g, which
			// Karpenter finds too, since the plan also binpacks the
			// largest pods first: the 500m pod that keeps apart goes
			// beside a 3-cpu pod, and a pod of the spread app beside the
			// 2-cpu one. Before, 1.7% above: the two pods that keep apart
			// shared a node of their own, 5 × md-0-2c16g and 19 ×
			// md-1-4c16g.
			mix: "1/35",
			groups: []mixGroup{
				{"md-0-2c16g", 2, 16, 129_020, "zone-a"},
				{"md-1-4c16g", 4, 16, 202_707, "zone-b"},
			},
			apps: []mixApp{
				{"app-0", 1, 2000, 4096, false, true},
				{"app-1", 11, 1500, 2048, true, false},
				{"app-2", 6, 3000, 2048, false, false},
				{"app-3", 1, 500, 2048, false, true},
				{"app-4", 9, 3000, 2048, false, false},
			},
			bound: 4_422_846, optimum: 4_422_846,
		},
		{
			// At the optimum, 23 × md-0-2c4g and 2 × md-1-8c32g, since the
			// plan moves the pods of a new node to the others where they
			// fit, or to cheaper new nodes, while that saves: 10% above it
			// before, 3.101/h, which consolidation kept under its budget
			// of 10% of the nodes at once.
			mix: "2/05",
			groups: []mixGroup{
				{"md-0-2c4g", 2, 4, 80_827, "zone-a"},
				{"md-1-8c32g", 8, 32, 476_277, "zone-b"},
			},
			apps: []mixApp{
				{"app-0", 4, 2000, 4096, false, false},
				{"app-1", 8, 1000, 1024, false, false},
				{"app-2", 11, 1500, 128, false, false},
				{"app-3", 10, 1500, 512, false, false},
				{"app-4", 1, 500, 256, true, false},
				{"app-5", 6, 250, 4096, false, false},
			},
			bound: 2_811_575, optimum: 2_811_575,
		},
		{
			// At the optimum, 9 × md-0-16c32g, since the plan places all
			// the pods of its new nodes again, with one node fewer: 58
			// pods of 2 to 4 cpus that first fit, the largest first, and
			// the moves of one node's pods leave on 10 nodes, 11% above
			// it (6.88021/h), which consolidation kept.
			mix: "2/08",
			groups: []mixGroup{
				{"md-0-16c32g", 16, 32, 688_021, "zone-a"},
				{"md-1-16c128g", 16, 128, 1_292_055, "zone-b"},
				{"md-2-2c8g", 2, 8, 118_919, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 11, 2000, 4096, false, false},
				{"app-1", 2, 3000, 8192, false, false},
				{"app-2", 1, 500, 128, false, false},
				{"app-3", 6, 2000, 2048, false, false},
				{"app-4", 1, 250, 128, false, false},
				{"app-5", 7, 4000, 128, false, false},
				{"app-6", 11, 3000, 512, false, false},
				{"app-7", 3, 4000, 128, false, false},
				{"app-8", 7, 3000, 128, false, false},
			},
			bound: 6_192_189, optimum: 6_192_189,
		},
		{
			// At the optimum, 3 × md-0-8c16g and 1 × md-2-4c8g, since the
			// plan places all the pods of its new nodes again, with a node
			// exchanged for a cheaper one: 4 × md-0-8c16g before, 13%
			// above it (1.168724/h), the last one's four 1-cpu pods too
			// many for a 4c8g node until the others' pods move too.
			mix: "2/12",
			groups: []mixGroup{
				{"md-0-8c16g", 8, 16, 292_181, "zone-a"},
				{"md-1-8c32g", 8, 32, 360_858, "zone-b"},
				{"md-2-4c8g", 4, 8, 154_378, "zone-c"},
				{"md-3-32c64g", 32, 64, 1_649_296, "zone-a"},
				{"md-4-32c128g", 32, 128, 1_388_953, "zone-b"},
				{"md-5-4c16g", 4, 16, 222_773, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 7, 100, 256, false, false},
				{"app-1", 11, 1000, 1024, false, false},
				{"app-2", 10, 1500, 512, false, false},
			},
			bound: 1_030_921, optimum: 1_030_921,
		},
		{
			// At the optimum, 5 × md-0-4c16g and 1 × md-1-8c32g, since the
			// plan places all the pods of its new nodes again, with an
			// 8c32g node exchanged for two 4c16g nodes: 3 × md-0-4c16g and
			// 2 × md-1-8c32g before, 6.3% above it (1.316238/h), which
			// consolidation kept under its budget.
			mix: "1/32",
			groups: []mixGroup{
				{"md-0-4c16g", 4, 16, 165_798, "zone-a"},
				{"md-1-8c32g", 8, 32, 409_422, "zone-b"},
				{"md-2-32c256g", 32, 256, 1_740_805, "zone-c"},
			},
			apps: []mixApp{
				{"app-0", 5, 250, 4096, false, false},
				{"app-1", 3, 500, 8192, false, false},
				{"app-2", 1, 100, 128, false, false},
				{"app-3", 2, 1000, 8192, false, false},
				{"app-4", 6, 3000, 4096, false, false},
				{"app-5", 2, 500, 512, false, false},
			},
			bound: 1_238_412, optimum: 1_238_412,
		},
	} {
		t.Run(tc.mix, func(t *testing.T) {
			groups, objects := mixCluster(tc.groups, tc.apps)
			f := newFixture(t, groups, objects...)
			config := autoscaler.DefaultConfig()
			config.Expanders = []string{scaleup.ExpanderPrice, scaleup.ExpanderLeastWaste}
			f.apply(t, config)
			f.runOnce(t)
			var cost pricing.Price
			nodes := map[string]int{}
			for _, group := range groups {
				cost += pricing.Price(group.target) * *group.price
				nodes[group.id] = group.target
			}
			// Below the optimum, some pods would be left without a node.
			if cost > tc.bound || cost < tc.optimum {
				t.Errorf("the scale-up buys %v for %s/h, want at most %s/h and at least the optimum %s/h", nodes, cost, tc.bound, tc.optimum)
			}
		})
	}
}
