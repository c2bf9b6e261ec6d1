package scaleup

import (
	"cmp"
	"context"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// plannedNode is a new node of a plan, as its rounds left it in the
// scheduler's snapshot.
type plannedNode struct {
	name   string
	member *candidate
	price  pricing.Price
	// pods are the pods nominated to it, in the order they were.
	pods []*corev1.Pod
}

// nodeRemoval is a step of improvePlan: new nodes removed, by index,
// their pods on the other new nodes where they fit, those left, if any,
// on new nodes of the slots.
type nodeRemoval struct {
	nodes  []int
	slots  []newSlot
	saving pricing.Price
}

// newSlot are new nodes of a member that may take the pods a removal
// leaves: at most most of them.
type newSlot struct {
	member *candidate
	most   int
}

// improvePlan lowers what the plan's new nodes cost, once its rounds have
// placed every pod they could: rounds buy nodes for the pods as they come,
// largest first, so a node bought early may end up with pods the others
// could take, or with pods a cheaper node would run. Step by step, it
// removes the new node whose removal saves most: its pods go to the other
// new nodes first fit, the largest first, and those left to new nodes of
// one group, or one or two nodes of a group and the rest on nodes of
// another, whichever takes them all for least, when that costs less than
// the node removed (a half-used 32-cpu node whose pods fit a 16-cpu node
// and four 2-cpu nodes, the rest on the nodes there); when none saves,
// the first two nodes, in order, that save when removed together go the
// same way, with the pods left on nodes of one group (an 8-cpu node and a
// half-used 4-cpu node whose pods, packed together, fit two 4-cpu nodes);
// when no removal saves anything, the pods of all the new nodes are
// placed again on a cheaper set of nodes, if repack finds one within its
// budget and the plan costs less than repackBelow (the cheapest plan of
// the ways planned before), and the removals start again; until neither
// saves. The scheduler checks every move, so that spreads and
// anti-affinity hold. The pods moved are nominated after the others, in
// the order they were placed, which the next loop follows. sched holds
// the plan's nodes and pods; planned maps the names of its new nodes to
// their groups.
func (s *ScaleUp) improvePlan(ctx context.Context, sched *simulator.Scheduler, plan *Plan, growable []*candidate,
	podGroups []*simulator.PodGroup, planned map[string]string, repackBelow pricing.Price) {
	groupOf := map[types.UID]*simulator.PodGroup{}
	for _, podGroup := range podGroups {
		for _, pod := range podGroup.Pods {
			groupOf[pod.UID] = podGroup
		}
	}
	memberOf := map[string]*candidate{}
	for _, c := range growable {
		memberOf[c.group.ID()] = c
	}
	pods := map[types.UID]*corev1.Pod{}
	for _, pod := range plan.Helped {
		pods[pod.UID] = pod
	}
	var nodes []*plannedNode
	index := map[string]int{}
	for _, nomination := range plan.Nominations {
		if _, ok := planned[nomination.Node]; !ok {
			continue
		}
		i, ok := index[nomination.Node]
		if !ok {
			member := memberOf[nomination.Group]
			if member == nil {
				return
			}
			i = len(nodes)
			index[nomination.Node] = i
			nodes = append(nodes, &plannedNode{name: nomination.Node, member: member, price: s.nodePrice(member)})
		}
		nodes[i].pods = append(nodes[i].pods, pods[nomination.Pod])
	}
	if len(nodes) == 0 {
		return
	}
	// The members, the cheapest node first, then by ID: the first that
	// takes the pods left is the cheapest that does.
	members := slices.Clone(growable)
	slices.SortStableFunc(members, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(s.nodePrice(a), s.nodePrice(b)), strings.Compare(a.group.ID(), b.group.ID()))
	})
	totals := totalsOf(sched.Snapshot().NodeInfos())
	// next numbers, per group, the new nodes the steps add, past the
	// names the rounds gave.
	next := map[*candidate]int{}
	for _, c := range growable {
		next[c] = c.upcoming + c.planned
	}
	var moved []Nomination
	var saving pricing.Price
	for {
		var best nodeRemoval
		for i := range nodes {
			if r := s.removalSaving(sched, nodes, []int{i}, members, groupOf, totals, next, true); r.saving > best.saving {
				best = r
			}
		}
		for i := range nodes {
			for j := i + 1; best.nodes == nil && j < len(nodes); j++ {
				if r := s.removalSaving(sched, nodes, []int{i, j}, members, groupOf, totals, next, false); r.saving > best.saving {
					best = r
				}
			}
		}
		if best.nodes == nil {
			if costOf(nodes) >= repackBelow {
				break
			}
			repacked, placed, repackSaving := s.repack(sched, nodes, members, groupOf, totals, next)
			if repacked == nil {
				break
			}
			for _, node := range nodes {
				node.member.planned--
				totals.nodes--
				totals.capacity.Sub(node.member.template.LimitCapacity())
			}
			for _, node := range repacked {
				if !slices.ContainsFunc(nodes, func(n *plannedNode) bool { return n.name == node.name }) {
					next[node.member]++
				}
				node.member.planned++
				totals.nodes++
				totals.capacity.Add(node.member.template.LimitCapacity())
			}
			nodes = repacked
			moved = moved[:0]
			for _, placement := range placed {
				node := nodes[slices.IndexFunc(nodes, func(n *plannedNode) bool { return n.name == placement.NodeName })]
				moved = append(moved, Nomination{Pod: placement.Pod.UID, Node: node.name, Group: node.member.group.ID()})
			}
			saving += repackSaving
			continue
		}
		var removed []*corev1.Pod
		sched.Fork()
		placed, left := placeElsewhere(sched, nodes, best.nodes, groupOf)
		for _, i := range slices.Backward(best.nodes) {
			node := nodes[i]
			removed = append(removed, node.pods...)
			node.member.planned--
			totals.nodes--
			totals.capacity.Sub(node.member.template.LimitCapacity())
			nodes = slices.Delete(nodes, i, i+1)
		}
		onAdded, added, _ := placeOnNew(sched, best.slots, next, left, groupOf)
		placed = append(placed, onAdded...)
		for _, node := range added {
			node.price = s.nodePrice(node.member)
			nodes = append(nodes, node)
			next[node.member]++
			node.member.planned++
			totals.nodes++
			totals.capacity.Add(node.member.template.LimitCapacity())
		}
		sched.Commit()
		moved = slices.DeleteFunc(moved, func(n Nomination) bool {
			return slices.ContainsFunc(removed, func(pod *corev1.Pod) bool { return pod.UID == n.Pod })
		})
		for _, placement := range placed {
			node := nodes[slices.IndexFunc(nodes, func(n *plannedNode) bool { return n.name == placement.NodeName })]
			node.pods = append(node.pods, placement.Pod)
			moved = append(moved, Nomination{Pod: placement.Pod.UID, Node: node.name, Group: node.member.group.ID()})
		}
		saving += best.saving
	}
	if len(moved) == 0 {
		return
	}
	applyImprovement(plan, nodes, moved)
	klog.FromContext(ctx).V(2).Info("Moved pods between the new nodes of the plan, for less", "increases", increasesOf(plan.Increases),
		"podsMoved", len(moved), "saving", saving)
}

