package scaledown

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// maxReplacementGroups is how many groups one pass tries to replace
// nodes by, the cheapest capacity first, each with MaxSimulations.
const maxReplacementGroups = 4

// maxMixPartners is how many groups of smaller nodes one pass tries
// beside each group of maxReplacementGroups, in mixes of a few nodes of
// the group and as many of the smaller ones as the pods need: with at
// most three mixes a pair (mixSizes), a pass simulates at most
// maxReplacementGroups × (1 + 3 × maxMixPartners) times MaxSimulations
// replacements.
const maxMixPartners = 2

// Replacing is a replacement under way: its new nodes were asked of their
// group at Started, and the nodes it replaces are drained once the new
// ones are Ready. The Actuator keeps it and reports it in Progress; it
// lives no longer than the engine: an engine that restarts forgets it,
// and its new nodes are left to scale-down as any unneeded capacity.
type Replacing struct {
	Consolidation *Consolidation
	Started       time.Time
	// Before are the names of the registered nodes of the new nodes'
	// groups when these were asked for: the groups' other nodes are the
	// new ones.
	Before map[string]bool
}

// adds tells whether the named node is one of the new nodes of the
// replacement: a node of one of its groups that registered since it
// started.
func (r *Replacing) adds(snap *snapshot.Snapshot, name string) bool {
	if r == nil || r.Before[name] {
		return false
	}
	group := snap.NodeGroupOf(name)
	return group != nil && r.Consolidation.Replacement.Of(group.ID()) > 0
}

// ReplacingOutcome is where a replacement under way stands after a pass.
type ReplacingOutcome struct {
	Replacing *Replacing
	// ReadyNodes counts its new nodes that are Ready.
	ReadyNodes int
	// Ready tells that its new nodes are Ready: the nodes it replaces are
	// in Plan.Empty and Plan.Drain.
	Ready bool
	// Abandoned says why it was given up, "" while it was not: the nodes
	// it replaces stay, and its new nodes are left to scale-down.
	Abandoned string
}

// Message says where the replacement stands, for events, logs and
// explanations.
func (o *ReplacingOutcome) Message() string {
	c := o.Replacing.Consolidation
	switch {
	case o.Abandoned != "":
		return fmt.Sprintf("%s: abandoned, %s; the nodes stay, the new nodes are left to scale-down", c.Message(), o.Abandoned)
	case o.Ready:
		return fmt.Sprintf("%s: the new nodes are Ready, draining the nodes replaced", c.Message())
	default:
		return fmt.Sprintf("%s: waiting for the new nodes to be Ready (%d of %d)", c.Message(), o.ReadyNodes, c.Replacement.Nodes())
	}
}

// replacementGroup is a node group whose new nodes may replace others.
type replacementGroup struct {
	group    nodegroups.NodeGroup
	template *snapshot.NodeInfo
	price    pricing.Price
	// room is the most nodes it may add: within its max size and the
	// cluster's limits, beside the nodes they would replace.
	room int
	// worth is what its template offers at the default rates, perWorth
	// its price over that: the cheapest capacity is tried first.
	worth    pricing.Price
	perWorth float64
}

// replacementGroups are the groups that may add nodes for a replacement:
// those with a template and room, which are not kept from growing, the
// cheapest capacity first.
func (p *Planner) replacementGroups(snap *snapshot.Snapshot, progress Progress) []replacementGroup {
	opts := p.opts.Consolidation
	var groups []replacementGroup
	for _, group := range snap.NodeGroups() {
		template := snap.Template(group.ID())
		if template == nil || progress.NotGrowing[group.ID()] != "" {
			continue
		}
		room := group.MaxSize() - group.TargetSize()
		if allowed, _ := opts.Limits.NodesAllowed(snap.NodeInfos(), template); allowed < room {
			room = allowed
		}
		if room <= 0 {
			continue
		}
		price := opts.Prices.NodePrice(group.Options().Price, template.Node()).PerHour
		allocatable := template.Allocatable()
		worth := pricing.Resources{MilliCPU: allocatable.MilliCPU, MemoryBytes: allocatable.Memory, GPUs: allocatable.Scalar[gpuResource(allocatable)]}.AtDefaultRates()
		groups = append(groups, replacementGroup{group: group, template: template, price: price, room: room, worth: worth, perWorth: float64(price) / float64(max(worth, 1))})
	}
	// At the same price for what they offer, larger nodes replace more.
	slices.SortFunc(groups, func(a, b replacementGroup) int {
		return cmp.Or(cmp.Compare(a.perWorth, b.perWorth), cmp.Compare(b.worth, a.worth), cmp.Compare(a.group.ID(), b.group.ID()))
	})
	return groups
}

