package scaleup

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// repackPlacements bounds the placements the scheduler checks in one
// repack of a plan, over all the sets of nodes it tries, and
// repackPlacementsPerSet those of one set: the search is exact on
// small plans and stops early on large ones, the same way on every run.
const (
	repackPlacements       = 1500
	repackPlacementsPerSet = 600
)

// repack looks for a cheaper set of new nodes that runs all the pods of
// the plan's new nodes, once no removal of improvePlan saves: one node
// fewer, or one node exchanged for one or two nodes of another group
// that cost less, the largest saving first, passing over the sets that
// cost less than nodes with as much cpu and memory as the pods request
// can (leastCost). Moving the pods of one node onto the others first fit
// misses the packings where the others' pods must move too (58 pods on
// ten 16-cpu nodes that nine hold; three 8-cpu nodes and a 4-cpu node
// instead of four 8-cpu nodes; an 8-cpu node exchanged for two 4-cpu
// nodes, the pods of 4-cpu nodes moving onto them), so the pods are all placed
// again, by a depth-first search over the nodes of the set, the largest
// pods first, each placement checked by the scheduler, within a budget
// of placements. It returns the nodes of the first set that takes every
// pod, their pods, where the pods went in the order they were placed and
// what the set saves; no nodes when none does. Nodes of a group kept keep
// their names; nodes added are numbered on from next.
func (s *ScaleUp) repack(sched *simulator.Scheduler, nodes []*plannedNode, members []*candidate,
	groupOf map[types.UID]*simulator.PodGroup, totals clusterTotals, next map[*candidate]int) ([]*plannedNode, []simulator.Placement, pricing.Price) {
	var pods []*corev1.Pod
	var needed cpuMemory
	counts := map[*candidate]int{}
	for _, node := range nodes {
		pods = append(pods, node.pods...)
		counts[node.member]++
	}
	for _, pod := range pods {
		needed = needed.plus(groupOf[pod.UID].Requests())
	}
	// Alike pods next to each other, so that the search tries their
	// places in one order only.
	order := map[*simulator.PodGroup]int{}
	for _, pod := range pods {
		if _, ok := order[groupOf[pod.UID]]; !ok {
			order[groupOf[pod.UID]] = len(order)
		}
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		ga, gb := groupOf[a.UID], groupOf[b.UID]
		return cmp.Or(largestRequestsFirst(ga, gb), cmp.Compare(order[ga], order[gb]))
	})
	type nodeSet struct {
		removed, added *candidate
		// nodes are the nodes of added.
		nodes  int
		saving pricing.Price
	}
	var sets []nodeSet
	for _, removed := range members {
		if counts[removed] == 0 {
			continue
		}
		sets = append(sets, nodeSet{removed: removed, saving: s.nodePrice(removed)})
		for _, added := range members {
			for n := 1; n <= 2; n++ {
				if added != removed && pricing.Price(n)*s.nodePrice(added) < s.nodePrice(removed) && added.room() >= n {
					sets = append(sets, nodeSet{removed: removed, added: added, nodes: n, saving: s.nodePrice(removed) - pricing.Price(n)*s.nodePrice(added)})
				}
			}
		}
	}
	slices.SortStableFunc(sets, func(a, b nodeSet) int { return cmp.Compare(b.saving, a.saving) })
	cost := costOf(nodes)
	least := s.leastCost(needed, members)
	budget := repackPlacements
	for _, set := range sets {
		if budget <= 0 {
			break
		}
		if float64(cost-set.saving) < least {
			continue
		}
		kept := map[*candidate]int{set.removed: counts[set.removed] - 1}
		var bins []*plannedNode
		var room cpuMemory
		for _, node := range nodes {
			if left, ok := kept[node.member]; ok {
				if left == 0 {
					continue
				}
				kept[node.member]--
			}
			bins = append(bins, &plannedNode{name: node.name, member: node.member, price: node.price})
			room = room.plus(node.member.template.Allocatable())
		}
		if set.added != nil {
			setTotals := totals
			setTotals.nodes--
			setTotals.capacity.Sub(set.removed.template.LimitCapacity())
			if allowed, _ := s.opts.Limits.nodesAllowed(setTotals, set.added.template); allowed < set.nodes {
				continue
			}
			for n := range set.nodes {
				bins = append(bins, &plannedNode{name: upcomingNodeName(set.added.template, next[set.added]+n), member: set.added,
					price: s.nodePrice(set.added)})
				room = room.plus(set.added.template.Allocatable())
			}
		}
		if !needed.within(room) {
			continue
		}
		perSet := min(budget, repackPlacementsPerSet)
		sched.Fork()
		for _, node := range nodes {
			_ = sched.RemoveNode(node.name)
		}
		for _, bin := range bins {
			_ = sched.AddNode(bin.member.template.CopyAs(bin.name))
		}
		placed, ok := packPods(sched, bins, pods, groupOf, room, needed, &perSet)
		budget -= min(budget, repackPlacementsPerSet) - perSet
		if !ok {
			sched.Revert()
			continue
		}
		sched.Commit()
		for _, placement := range placed {
			bin := bins[slices.IndexFunc(bins, func(bin *plannedNode) bool { return bin.name == placement.NodeName })]
			bin.pods = append(bin.pods, placement.Pod)
		}
		return bins, placed, set.saving
	}
	return nil, nil, 0
}