// removalSaving simulates, in a fork, removing the nodes of indexes as
// improvePlan does, with the pods left on the new nodes of one member, or
// with mixes of two, that take them all for least, less than the nodes
// cost, within their groups' sizes and the cluster's limits; the first
// tried on a tie. The removal saves nothing, and has no nodes, when no
// new nodes take them for less.
func (s *ScaleUp) removalSaving(sched *simulator.Scheduler, nodes []*plannedNode, indexes []int, members []*candidate,
	groupOf map[types.UID]*simulator.PodGroup, totals clusterTotals, next map[*candidate]int, mixes bool) nodeRemoval {
	sched.Fork()
	defer sched.Revert()
	_, left := placeElsewhere(sched, nodes, indexes, groupOf)
	var freed pricing.Price
	for _, i := range indexes {
		freed += nodes[i].price
		totals.nodes--
		totals.capacity.Sub(nodes[i].member.template.LimitCapacity())
	}
	if len(left) == 0 {
		return nodeRemoval{nodes: indexes, saving: freed}
	}
	var needed snapshot.Resources
	for _, pod := range left {
		needed.Add(groupOf[pod.UID].Requests())
	}
	var best nodeRemoval
	// try places the pods left on the slots, the last with as many nodes
	// as cost less than what the best so far saves, unless these nodes
	// have less cpu or memory than the pods request.
	try := func(slots ...newSlot) {
		var cost pricing.Price
		var room snapshot.Resources
		totals := totals
		for j := range slots {
			member := slots[j].member
			price := s.nodePrice(member)
			most := min(member.room(), int((freed-best.saving-cost-1)/max(price, 1)))
			if allowed, _ := s.opts.Limits.nodesAllowed(totals, member.template); allowed < most {
				most = allowed
			}
			if j < len(slots)-1 {
				most = min(most, slots[j].most)
			}
			if most < 1 || j < len(slots)-1 && most < slots[j].most {
				return
			}
			slots[j].most = most
			cost += pricing.Price(most) * price
			totals.nodes += most
			for range most {
				totals.capacity.Add(member.template.LimitCapacity())
				room.Add(member.template.Allocatable())
			}
		}
		if needed.MilliCPU > room.MilliCPU || needed.Memory > room.Memory {
			return
		}
		sched.Fork()
		defer sched.Revert()
		if _, added, fits := placeOnNew(sched, slots, next, left, groupOf); fits {
			var cost pricing.Price
			for _, node := range added {
				cost += s.nodePrice(node.member)
			}
			if saving := freed - cost; saving > best.saving {
				best = nodeRemoval{nodes: indexes, slots: slots, saving: saving}
			}
		}
	}
	for _, member := range members {
		try(newSlot{member: member})
	}
	if !mixes {
		return best
	}
	for _, first := range members {
		for _, then := range members {
			if then == first {
				continue
			}
			for _, nodes := range []int{1, 2} {
				try(newSlot{member: first, most: nodes}, newSlot{member: then})
			}
		}
	}
	return best
}

