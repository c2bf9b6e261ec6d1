package optimum

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// handMix has a 2-cpu group at 0.1 an hour in zone-a and an 8-cpu group
// at 0.3 in zone-b, and six pods of one cpu: a small node holds one of
// them (1.9 cpus allocatable), a large one seven.
func handMix(app App) *Mix {
	app.Name, app.Replicas, app.MilliCPU, app.MemoryMiB = "app-0", 6, 1000, 512
	return &Mix{
		Name:  "hand",
		Zones: []string{"zone-a", "zone-b"},
		Groups: []Group{
			{Name: "small", MilliCPU: 1900, MemoryMiB: 4086, Price: 100_000, Zone: "zone-a"},
			{Name: "large", MilliCPU: 7900, MemoryMiB: 16374, Price: 300_000, Zone: "zone-b"},
		},
		Apps: []App{app},
	}
}

func TestSolveFindsTheOptimumKnownByHand(t *testing.T) {
	if _, err := exec.LookPath("cbc"); err != nil {
		t.Skip("cbc is not on the PATH: `make optimum` installs it (Debian package coinor-cbc)")
	}
	for _, tc := range []struct {
		name  string
		app   App
		nodes map[string]int
		cost  pricing.Price
	}{
		// One large node (0.3) holds the six pods; six small ones cost 0.6.
		{name: "packed", nodes: map[string]int{"large": 1}, cost: 300_000},
		// One pod a node: six small nodes, the cheapest, 0.6.
		{name: "anti-affinity", app: App{AntiAffinity: true}, nodes: map[string]int{"small": 6}, cost: 600_000},
		// Three pods a zone: three small nodes in zone-a and a large one
		// in zone-b, 0.6, where the large node alone would hold them all.
		{name: "zone spread", app: App{Spread: true}, nodes: map[string]int{"small": 3, "large": 1}, cost: 600_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mix := handMix(tc.app)
			optimum, err := Solve(context.Background(), mix, SolveOptions{TimeLimit: 30 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			nodes := map[string]int{}
			for _, node := range optimum.Nodes {
				nodes[mix.Groups[node.Group].Name]++
			}
			if !optimum.Proven || optimum.Cost != tc.cost || optimum.Bound != tc.cost || !equalCounts(nodes, tc.nodes) {
				t.Errorf("got nodes %v costing %s (bound %s, proven %t), want %v costing %s", nodes, optimum.Cost, optimum.Bound, optimum.Proven, tc.nodes, tc.cost)
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Placement.Check refuses what the mix's rules forbid, so that a plan
// cheaper than the optimum cannot be one that breaks them.
func TestCheckRefusesBrokenPlacements(t *testing.T) {
	for _, tc := range []struct {
		name      string
		app       App
		placement Placement
	}{
		{name: "over allocatable", placement: Placement{Nodes: []Node{{Group: 0, Pods: []int{0, 0}}, {Group: 1, Pods: []int{0, 0, 0, 0}}}}},
		{name: "a pod missing", placement: Placement{Nodes: []Node{{Group: 1, Pods: []int{0, 0, 0, 0, 0}}}}},
		{name: "anti-affinity", app: App{AntiAffinity: true}, placement: Placement{Nodes: []Node{
			{Group: 1, Pods: []int{0, 0}}, {Group: 1, Pods: []int{0}}, {Group: 1, Pods: []int{0}}, {Group: 1, Pods: []int{0}}, {Group: 1, Pods: []int{0}},
		}}},
		{name: "zone spread", app: App{Spread: true}, placement: Placement{Nodes: []Node{
			{Group: 0, Pods: []int{0}}, {Group: 0, Pods: []int{0}}, {Group: 1, Pods: []int{0, 0, 0, 0}},
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.placement.Check(handMix(tc.app)); err == nil {
				t.Errorf("%v passed", tc.placement)
			}
		})
	}
	good := Placement{Nodes: []Node{{Group: 0, Pods: []int{0}}, {Group: 0, Pods: []int{0}}, {Group: 0, Pods: []int{0}}, {Group: 1, Pods: []int{0, 0, 0}}}}
	if err := good.Check(handMix(App{Spread: true})); err != nil {
		t.Errorf("a placement within the rules was refused: %v", err)
	}
}
