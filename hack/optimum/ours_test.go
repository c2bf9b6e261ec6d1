package optimum

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// Our planners place every pod of a mix within its rules, and
// consolidation lowers the cost of a plan made without prices (the
// scale-up with least-waste alone), Replace at least as much as Delete:
// on 1/09, Delete removes the nodes the plan left half used; on 1/33 and
// 1/35, Replace brings the plan to the optimum, on 1/35 grown from the
// least utilized node first; on 2/03, Delete then Replace. On 1/06, the
// pods a replacement evicts, placed in another order than it simulated,
// left one pod pending, for which the engine scaled up again, 0.6% above
// the optimum (6.44/h): placed together as the scheduler places them
// before the replacement is decided, they take one more node of the
// cheaper group, and the plan ends at the optimum (6.400378/h).
func TestOurPlannersPlaceTheMixAndConsolidationLowersItsCost(t *testing.T) {
	for _, tc := range []struct {
		seed        uint64
		index       int
		deleteSaves bool
		// replaceBound, when set, is the most Replace may leave.
		replaceBound pricing.Price
	}{
		{seed: 1, index: 9, deleteSaves: true},
		{seed: 1, index: 33, replaceBound: 2_363_701},
		{seed: 1, index: 35, replaceBound: 4_422_846},
		{seed: 2, index: 3, deleteSaves: true, replaceBound: 3_067_087},
		{seed: 1, index: 6, deleteSaves: true, replaceBound: 6_400_378},
	} {
		mix := Generate(tc.seed, tc.index)
		t.Run(mix.Name, func(t *testing.T) {
			costs := placeConsolidated(t, mix, Ours{Expanders: []string{scaleup.ExpanderLeastWaste}})
			if tc.deleteSaves && costs[1] >= costs[0] {
				t.Errorf("Delete saved nothing: the plan costs %s/h, %s/h after it", costs[0], costs[1])
			}
			if costs[2] >= costs[0] {
				t.Errorf("Replace saved nothing: the plan costs %s/h, %s/h after it", costs[0], costs[2])
			}
			if costs[2] > costs[1] {
				t.Errorf("Replace left %s/h, more than Delete's %s/h", costs[2], costs[1])
			}
			if tc.replaceBound > 0 && costs[2] > tc.replaceBound {
				t.Errorf("Replace left %s/h, more than %s/h", costs[2], tc.replaceBound)
			}
		})
	}
}

// With prices, the plan moves the pods of its new nodes to the others,
// or to cheaper new nodes, one node or two at a time, while that saves:
// it is at the optimum on mixes where it was far from it, and
// consolidation keeps it there. Before, 1/09 was planned 25% above the
// optimum (small pods alone on 8-cpu nodes), 1/33 16%, 1/06 10%, 2/03
// 41%, 2/17 32% (Replace left it 9.8% above), 1/28 40% (Replace brought
// it to 0.4% above, where the plan is now); 1/35 is at the optimum since
// its largest pods are planned first.
func TestOurPlanIsNearTheOptimumWhereItWasFarFromIt(t *testing.T) {
	for _, tc := range []struct {
		seed  uint64
		index int
		bound pricing.Price
	}{
		{seed: 1, index: 9, bound: 1_955_086},
		{seed: 1, index: 33, bound: 2_363_701},
		{seed: 1, index: 6, bound: 6_400_378},
		{seed: 2, index: 3, bound: 3_067_087},
		{seed: 2, index: 17, bound: 4_021_043},
		{seed: 1, index: 28, bound: 2_044_556},
		{seed: 1, index: 35, bound: 4_422_846},
	} {
		mix := Generate(tc.seed, tc.index)
		t.Run(mix.Name, func(t *testing.T) {
			costs := placeConsolidated(t, mix, Ours{Expanders: PriceExpanders})
			if costs[0] > tc.bound {
				t.Errorf("the plan costs %s/h, more than %s/h", costs[0], tc.bound)
			}
			if costs[1] > costs[0] || costs[2] > costs[0] {
				t.Errorf("consolidation raised the plan's %s/h: %s/h after Delete, %s/h after Replace", costs[0], costs[1], costs[2])
			}
		})
	}
}

// placeConsolidated places the mix with ours, then ours followed by
// Delete and by Replace, checks that each placement places every pod
// within the mix's rules, and returns what the three cost.
func placeConsolidated(t *testing.T, mix *Mix, ours Ours) []pricing.Price {
	t.Helper()
	var costs []pricing.Price
	for _, planner := range []Planner{
		ours,
		Consolidated{Ours: ours, Policy: scaledown.ConsolidationDelete},
		Consolidated{Ours: ours, Policy: scaledown.ConsolidationReplace},
	} {
		placement, err := planner.Place(context.Background(), mix)
		if err != nil {
			t.Fatalf("%s: %v", planner.Name(), err)
		}
		if placement.Unplaced > 0 {
			t.Errorf("%s left %d pods unplaced", planner.Name(), placement.Unplaced)
		}
		if err := placement.Check(mix); err != nil {
			t.Errorf("%s broke the mix's rules: %v", planner.Name(), err)
		}
		costs = append(costs, placement.Cost(mix))
	}
	return costs
}

// A replacement is carried out once its new nodes are Ready when the
// pods of the nodes it replaces fit, placed together as it decided them:
// on 1/22 under a budget of every node, a replacement of three nodes by
// five, decided with its pods placed together, was abandoned when its
// new nodes were Ready, moved node by node in another order a pod found
// no place; its new nodes were left to scale-down.
func TestReplacementIsCarriedOutWhenItsPodsFitTogether(t *testing.T) {
	mix := Generate(1, 22)
	every := intstr.FromString("100%")
	planner := Consolidated{Ours: Ours{Expanders: PriceExpanders}, Policy: scaledown.ConsolidationReplace, Budget: &every}
	placement, err := planner.Place(context.Background(), mix)
	if err != nil {
		t.Fatal(err)
	}
	if err := placement.Check(mix); err != nil || placement.Unplaced > 0 {
		t.Errorf("the plan broke the mix's rules (%v) or left %d pods unplaced", err, placement.Unplaced)
	}
}
