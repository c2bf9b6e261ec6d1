package optimum

import (
	"context"
	"testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// Our planners place every pod of a mix within its rules, and
// consolidation lowers its cost, Replace at least as much as Delete: on
// mix 1/09, the scale-up leaves 4-cpu nodes running one small pod each,
// which consolidation empties onto the others; on 1/33, Replace replaces
// three nodes, the pods of the first of which go to the third, by two
// smaller ones; on 1/06, the pods a replacement evicts, placed in another
// order than it simulated, leave one pod pending, for which the engine
// scales up again.
func TestOurPlannersPlaceTheMixAndConsolidationLowersItsCost(t *testing.T) {
	for _, index := range []int{9, 33, 6} {
		mix := Generate(1, index)
		t.Run(mix.Name, func(t *testing.T) {
			ours := Ours{Expanders: PriceExpanders}
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
			if costs[1] >= costs[0] {
				t.Errorf("Delete saved nothing: the plan costs %s/h, %s/h after it", costs[0], costs[1])
			}
			if costs[2] > costs[1] {
				t.Errorf("Replace left %s/h, more than Delete's %s/h", costs[2], costs[1])
			}
		})
	}
}