// costOf is what the nodes cost per hour.
func costOf(nodes []*plannedNode) pricing.Price {
	var cost pricing.Price
	for _, node := range nodes {
		cost += node.price
	}
	return cost
}

// packPods places the pods, in order, on the bins, which the scheduler
// holds empty, by a depth-first search that backtracks when a pod fits
// no bin or the pods left need more cpu or memory than the bins have
// free, within budget placements checked by the scheduler. Pods of one
// group go to bins in the order of the bins, those that spread in the
// order of the bins of each domain (the skew of each step would keep
// them from a domain they come back to), and
// of bins of one group alike filled, one only is tried: the other places
// would place the same. It tells whether every pod found a place, and where, in order.
func packPods(sched *simulator.Scheduler, bins []*plannedNode, pods []*corev1.Pod, groupOf map[types.UID]*simulator.PodGroup,
	free, needed cpuMemory, budget *int) ([]simulator.Placement, bool) {
	used, allocatable := make([]cpuMemory, len(bins)), make([]cpuMemory, len(bins))
	for b, bin := range bins {
		allocatable[b] = cpuMemory{}.plus(bin.member.template.Allocatable())
	}
	chosen := make([]int, len(pods))
	placed := make([]simulator.Placement, 0, len(pods))
	type binKind struct {
		member *candidate
		used   cpuMemory
	}
	// failed are the states the search left without a place for every
	// pod: the pods placed so far and what each bin holds, which other
	// orders of alike pods reach again.
	failed := map[string]bool{}
	kinds := map[*candidate]int{}
	for _, bin := range bins {
		if _, ok := kinds[bin.member]; !ok {
			kinds[bin.member] = len(kinds)
		}
	}
	loads := make([][3]int64, len(bins))
	state := func(i int) string {
		for b, bin := range bins {
			loads[b] = [3]int64{int64(kinds[bin.member]), used[b].milliCPU, used[b].memory}
		}
		slices.SortFunc(loads, func(a, b [3]int64) int { return slices.Compare(a[:], b[:]) })
		key := binary.AppendVarint(nil, int64(i))
		for _, load := range loads {
			for _, v := range load {
				key = binary.AppendVarint(key, v)
			}
		}
		return string(key)
	}
	var search func(i int) bool
	search = func(i int) bool {
		if i == len(pods) {
			return true
		}
		if !needed.within(free) {
			return false
		}
		key := state(i)
		if failed[key] {
			return false
		}
		if *budget > 0 {
			// A search stopped by the budget proves nothing.
			defer func() {
				if *budget > 0 {
					failed[key] = true
				}
			}()
		}
		pod := pods[i]
		group := groupOf[pod.UID]
		request := cpuMemory{}.plus(group.Requests())
		spread := pod.Spec.TopologySpreadConstraints
		// after is the bin the last alike pod went to in the domain of
		// bin b, -1 when none: the pod goes to it or a later one.
		after := func(b int) int {
			for j := i - 1; j >= 0 && groupOf[pods[j].UID] == group; j-- {
				if len(spread) == 0 || sameDomains(spread, bins[chosen[j]], bins[b]) {
					return chosen[j]
				}
			}
			return -1
		}
		var tried []binKind
		for b := range bins {
			if b < after(b) || !used[b].add(request, 1).within(allocatable[b]) {
				continue
			}
			kind := binKind{member: bins[b].member, used: used[b]}
			if slices.Contains(tried, kind) {
				continue
			}
			tried = append(tried, kind)
			if *budget <= 0 {
				return false
			}
			*budget--
			sched.Fork()
			if sched.PlaceOn(group, pod, bins[b].name) != nil {
				sched.Revert()
				continue
			}
			chosen[i] = b
			used[b] = used[b].add(request, 1)
			free = free.add(request, -1)
			needed = needed.add(request, -1)
			placed = append(placed, simulator.Placement{Pod: pod, NodeName: bins[b].name, Group: group})
			if search(i + 1) {
				sched.Commit()
				return true
			}
			placed = placed[:len(placed)-1]
			needed = needed.add(request, 1)
			free = free.add(request, 1)
			used[b] = used[b].add(request, -1)
			sched.Revert()
		}
		return false
	}
	return placed, search(0)
}