// replacementSlot are new nodes of a group that may take pods in a
// replacement: nodes of them, or as many as the pods need when 0.
type replacementSlot struct {
	group replacementGroup
	nodes int
}

// consolidateByReplacing looks, group after group, for nodes whose pods
// fit on the nodes that remain plus new nodes of the group, and that cost
// more than those new nodes: the set grows as consolidateByDeleting grows
// it, with the new nodes there to take pods after the nodes that exist,
// and the first nodes of it that save the most are taken. It also tries
// mixes, a few new nodes of the group and then as many of a group of
// smaller nodes as the pods left need (one 32-cpu node and three 4-cpu
// nodes, where neither size alone saves as much): so the pods that pack
// well on large nodes take them, and the rest get small ones, as
// first-fit decreasing packs bins of two sizes. The replacement that
// saves the most wins, the first tried on a tie, once its evicted pods
// fit together (placeTogether); only the winners are placed so. At most
// maxReplacementGroups groups are tried, each alone and in mixes with
// maxMixPartners others, each with MaxSimulations.
func (p *Planner) consolidateByReplacing(ctx context.Context, snap *snapshot.Snapshot, progress Progress, candidates []*consolidationCandidate, scope consolidationScope) *decided {
	groups := p.replacementGroups(snap, progress)
	simulations := p.opts.Consolidation.MaxSimulations
	orders := replacementOrders(candidates)
	var replacements []replacement
	// try grows a replacement by slots in each order and returns the one
	// that saves the most, the first on a tie.
	try := func(slots ...replacementSlot) *decided {
		var best *decided
		for _, candidates := range orders {
			r := p.replaceBy(ctx, snap, progress, candidates, scope, slots, simulations)
			if r.decided == nil {
				continue
			}
			replacements = append(replacements, r)
			if best == nil || r.decided.Savings > best.Savings {
				best = r.decided
			}
		}
		return best
	}
	for _, group := range groups[:min(len(groups), maxReplacementGroups)] {
		alone := try(replacementSlot{group: group})
		used := 0
		if alone != nil && alone.Replacement != nil {
			used = alone.Replacement.Of(group.group.ID())
		}
		partners := 0
		for _, smaller := range groups {
			if partners == maxMixPartners {
				break
			}
			if smaller.worth >= group.worth {
				continue
			}
			partners++
			for _, nodes := range mixSizes(used, group.room) {
				try(replacementSlot{group: group, nodes: nodes}, replacementSlot{group: smaller})
			}
		}
	}
	// The replacements as simulated, the most saving first, the first
	// tried on a tie: the first whose pods fit together wins.
	slices.SortStableFunc(replacements, func(a, b replacement) int { return cmp.Compare(b.decided.Savings, a.decided.Savings) })
	for _, r := range replacements {
		if d := p.bestThatFits(ctx, snap, r.steps, scope, r.slots); d != nil {
			return d
		}
	}
	return nil
}

// replacementOrders are the orders a replacement grows its set of
// candidates in: that of Delete, the nodes that cost most for what they
// run first; then the dearest nodes first, whose pods may fit fewer or
// cheaper new nodes with room left for those of the next nodes (a
// half-used 32-cpu node before the small nodes whose pods would fill the
// new ones first); then the least utilized first. The greedy set depends
// on its order, and each order finds replacements the others miss. An
// order that is the same as one before is not tried again.
func replacementOrders(candidates []*consolidationCandidate) [][]*consolidationCandidate {
	orders := [][]*consolidationCandidate{candidates}
	for _, compare := range []func(a, b *consolidationCandidate) int{
		func(a, b *consolidationCandidate) int { return cmp.Compare(b.price, a.price) },
		func(a, b *consolidationCandidate) int { return cmp.Compare(a.utilization.Value, b.utilization.Value) },
	} {
		order := slices.Clone(candidates)
		// Stable: at the same price or utilization, the order of Delete.
		slices.SortStableFunc(order, compare)
		if !slices.ContainsFunc(orders, func(known []*consolidationCandidate) bool { return slices.Equal(known, order) }) {
			orders = append(orders, order)
		}
	}
	return orders
}

// replacement is a replacement as simulated: the steps it was grown in
// with the new nodes of its slots, and the prefix that saves most.
type replacement struct {
	decided *decided
	steps   []step
	slots   []replacementSlot
}