// placeElsewhere removes the nodes of indexes and places their pods on
// the other new nodes, first fit, the largest first. It returns where
// they went and the pods that fit none.
func placeElsewhere(sched *simulator.Scheduler, nodes []*plannedNode, indexes []int, groupOf map[types.UID]*simulator.PodGroup) ([]simulator.Placement, []*corev1.Pod) {
	var pods []*corev1.Pod
	for _, i := range indexes {
		_ = sched.RemoveNode(nodes[i].name)
		pods = append(pods, nodes[i].pods...)
	}
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int { return largestRequestsFirst(groupOf[a.UID], groupOf[b.UID]) })
	var placed []simulator.Placement
	var left []*corev1.Pod
	for _, pod := range pods {
		group := groupOf[pod.UID]
		j := slices.IndexFunc(nodes, func(other *plannedNode) bool {
			return !slices.ContainsFunc(indexes, func(i int) bool { return nodes[i] == other }) && place(sched, group, pod, other.name)
		})
		if j < 0 {
			left = append(left, pod)
			continue
		}
		placed = append(placed, simulator.Placement{Pod: pod, NodeName: nodes[j].name, Group: group})
	}
	return placed, left
}

// place places the pod on the named node when it fits there; a node
// without room for its cpu or memory is passed over without asking the
// scheduler.
func place(sched *simulator.Scheduler, group *simulator.PodGroup, pod *corev1.Pod, name string) bool {
	nodeInfo := sched.Snapshot().NodeInfo(name)
	free := nodeInfo.Allocatable()
	requested, request := nodeInfo.Requested(), group.Requests()
	if request.MilliCPU > free.MilliCPU-requested.MilliCPU || request.Memory > free.Memory-requested.Memory {
		return false
	}
	return sched.PlaceOn(group, pod, name) == nil
}

