package optimum

import (
	"context"
	"testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// Our planners place every pod of a mix within its rules, and Delete
// consolidation removes the nodes whose pods fit elsewhere: on mix 1/09,
// the scale-up leaves 4-cpu nodes running one small pod each, which
// consolidation empties onto the others.
func TestOurPlannersPlaceTheMixAndConsolidationLowersItsCost(t *testing.T) {
	mix := Generate(1, 9)
	ours := Ours{Expanders: PriceExpanders}
	var costs []pricing.Price
	for _, planner := range []Planner{ours, Consolidated{Ours: ours, Policy: scaledown.ConsolidationDelete}} {
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
		t.Errorf("consolidation saved nothing: the plan costs %s/h, %s/h after it", costs[0], costs[1])
	}
}