// mixSizes are how many nodes of a group a mix tries before the smaller
// nodes of another, when the group alone needed used nodes (0 when it
// saved nothing): one, as many, and all but the last; one and two
// without used.
func mixSizes(used, room int) []int {
	sizes := []int{1, 2}
	if used > 0 {
		sizes = []int{1, used - 1, used}
	}
	sizes = slices.DeleteFunc(sizes, func(n int) bool { return n < 1 || n > room })
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// replaceBy grows a replacement by the new nodes of slots, in a fork: the
// pods that the nodes there do not take go to the first new node that
// takes them, in the order of the slots.
func (p *Planner) replaceBy(ctx context.Context, snap *snapshot.Snapshot, progress Progress, candidates []*consolidationCandidate,
	scope consolidationScope, slots []replacementSlot, simulations int) replacement {
	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	pods := 0
	for _, c := range candidates {
		pods += c.pods
	}
	newNodes := map[string]int{}
	// The nodes of the slots before count against the cluster's limits.
	added := slices.Clone(snap.NodeInfos())
	for slot, s := range slots {
		room := s.group.room
		if slot > 0 {
			if allowed, _ := p.opts.Consolidation.Limits.NodesAllowed(added, s.group.template); allowed < room {
				room = allowed
			}
			room = min(room, s.group.group.MaxSize()-s.group.group.TargetSize())
		}
		nodes := min(room, max(len(candidates), pods), simulations)
		if s.nodes > 0 {
			nodes = min(nodes, s.nodes)
		}
		for i := range nodes {
			name := fmt.Sprintf("%s-replacement-%d", s.group.template.Name(), i)
			if sched.AddNode(s.group.template.CopyAs(name)) == nil {
				newNodes[name] = slot
				added = append(added, s.group.template)
			}
		}
	}
	state := p.newPass(ctx, sched)
	p.startPass(ctx, sched, progress, state)
	// The cluster's minimums count only the nodes there now.
	for _, slot := range newNodes {
		state.totals.Sub(slots[slot].group.template.LimitCapacity())
	}
	state.newNodes, state.newSlots = newNodes, slots
	steps := p.grow(ctx, sched, state, candidates, simulations)
	sched.Revert()
	d := p.opts.Consolidation.best(steps, scope, slots)
	if d != nil && d.Replacement == nil {
		// The pods fit without new nodes: a deletion the greedy order of
		// consolidateByDeleting missed.
		klog.FromContext(ctx).V(4).Info("Consolidation found a deletion while trying a replacement", "nodeGroup", slots[0].group.group.ID())
	}
	return replacement{decided: d, steps: steps, slots: slots}
}

// followReplacement carries the replacement under way one step: it waits
// for its new nodes to be Ready, then, when the pods of the nodes it
// replaces still fit on the nodes that remain, the new ones included,
// removes those nodes through the safe path of scale-down. It abandons
// the replacement when the nodes it replaces are gone or can no longer
// go, and when its new nodes are not Ready within the group's
// maxNodeProvisionTime.
func (p *Planner) followReplacement(ctx context.Context, snap *snapshot.Snapshot, progress Progress, plan *Plan, now time.Time) {
	r := progress.Replacing
	out := &ReplacingOutcome{Replacing: r}
	plan.Replacing = out
	c := r.Consolidation
	defer func() {
		klog.FromContext(ctx).V(2).Info("Replacement under way", "message", out.Message())
	}()
	for _, removal := range c.Removals {
		if name := removal.Node.Name; snap.NodeInfo(name) == nil || progress.Deleting[name] {
			out.Abandoned = fmt.Sprintf("node %s is gone or being removed", name)
			return
		}
	}
	// Each group must have its new nodes Ready: more of one group do not
	// make up for another's.
	var late []nodegroups.NodeGroup
	for _, g := range c.Replacement.Groups {
		ready := 0
		for _, name := range snap.RegisteredNodes(g.Group.ID()) {
			if info := snap.NodeInfo(name); r.adds(snap, name) && info != nil && p.opts.NodeRules.Readiness(info.Node(), now) == nodefacts.Ready {
				ready++
			}
		}
		out.ReadyNodes += min(ready, g.Nodes)
		if ready < g.Nodes {
			late = append(late, g.Group)
		}
	}
	for _, group := range late {
		if wait := p.opts.Groups.For(group).MaxNodeProvisionTime; wait > 0 && !now.Before(r.Started.Add(wait)) {
			out.Abandoned = fmt.Sprintf("%d of its %d new node(s) Ready %s after they were asked for (maxNodeProvisionTime)", out.ReadyNodes, c.Replacement.Nodes(), wait)
			return
		}
	}
	if len(late) > 0 {
		p.keepReplaced(plan, out)
		return
	}
	if len(plan.Empty)+len(plan.Drain) > 0 {
		// Scale-down's removals go first; the pods they move may take
		// the room of the replaced nodes' pods, which the next pass sees.
		p.keepReplaced(plan, out)
		return
	}
	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	defer sched.Revert()
	state := p.newPass(ctx, sched)
	p.startPass(ctx, sched, progress, state)
	// Every node is checked before any removal is simulated: the pods of
	// one may be placed on another, which is no pod waiting for it.
	candidates := make([]*candidate, 0, len(c.Removals))
	for _, removal := range c.Removals {
		// As when it was chosen: no pod is moved that came less than
		// consolidateAfter before, such as a pod kube-scheduler put there
		// while the new nodes came up.
		if after := p.opts.Consolidation.ConsolidateAfter; now.Before(p.stable.pods[removal.Node.Name].since.Add(after)) {
			out.Abandoned = fmt.Sprintf("node %s can no longer go: its pods changed within consolidateAfter (%s)", removal.Node.Name, after)
			return
		}
		nodeInfo := snap.NodeInfo(removal.Node.Name)
		candidate, kept := p.checkNode(nodeInfo, snap.NodeGroupOf(nodeInfo.Name()), progress.Deleting, now)
		switch {
		case candidate == nil || kept != nil && kept.Reason != ReasonNotUnderutilized:
			// Kept for a reason of its own, which kept says.
		case forbidsDisruption(nodeInfo, now):
			kept = &Decision{Reason: ReasonBlockedByPod, Message: "a pod on it is annotated " + DoNotDisruptAnnotation + "=true"}
		default:
			kept = nil
		}
		if kept != nil {
			out.Abandoned = fmt.Sprintf("node %s can no longer go: %s", removal.Node.Name, kept.Message)
			return
		}
		candidates = append(candidates, candidate)
	}
	var steps []step
	for i, candidate := range candidates {
		empty, kept := p.tryRemove(sched, candidate, state)
		if kept != nil && kept.Reason == ReasonNoPlaceToMovePods && len(progress.Deleting) == 0 {
			// Moved node by node, the pods of the nodes before took
			// the room of this one's. The replacement was decided with
			// its evicted pods placed together, as kube-scheduler's
			// queue takes them: they may still fit so.
			if together := p.fitTogether(ctx, snap, sched, state, candidates, steps, i); together != nil {
				steps, kept = together, nil
				break
			}
		}
		if kept != nil {
			out.Abandoned = fmt.Sprintf("node %s can no longer go: %s", candidate.nodeInfo.Name(), kept.Message)
			return
		}
		steps = append(steps, step{removal: consolidationRemoval(candidate), empty: empty})
	}
	plan.add(steps)
	out.Ready = true
}

// fitTogether finishes the steps of a replacement under way whose
// candidates from the one at from on could not go after those before
// them, node by node: it checks those candidates as tryRemove does but
// for where their pods go, then places the pods evicted from every
// candidate together on the nodes that remain (placeTogether). It returns
// the steps of every candidate, or nil when a pod keeps its node or the
// pods do not fit together. sched must be in one fork of snap, which it
// reverts.
func (p *Planner) fitTogether(ctx context.Context, snap *snapshot.Snapshot, sched *simulator.Scheduler, state *pass, candidates []*candidate, steps []step, from int) []step {
	steps = slices.Clone(steps)
	for _, c := range candidates[from:] {
		movable, _, empty, kept := p.podsToMove(sched, c, state)
		if kept != nil {
			return nil
		}
		state.pdbs.consume(movable)
		state.sizes[c.group.ID()]--
		state.totals.Sub(c.nodeInfo.LimitCapacity())
		steps = append(steps, step{removal: consolidationRemoval(c), empty: empty})
	}
	// placeTogether starts from the cluster as it is, without the
	// removals simulated so far.
	sched.Revert()
	if p.placeTogether(ctx, snap, &decided{Consolidation: &Consolidation{}, steps: steps}, consolidationScope{}, nil) == nil {
		return nil
	}
	return steps
}

// keepReplaced keeps the nodes a replacement under way replaces, saying
// where it stands.
func (p *Planner) keepReplaced(plan *Plan, out *ReplacingOutcome) {
	for _, removal := range out.Replacing.Consolidation.Removals {
		plan.Kept[removal.Node.Name] = Decision{Reason: ReasonAwaitingReplacement, Message: out.Message()}
	}
}