// cpuMemory is the cpu and memory of requests or of nodes, which the
// search adds and compares without the maps of snapshot.Resources.
type cpuMemory struct {
	milliCPU, memory int64
}

func (r cpuMemory) plus(resources snapshot.Resources) cpuMemory {
	return cpuMemory{milliCPU: r.milliCPU + resources.MilliCPU, memory: r.memory + resources.Memory}
}

func (r cpuMemory) add(other cpuMemory, sign int64) cpuMemory {
	return cpuMemory{milliCPU: r.milliCPU + sign*other.milliCPU, memory: r.memory + sign*other.memory}
}

func (r cpuMemory) within(other cpuMemory) bool {
	return r.milliCPU <= other.milliCPU && r.memory <= other.memory
}

// leastCost is a bound below what nodes of the members that hold the
// needed cpu and memory cost: the cost of the cheapest fractional nodes,
// of one member or two, with as much of both.
func (s *ScaleUp) leastCost(needed cpuMemory, members []*candidate) float64 {
	least := math.Inf(1)
	cpu, memory := float64(needed.milliCPU), float64(needed.memory)
	for i, a := range members {
		allocatable := a.template.Allocatable()
		ac, am, ap := float64(allocatable.MilliCPU), float64(allocatable.Memory), float64(s.nodePrice(a))
		if ac <= 0 || am <= 0 {
			continue
		}
		least = min(least, ap*max(cpu/ac, memory/am))
		for _, b := range members[i+1:] {
			allocatable := b.template.Allocatable()
			bc, bm, bp := float64(allocatable.MilliCPU), float64(allocatable.Memory), float64(s.nodePrice(b))
			// x a-nodes and y b-nodes with exactly the cpu and memory.
			det := ac*bm - am*bc
			if det == 0 {
				continue
			}
			x, y := (cpu*bm-memory*bc)/det, (ac*memory-am*cpu)/det
			if x >= 0 && y >= 0 {
				least = min(least, x*ap+y*bp)
			}
		}
	}
	// Rounding: a set may cost the bound itself.
	return least * (1 - 1e-9)
}

// sameDomains tells whether the nodes a and b are in the same domains of
// the topology keys of the spread constraints.
func sameDomains(spread []corev1.TopologySpreadConstraint, a, b *plannedNode) bool {
	for _, constraint := range spread {
		if constraint.TopologyKey == corev1.LabelHostname {
			if a.name != b.name {
				return false
			}
			continue
		}
		if a.member.template.Node().Labels[constraint.TopologyKey] != b.member.template.Node().Labels[constraint.TopologyKey] {
			return false
		}
	}
	return true
}