// placeOnNew places the pods on new nodes of the slots, first fit,
// adding a node of the first slot with nodes to spare when none takes the
// next pod, numbered on from next; it returns where the pods went and the
// nodes added, and tells whether the pods all fit.
func placeOnNew(sched *simulator.Scheduler, slots []newSlot, next map[*candidate]int, pods []*corev1.Pod,
	groupOf map[types.UID]*simulator.PodGroup) ([]simulator.Placement, []*plannedNode, bool) {
	var added []*plannedNode
	counts := make([]int, len(slots))
	placed := make([]simulator.Placement, 0, len(pods))
	for _, pod := range pods {
		group := groupOf[pod.UID]
		j := slices.IndexFunc(added, func(node *plannedNode) bool { return place(sched, group, pod, node.name) })
		for slot := 0; j < 0 && slot < len(slots); slot++ {
			if counts[slot] == slots[slot].most {
				continue
			}
			member := slots[slot].member
			node := &plannedNode{name: upcomingNodeName(member.template, next[member]+counts[slot]), member: member}
			_ = sched.AddNode(member.template.CopyAs(node.name))
			if sched.PlaceOn(group, pod, node.name) != nil {
				_ = sched.RemoveNode(node.name)
				continue
			}
			counts[slot]++
			j, added = len(added), append(added, node)
		}
		if j < 0 {
			return nil, nil, false
		}
		placed = append(placed, simulator.Placement{Pod: pod, NodeName: added[j].name, Group: group})
	}
	return placed, added, true
}

// applyImprovement gives the plan the new nodes improvePlan left, each
// group's named in order as its rounds name them, and the pods moved
// their places after the others, in the last round.
func applyImprovement(plan *Plan, nodes []*plannedNode, moved []Nomination) {
	rename := map[string]string{}
	named := map[*candidate]int{}
	for _, node := range nodes {
		rename[node.name] = upcomingNodeName(node.member.template, node.member.upcoming+named[node.member])
		named[node.member]++
	}
	wasMoved := map[types.UID]bool{}
	for i, nomination := range moved {
		wasMoved[nomination.Pod] = true
		moved[i].Node = rename[nomination.Node]
	}
	rewrite := func(nominations []Nomination) []Nomination {
		result := make([]Nomination, 0, len(nominations))
		for _, nomination := range nominations {
			if wasMoved[nomination.Pod] {
				continue
			}
			if name, ok := rename[nomination.Node]; ok {
				nomination.Node = name
			}
			result = append(result, nomination)
		}
		return result
	}
	for i := range plan.Rounds {
		plan.Rounds[i].Placed, plan.Rounds[i].Reused = rewrite(plan.Rounds[i].Placed), rewrite(plan.Rounds[i].Reused)
	}
	last := &plan.Rounds[len(plan.Rounds)-1]
	last.Reused = append(last.Reused, moved...)
	plan.Nominations = append(rewrite(plan.Nominations), moved...)
	plan.Increases = nil
	for member, delta := range named {
		plan.Increases = append(plan.Increases, Increase{Group: member.group, Delta: delta})
	}
	slices.SortFunc(plan.Increases, func(a, b Increase) int { return strings.Compare(a.Group.ID(), b.Group.ID()) })
}

// nodePrice is what a new node of the candidate costs per hour.
func (s *ScaleUp) nodePrice(c *candidate) pricing.Price {
	return s.price.prices.NodePrice(c.group.Options().Price, c.template.Node()).PerHour
}
