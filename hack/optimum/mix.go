// Package optimum measures how far the clusters the engine plans are from
// the cheapest possible one: it generates pending mixes of pods and node
// groups from a seed, computes the exact cheapest set of new nodes for each
// with an integer program solved by CBC (model.go), runs planners on the
// same mix (ours.go; Karpenter's lives in hack/karpenter-compare, which
// needs Karpenter's modules) and reports each plan's cost over the
// optimum (report.go). docs/cost.md, "Distance to the optimum", has the
// figures.
package optimum

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// Mix is a pending mix: node groups, none with a node yet, and the apps
// whose pods wait for nodes.
type Mix struct {
	Name string
	// Zones are the zones of the cluster; every zone has a node group, and
	// a control-plane node (Kubernetes objects, kube.go), so that every zone
	// is a topology domain whatever the plan, as kube-scheduler counts them.
	Zones  []string
	Groups []Group
	Apps   []App
}

// Group is a node group: the allocatable of its nodes, what one costs
// per hour, and its zone.
type Group struct {
	Name string
	// MilliCPU and MemoryMiB are a node's allocatable: its capacity less
	// KubeReservedMilliCPU and KubeReservedMemoryMiB.
	MilliCPU, MemoryMiB int64
	Price               pricing.Price
	Zone                string
}

// KubeReservedMilliCPU and KubeReservedMemoryMiB are what a node keeps
// for itself: the overhead of Karpenter's fake instance types, so that
// both planners see the same allocatable.
const (
	KubeReservedMilliCPU  = 100
	KubeReservedMemoryMiB = 10
)

// Fits tells whether one pod of app fits an empty node of the group.
func (g Group) Fits(app App) bool {
	return app.MilliCPU <= g.MilliCPU && app.MemoryMiB <= g.MemoryMiB
}

// App is a Deployment's pending pods: Replicas alike pods, spread over
// the zones (maxSkew 1, DoNotSchedule) when Spread, at most one a node
// when AntiAffinity (required pod anti-affinity by hostname).
type App struct {
	Name                string
	Replicas            int
	MilliCPU, MemoryMiB int64
	Spread              bool
	AntiAffinity        bool
}

// Pods counts the pods of the mix.
func (m *Mix) Pods() int {
	pods := 0
	for _, app := range m.Apps {
		pods += app.Replicas
	}
	return pods
}

// Constraints says which constraints the mix's apps carry: "-", "spread",
// "anti" or "spread+anti".
func (m *Mix) Constraints() string {
	var kinds []string
	if slices.ContainsFunc(m.Apps, func(a App) bool { return a.Spread }) {
		kinds = append(kinds, "spread")
	}
	if slices.ContainsFunc(m.Apps, func(a App) bool { return a.AntiAffinity }) {
		kinds = append(kinds, "anti")
	}
	if len(kinds) == 0 {
		return "-"
	}
	return strings.Join(kinds, "+")
}

// The sizes mixes are drawn from.
var (
	nodeCPUs      = []int64{2, 4, 8, 16, 32}
	gibPerCPU     = []int64{2, 4, 8}
	podMilliCPUs  = []int64{100, 250, 500, 1000, 1500, 2000, 3000, 4000}
	podMemoryMiBs = []int64{128, 256, 512, 1024, 2048, 4096, 8192}
	zoneNames     = []string{"zone-a", "zone-b", "zone-c"}
)

// MaxPods is the most pods a mix has.
const MaxPods = 60

// Generate draws mix index of seed: 2 to 6 node groups of distinct sizes
// (2 to 32 cpus, 2 to 8 GiB a cpu), in up to 3 zones in turn, each priced
// at the default rates (pricing.DefaultPerCPU, DefaultPerGiB) times a
// factor between 0.75 and 1.25, so that neither the largest nor the
// smallest nodes are always the cheapest per cpu; and 10 to 60 pods, in
// apps of 1 to 12 alike pods, each fitting a node of some group. Mixes
// come in four kinds in turn: no constraint, zone spread, anti-affinity,
// both; in a kind with a constraint, about half the apps carry it.
func Generate(seed uint64, index int) *Mix {
	//nolint:gosec // Generated mixes, not secrets.
	r := rand.New(rand.NewPCG(seed, uint64(index)))
	m := &Mix{Name: fmt.Sprintf("%d/%02d", seed, index)}
	groups := 2 + r.IntN(5)
	m.Zones = zoneNames[:min(groups, len(zoneNames))]
	type shape struct{ cpu, gib int64 }
	var shapes []shape
	for len(shapes) < groups {
		cpu := nodeCPUs[r.IntN(len(nodeCPUs))]
		s := shape{cpu: cpu, gib: cpu * gibPerCPU[r.IntN(len(gibPerCPU))]}
		if !slices.Contains(shapes, s) {
			shapes = append(shapes, s)
		}
	}
	for i, s := range shapes {
		base := float64(s.cpu*int64(pricing.DefaultPerCPU) + s.gib*int64(pricing.DefaultPerGiB))
		m.Groups = append(m.Groups, Group{
			Name:     fmt.Sprintf("md-%d-%dc%dg", i, s.cpu, s.gib),
			MilliCPU: s.cpu*1000 - KubeReservedMilliCPU, MemoryMiB: s.gib*1024 - KubeReservedMemoryMiB,
			Price: pricing.Price(base * (0.75 + 0.5*r.Float64())),
			Zone:  m.Zones[i%len(m.Zones)],
		})
	}
	spread, anti := index%4 == 1 || index%4 == 3, index%4 >= 2
	target := 10 + r.IntN(MaxPods-9)
	for pods := 0; pods < target; {
		app := App{
			Name:     fmt.Sprintf("app-%d", len(m.Apps)),
			Replicas: min(1+r.IntN(12), target-pods),
			MilliCPU: podMilliCPUs[r.IntN(len(podMilliCPUs))], MemoryMiB: podMemoryMiBs[r.IntN(len(podMemoryMiBs))],
			Spread:       spread && r.IntN(2) == 0,
			AntiAffinity: anti && r.IntN(2) == 0,
		}
		if !m.placeable(app) {
			continue
		}
		m.Apps = append(m.Apps, app)
		pods += app.Replicas
	}
	return m
}

// placeable tells whether the app's pods can all be placed: each fits a
// node of some group, and of some group in every zone when it spreads.
func (m *Mix) placeable(app App) bool {
	zones := map[string]bool{}
	for _, group := range m.Groups {
		if group.Fits(app) {
			zones[group.Zone] = true
		}
	}
	if app.Spread {
		return len(zones) == len(m.Zones)
	}
	return len(zones) > 0
}

// Placement is where a planner puts the pods of a mix: its new nodes.
type Placement struct {
	Nodes []Node
	// Unplaced counts the pods the planner found no place for.
	Unplaced int
}

// Node is a new node: its group's index in Mix.Groups, and the index in
// Mix.Apps of each pod on it.
type Node struct {
	Group int
	Pods  []int
}

// Cost is what the placement's nodes cost per hour.
func (p *Placement) Cost(m *Mix) pricing.Price {
	var cost pricing.Price
	for _, node := range p.Nodes {
		cost += m.Groups[node.Group].Price
	}
	return cost
}

// Check says how the placement breaks the mix's rules, or nil: every pod
// placed once, nodes within their allocatable, one pod of an
// anti-affinity app a node, and the pods of a spread app at most one apart
// between any two zones.
func (p *Placement) Check(m *Mix) error {
	placed := make([]int, len(m.Apps))
	perZone := make([]map[string]int, len(m.Apps))
	for i := range perZone {
		perZone[i] = map[string]int{}
	}
	for n, node := range p.Nodes {
		group := m.Groups[node.Group]
		var cpu, memory int64
		onNode := map[int]int{}
		for _, a := range node.Pods {
			app := m.Apps[a]
			cpu, memory = cpu+app.MilliCPU, memory+app.MemoryMiB
			placed[a]++
			perZone[a][group.Zone]++
			if onNode[a]++; app.AntiAffinity && onNode[a] > 1 {
				return fmt.Errorf("node %d (%s) runs %d pods of %s, which repel each other", n, group.Name, onNode[a], app.Name)
			}
		}
		if cpu > group.MilliCPU || memory > group.MemoryMiB {
			return fmt.Errorf("node %d (%s) holds %dm cpu and %dMi memory, over its %dm and %dMi", n, group.Name, cpu, memory, group.MilliCPU, group.MemoryMiB)
		}
	}
	total := 0
	for a, app := range m.Apps {
		if placed[a] > app.Replicas {
			return fmt.Errorf("%s has %d pods placed of %d", app.Name, placed[a], app.Replicas)
		}
		total += placed[a]
		if !app.Spread {
			continue
		}
		least, most := app.Replicas, 0
		for _, zone := range m.Zones {
			least, most = min(least, perZone[a][zone]), max(most, perZone[a][zone])
		}
		if most-least > 1 {
			return fmt.Errorf("%s has %d pods in a zone and %d in another, more than its maxSkew 1 apart", app.Name, most, least)
		}
	}
	if total+p.Unplaced != m.Pods() {
		return fmt.Errorf("%d pods placed and %d unplaced of %d", total, p.Unplaced, m.Pods())
	}
	return nil
}
