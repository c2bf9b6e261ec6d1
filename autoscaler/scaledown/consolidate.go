package scaledown

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// ConsolidationPolicy says what consolidation may do to lower the cost of
// the cluster.
type ConsolidationPolicy string

const (
	// ConsolidationDisabled: nodes go only when scale-down finds them
	// unneeded, as with the upstream cluster-autoscaler.
	ConsolidationDisabled ConsolidationPolicy = "Disabled"
	// ConsolidationDelete: on top of that, remove the set of nodes, whatever
	// their utilization, whose pods all fit on the nodes that remain and
	// whose removal saves the most.
	ConsolidationDelete ConsolidationPolicy = "Delete"
	// ConsolidationReplace: on top of Delete, replace nodes by fewer or
	// cheaper new nodes of any node group when the new nodes cost less than
	// those they replace. The new nodes are asked for first, and the nodes
	// they replace are drained once the new ones are Ready.
	ConsolidationReplace ConsolidationPolicy = "Replace"
	// ConsolidationBalanced: Replace, but only the consolidations whose
	// share of the cluster's cost saved, over their share of the cluster's
	// pods evicted, reaches BalancedThreshold, as Karpenter's Balanced
	// policy.
	ConsolidationBalanced ConsolidationPolicy = "Balanced"
)

// DefaultBalancedThreshold is Karpenter's: a consolidation goes ahead
// when the share of the cost it saves is at least half the share of the
// pods it evicts (its k of 2).
const DefaultBalancedThreshold = 0.5

// DoNotDisruptAnnotation "true" on a pod keeps its node from
// consolidation, as it keeps it from Karpenter's. Scale-down of unneeded
// nodes ignores it, as the upstream cluster-autoscaler does.
const DoNotDisruptAnnotation = "karpenter.sh/do-not-disrupt"

// ConsolidationOptions configure consolidation. Like Options, they have no
// defaults of their own: the engine's configuration owns them.
type ConsolidationOptions struct {
	// Policy is what consolidation may do; the zero value does nothing,
	// as ConsolidationDisabled.
	Policy ConsolidationPolicy
	// ConsolidateAfter is how long the nodes of the cluster, and the pods
	// of a node, must have stayed the same before the node is considered:
	// a cluster that is still changing is left to settle.
	ConsolidateAfter time.Duration
	// Budget is the most nodes of one node group disrupted at once: a
	// number, or a percentage of the group's target size, rounded up. A
	// group's GroupOptions.ConsolidationBudget replaces it for the group.
	Budget intstr.IntOrString
	// Budgets bound it further, at all times or inside the windows of
	// their schedule: the smallest budget that applies wins.
	Budgets []ScheduledBudget
	// Prices price the nodes of the groups that have no price of their
	// own (pricing.Table.NodePrice).
	Prices pricing.Table
	// MaxSimulations bounds the removals one pass simulates, so that a
	// pass over a large cluster stays short: as many for the deletions,
	// and as many for the replacements by each group tried
	// (maxReplacementGroups).
	MaxSimulations int
	// BalancedThreshold is, under ConsolidationBalanced, the least score
	// of a consolidation: the share of the cost of the cluster's nodes it
	// saves over the share of their pods it evicts.
	BalancedThreshold float64
	// Limits are the cluster-wide maximums: the new nodes of a
	// replacement join the cluster before the nodes they replace leave it,
	// so they must fit within them beside those.
	Limits scaleup.ResourceLimits
}

// deletes tells whether consolidation removes nodes.
func (o ConsolidationOptions) deletes() bool {
	return o.Policy == ConsolidationDelete || o.Replaces()
}

// Replaces tells whether consolidation may replace nodes: it then needs
// the templates of the node groups in the snapshot it plans on
// (simulator.SetTemplates).
func (o ConsolidationOptions) Replaces() bool {
	return o.Policy == ConsolidationReplace || o.Policy == ConsolidationBalanced
}

// ScheduledBudget is a disruption budget that applies at all times, or
// only inside the windows of Schedule, to every node group or to those
// Groups selects.
type ScheduledBudget struct {
	// Name names the budget in the reasons nodes are kept.
	Name  string
	Nodes intstr.IntOrString
	// Schedule is nil for a budget that always applies.
	Schedule *schedule.Schedule
	// Groups is nil for a budget of every group.
	Groups *GroupSelector
}

// GroupSelector selects node groups by the name of the object behind them
// and by its labels: a group is selected when it matches each that is set.
type GroupSelector struct {
	// Names are the names of the objects, nil for any.
	Names map[string]bool
	// Labels selects their labels, nil for any.
	Labels labels.Selector
}

// Selects tells whether the selector selects group.
func (s *GroupSelector) Selects(group nodegroups.NodeGroup) bool {
	id := group.ID()
	if s.Names != nil && !s.Names[id[strings.LastIndex(id, "/")+1:]] {
		return false
	}
	return s.Labels == nil || s.Labels.Matches(labels.Set(group.Labels()))
}

// allowance is how many nodes of a group consolidation may disrupt at
// once, and the budget that says so.
type allowance struct {
	nodes  int
	budget string
}

// allowed is how many nodes of group consolidation may disrupt at once at
// now: the smallest of the budgets that apply, the group's own budget
// replacing Budget when it has one.
func (o ConsolidationOptions) allowed(group nodegroups.NodeGroup, now time.Time) allowance {
	budget, name := o.Budget, "spec.consolidation.budget"
	if own := group.Options().ConsolidationBudget; own != nil {
		budget, name = *own, "the group's consolidation-budget annotation"
	}
	// Every budget was checked: their scaling cannot fail.
	nodes, _ := intstr.GetScaledValueFromIntOrPercent(&budget, group.TargetSize(), true)
	least := allowance{nodes: max(nodes, 0), budget: fmt.Sprintf("%s (nodes %s)", name, budget.String())}
	for _, b := range o.Budgets {
		if b.Groups != nil && !b.Groups.Selects(group) {
			continue
		}
		var in string
		if b.Schedule != nil {
			open, _ := b.Schedule.At(now)
			if open == nil {
				continue
			}
			in = fmt.Sprintf(", schedule %s, window %s", b.Schedule, open)
		}
		nodes, _ := intstr.GetScaledValueFromIntOrPercent(&b.Nodes, group.TargetSize(), true)
		if nodes = max(nodes, 0); nodes < least.nodes {
			least = allowance{nodes: nodes, budget: fmt.Sprintf("%s (nodes %s%s)", b.Name, b.Nodes.String(), in)}
		}
	}
	return least
}

func (o ConsolidationOptions) validate() error {
	switch o.Policy {
	case "", ConsolidationDisabled:
		return nil
	case ConsolidationDelete, ConsolidationReplace:
	case ConsolidationBalanced:
		if o.BalancedThreshold <= 0 {
			return fmt.Errorf("the balanced threshold must be positive, got %v", o.BalancedThreshold)
		}
	default:
		return fmt.Errorf("consolidation policy must be %s, %s, %s or %s, got %q",
			ConsolidationDisabled, ConsolidationDelete, ConsolidationReplace, ConsolidationBalanced, o.Policy)
	}
	if o.ConsolidateAfter < 0 {
		return errors.New("consolidateAfter must not be negative")
	}
	if o.MaxSimulations < 1 {
		return fmt.Errorf("consolidation needs at least 1 simulation per pass, got %d", o.MaxSimulations)
	}
	if err := nodegroups.CheckConsolidationBudget(o.Budget); err != nil {
		return fmt.Errorf("the consolidation budget %q is %w", o.Budget.String(), err)
	}
	for _, b := range o.Budgets {
		if err := nodegroups.CheckConsolidationBudget(b.Nodes); err != nil {
			return fmt.Errorf("the consolidation budget %s %q is %w", b.Name, b.Nodes.String(), err)
		}
	}
	return nil
}

// Consolidation is what consolidation decided in a pass: the nodes it
// removes together and what that saves. A deletion's removals are also in
// Plan.Empty or Plan.Drain; a replacement's wait for its new nodes.
type Consolidation struct {
	Removals []Removal
	// Savings are what it saves per hour: the prices of the nodes removed,
	// less those of the new nodes.
	Savings pricing.Price
	// Replacement are the new nodes that replace the removed ones, nil
	// when it only deletes.
	Replacement *Replacement
}

// Replacement are the new nodes, of one node group or several, that a
// consolidation adds in place of those it removes.
type Replacement struct {
	// Groups are the new nodes of each group, a group at most once.
	Groups []NewNodes
	// Price is what the new nodes cost per hour, together.
	Price pricing.Price
}

// NewNodes are new nodes of one node group.
type NewNodes struct {
	Group nodegroups.NodeGroup
	Nodes int
}

// Nodes counts the new nodes of every group.
func (r *Replacement) Nodes() int {
	nodes := 0
	for _, g := range r.Groups {
		nodes += g.Nodes
	}
	return nodes
}

// Of is how many new nodes the replacement asks of the group with id.
func (r *Replacement) Of(id string) int {
	for _, g := range r.Groups {
		if g.Group.ID() == id {
			return g.Nodes
		}
	}
	return 0
}

// String says what the new nodes are: "1 × A and 3 × B".
func (r *Replacement) String() string {
	parts := make([]string, 0, len(r.Groups))
	for _, g := range r.Groups {
		parts = append(parts, fmt.Sprintf("%d × %s", g.Nodes, g.Group.ID()))
	}
	return strings.Join(parts, " and ")
}

// Message says what consolidation does, for events, logs and decisions.
func (c *Consolidation) Message() string {
	names := make([]string, 0, len(c.Removals))
	for _, removal := range c.Removals {
		names = append(names, removal.Node.Name)
	}
	if r := c.Replacement; r != nil {
		return fmt.Sprintf("consolidation: replacing nodes %s with %s saves %s/h", strings.Join(names, ", "), r, c.Savings)
	}
	return fmt.Sprintf("consolidation: removing nodes %s saves %s/h", strings.Join(names, ", "), c.Savings)
}

// stability remembers since when the cluster has had the nodes it has, and
// each node the pods it runs, by fingerprints of their names and UIDs;
// and what the cluster cost when consolidation last decided for the
// pods it runs.
type stability struct {
	seed  maphash.Seed
	nodes unchangedSince
	pods  map[string]unchangedSince
	// decided are, by workload, the cluster when consolidation last
	// decided for it; remembered are the workloads in the order they were
	// last decided for, at most maxRemembered.
	decided    map[workload]decidedFor
	remembered []workload
}

// workload is what the cluster runs, as consolidation remembers it: the
// pods bound and what they request, and the pods pending. Evicted pods
// come back under other names and UIDs; their requests stay.
type workload struct {
	bound, pending   int
	milliCPU, memory int64
}

// decidedFor is the cluster when consolidation decided for a workload:
// what the nodes of the groups cost, the fingerprint of the nodes, and
// when.
type decidedFor struct {
	cost  pricing.Price
	nodes uint64
	at    time.Time
}

// maxRemembered bounds the workloads consolidation remembers, and
// rememberFor how long.
const (
	maxRemembered = 16
	rememberFor   = time.Hour
)

// undone tells whether consolidation decided for the same workload within
// rememberFor, when the cluster had other nodes that cost no more than
// now: the pods evicted then came back elsewhere than simulated, and the
// scale-up that placed them took back what it saved, or more. Deciding
// again could go round (replace, scale up, replace): for a workload,
// a consolidation must start from a cluster that costs less than the
// last one did. The same nodes as then say that nothing was done, as in
// DryRun or after a failure: that decision may be taken again.
func (s *stability) undone(w workload, cost pricing.Price, now time.Time) (decidedFor, bool) {
	before, ok := s.decided[w]
	return before, ok && now.Before(before.at.Add(rememberFor)) && s.nodes.fingerprint != before.nodes && cost >= before.cost
}

// remember records that consolidation decided for the workload when the
// cluster cost cost.
func (s *stability) remember(w workload, cost pricing.Price, now time.Time) {
	if s.decided == nil {
		s.decided = map[workload]decidedFor{}
	}
	s.remembered = append(slices.DeleteFunc(s.remembered, func(known workload) bool { return known == w }), w)
	if len(s.remembered) > maxRemembered {
		delete(s.decided, s.remembered[0])
		s.remembered = s.remembered[1:]
	}
	s.decided[w] = decidedFor{cost: cost, nodes: s.nodes.fingerprint, at: now}
}

// workloadOf is the workload of snap and what its groups' nodes cost.
func workloadOf(snap *snapshot.Snapshot, opts ConsolidationOptions) (workload, pricing.Price) {
	w := workload{pending: len(snap.PendingPods())}
	var cost pricing.Price
	for _, nodeInfo := range snap.NodeInfos() {
		if group := snap.NodeGroupOf(nodeInfo.Name()); group != nil {
			cost += opts.Prices.NodePrice(group.Options().Price, nodeInfo.Node()).PerHour
		}
		for _, pod := range nodeInfo.Pods() {
			if pod.Pod.NodeName != "" && !pod.Pod.IsDaemonSetPod() {
				w.bound++
				w.milliCPU += pod.Requests.MilliCPU
				w.memory += pod.Requests.Memory
			}
		}
	}
	return w, cost
}

// unchangedSince is a fingerprint and since when it has been the same.
type unchangedSince struct {
	fingerprint uint64
	since       time.Time
}

func (u unchangedSince) next(fingerprint uint64, now time.Time) unchangedSince {
	if u.fingerprint == fingerprint && !u.since.IsZero() {
		return u
	}
	return unchangedSince{fingerprint: fingerprint, since: now}
}

// observe records the nodes of snap and the pods bound to each. Sums of
// hashes do not depend on the order things are listed in.
func (s *stability) observe(snap *snapshot.Snapshot, now time.Time) {
	var nodes uint64
	pods := make(map[string]unchangedSince, len(snap.NodeInfos()))
	for _, nodeInfo := range snap.NodeInfos() {
		nodes += maphash.String(s.seed, nodeInfo.Name())
		var bound uint64
		for _, pod := range nodeInfo.Pods() {
			// Pending pods placed to plan are not the node's yet.
			if pod.Pod.NodeName != "" {
				bound += maphash.String(s.seed, string(pod.Pod.UID))
			}
		}
		pods[nodeInfo.Name()] = s.pods[nodeInfo.Name()].next(bound, now)
	}
	s.nodes = s.nodes.next(nodes, now)
	s.pods = pods
}

// consolidationCandidate is a node consolidation may remove.
type consolidationCandidate struct {
	*candidate
	price pricing.Price
	// pods are the pods its removal evicts, for ConsolidationBalanced.
	pods int
	// perWorth is the node's price over what its movable pods are worth at
	// the default rates: the nodes that cost most for what they run go
	// first.
	perWorth float64
	// allowed is how many nodes of its group consolidation may disrupt.
	allowed allowance
}

// consolidate looks, once scale-down has chosen nothing in the pass and
// nothing is being removed, for nodes whose pods all fit on the nodes that
// remain, whatever their utilization, and adds them to plan. When the
// policy replaces, it also looks for nodes whose pods fit on the nodes
// that remain plus new nodes of one group that cost less than they do
// (consolidateByReplacing), and takes that when it saves more.
func (p *Planner) consolidate(ctx context.Context, snap *snapshot.Snapshot, progress Progress, plan *Plan, now time.Time) {
	logger := klog.FromContext(ctx)
	opts := p.opts.Consolidation
	switch {
	case len(plan.Empty)+len(plan.Drain) > 0 || len(progress.Deleting) > 0:
		logger.V(4).Info("Consolidation waits for the removals in progress")
		return
	case p.cooldown(now, progress) != nil:
		return
	case now.Before(p.stable.nodes.since.Add(opts.ConsolidateAfter)):
		logger.V(4).Info("Consolidation waits for the cluster's nodes to stay the same", "since", p.stable.nodes.since, "consolidateAfter", opts.ConsolidateAfter)
		return
	}
	w, cost := workloadOf(snap, opts)
	if before, undone := p.stable.undone(w, cost, now); undone {
		logger.V(4).Info("Consolidation is held: the nodes cost no less than when it last decided for the same pods", "cost", cost.String(), "costThen", before.cost.String(), "decidedAt", before.at)
		return
	}
	candidates, held := p.consolidationCandidates(snap, progress, now)
	for name, decision := range held {
		if plan.Kept[name].Reason == ReasonNotUnderutilized {
			plan.Kept[name] = decision
		}
	}
	if len(candidates) == 0 {
		return
	}
	scope := consolidationScopeOf(snap, opts, p.opts.PriorityCutoff)
	decided := p.consolidateByDeleting(ctx, snap, progress, candidates, scope)
	if opts.Replaces() {
		// A replacement must save more than deleting alone: it disrupts
		// as much, and waits for new nodes.
		if replaced := p.consolidateByReplacing(ctx, snap, progress, candidates, scope); replaced != nil && (decided == nil || replaced.Savings > decided.Savings) {
			decided = replaced
		}
	}
	if decided == nil {
		return
	}
	p.stable.remember(w, cost, now)
	plan.Consolidation = decided.Consolidation
	if decided.Replacement != nil {
		for _, removal := range decided.Removals {
			plan.Kept[removal.Node.Name] = Decision{Reason: ReasonAwaitingReplacement, Message: decided.Message() + ": the node is drained once the new nodes are Ready"}
		}
	} else {
		plan.add(decided.steps)
	}
	logger.V(2).Info("Consolidating", "nodes", len(decided.Removals), "savingsPerHour", decided.Savings.String(), "replacement", decided.Replacement != nil)
}

// observe records what consolidation remembers of snap.
func (p *Planner) observe(snap *snapshot.Snapshot, now time.Time) {
	if p.stable == nil {
		p.stable = &stability{seed: maphash.MakeSeed()}
	}
	p.stable.observe(snap, now)
}

// add adds the removals of steps to the plan's removals.
func (plan *Plan) add(steps []step) {
	for _, s := range steps {
		if s.empty {
			plan.Empty = append(plan.Empty, s.removal)
		} else {
			plan.Drain = append(plan.Drain, s.removal)
		}
		delete(plan.Kept, s.removal.Node.Name)
	}
}

// consolidationRemoval is the removal of a node consolidation chose, with
// the pods bound to it then: a pod bound since, even a moment before the
// taint, came less than consolidateAfter before and is not moved.
func consolidationRemoval(c *candidate) Removal {
	moves := map[types.UID]bool{}
	for _, pod := range c.nodeInfo.Pods() {
		// Pending pods placed there to plan are not bound to it.
		if pod.Pod.NodeName == c.nodeInfo.Name() {
			moves[pod.Pod.UID] = true
		}
	}
	return Removal{Node: c.nodeInfo.Node(), Group: c.group, ByConsolidation: true, Moves: moves}
}

// step is a consolidation grown by one node: the node, and what the
// consolidation removes, saves and evicts with it and the nodes before.
type step struct {
	removal Removal
	empty   bool
	// removed are the prices of the nodes removed so far, per hour; pods
	// the pods they evict.
	removed pricing.Price
	pods    int
	// newNodes are the new nodes the pods moved so far need, by slot of
	// the replacement, and newCost what they cost per hour.
	newNodes []int
	newCost  pricing.Price
}

// decided is a consolidation with the steps it was grown in.
type decided struct {
	*Consolidation
	steps []step
}

// consolidationScope is what a consolidation's share of the cluster is
// measured against under ConsolidationBalanced: the prices of the nodes
// of the node groups and the pods consolidation would evict from them.
type consolidationScope struct {
	cost pricing.Price
	pods int
}

func consolidationScopeOf(snap *snapshot.Snapshot, opts ConsolidationOptions, cutoff int32) consolidationScope {
	var scope consolidationScope
	if opts.Policy != ConsolidationBalanced {
		return scope
	}
	for _, nodeInfo := range snap.NodeInfos() {
		group := snap.NodeGroupOf(nodeInfo.Name())
		if group == nil {
			continue
		}
		scope.cost += opts.Prices.NodePrice(group.Options().Price, nodeInfo.Node()).PerHour
		for _, pod := range nodeInfo.Pods() {
			if roleOf(pod.Pod, cutoff) == podMovable {
				scope.pods++
			}
		}
	}
	return scope
}

// score is a consolidation's share of the cost saved over its share of
// the pods evicted; one that evicts nothing scores infinitely.
func (s consolidationScope) score(savings pricing.Price, pods int) float64 {
	if pods == 0 || s.pods == 0 {
		return math.Inf(1)
	}
	return (float64(savings) / float64(max(s.cost, 1))) / (float64(pods) / float64(s.pods))
}

// best chooses how far to take a consolidation grown in steps, with the
// new nodes of slots: the first steps that save the most, and, under
// ConsolidationBalanced, whose score reaches the threshold. Nil when no
// prefix saves anything.
func (o ConsolidationOptions) best(steps []step, scope consolidationScope, slots []replacementSlot) *decided {
	taken, savings := 0, pricing.Price(0)
	for i, s := range steps {
		saves := s.removed - s.newCost
		if saves <= savings || o.Policy == ConsolidationBalanced && scope.score(saves, s.pods) < o.BalancedThreshold {
			continue
		}
		taken, savings = i+1, saves
	}
	if taken == 0 {
		return nil
	}
	d := &decided{Consolidation: &Consolidation{Savings: savings}, steps: steps[:taken]}
	for _, s := range d.steps {
		d.Removals = append(d.Removals, s.removal)
	}
	last := steps[taken-1]
	for slot, n := range last.newNodes {
		if n > 0 {
			if d.Replacement == nil {
				d.Replacement = &Replacement{Price: last.newCost}
			}
			d.Replacement.Groups = append(d.Replacement.Groups, NewNodes{Group: slots[slot].group.group, Nodes: n})
		}
	}
	return d
}

// consolidateByDeleting grows the set of nodes to remove greedily, the
// nodes that cost most for what they run first, each simulated as if
// those already in the set were gone, as scale-down simulates: the pods
// moved onto a node of the set move again, and a node whose pods then
// fit nowhere is left out for the next.
func (p *Planner) consolidateByDeleting(ctx context.Context, snap *snapshot.Snapshot, progress Progress, candidates []*consolidationCandidate, scope consolidationScope) *decided {
	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	state := p.newPass(ctx, sched)
	p.startPass(ctx, sched, progress, state)
	steps := p.grow(ctx, sched, state, candidates, p.opts.Consolidation.MaxSimulations)
	sched.Revert()
	return p.bestThatFits(ctx, snap, steps, scope, nil)
}

// newPass is the state of a simulation pass on sched, whose snapshot has
// every node the pass may move pods onto.
func (p *Planner) newPass(ctx context.Context, sched *simulator.Scheduler) *pass {
	return &pass{
		sizes: map[string]int{}, pdbs: newPDBTracker(klog.FromContext(ctx), sched.Snapshot().PodDisruptionBudgets()),
		movedOnto: map[string][]simulator.Placement{}, scans: sched.NewScans(),
	}
}

// grow takes the candidates in order, within the budgets of their groups
// and at most simulations of them, and returns the steps of those that can
// go, each after those before. As a scale-down pass does (tryEach), once a
// candidate stayed it tries the next ones on the workers, up to the first
// that would go (tryAhead): the steps are those of one goroutine.
func (p *Planner) grow(ctx context.Context, sched *simulator.Scheduler, state *pass, candidates []*consolidationCandidate, simulations int) []step {
	logger := klog.FromContext(ctx)
	allowed := map[string]int{}
	budget := func(c *consolidationCandidate) int {
		left, seen := allowed[c.group.ID()]
		if !seen {
			left = c.allowed.nodes
		}
		return left
	}
	var steps []step
	var removed pricing.Price
	pods, ran := 0, 0
	pace := newPacer()
	// ahead are the candidates tried on the workers, by position: why
	// they stay, or nil for the first that would go.
	var ahead map[int]*Decision
	for i, c := range candidates {
		if ran == simulations {
			logger.V(4).Info("Consolidation reached its simulations for this pass", "simulations", ran)
			break
		}
		id := c.group.ID()
		left := budget(c)
		if left == 0 {
			continue
		}
		ran++
		kept, decided := ahead[i]
		if !decided && pace.ready() {
			// The next simulations while candidates stay: the budgets
			// stay as they are.
			var tries []int
			for j := i; j < len(candidates) && len(tries) <= simulations-ran; j++ {
				if budget(candidates[j]) > 0 {
					tries = append(tries, j)
				}
			}
			if p.parallel(len(tries), len(sched.Snapshot().NodeInfos())) {
				var stay int
				ahead, stay = p.tryAhead(sched, state, candidates, tries)
				pace.tried(stay)
				kept = ahead[i]
			}
		}
		empty := false
		if kept == nil {
			empty, kept = p.tryRemove(sched, c.candidate, state)
		}
		pace.record(kept != nil)
		if kept != nil {
			logger.V(5).Info("Consolidation cannot remove node", "node", klog.KObj(c.nodeInfo.Node()), "reason", kept.Reason, "message", kept.Message)
			continue
		}
		allowed[id] = left - 1
		removed += c.price
		pods += c.pods
		newNodes, newCost := state.newNodesUsed()
		steps = append(steps, step{
			removal: consolidationRemoval(c.candidate), empty: empty,
			removed: removed, pods: pods, newNodes: newNodes, newCost: newCost,
		})
	}
	return steps
}

// tryAhead tries the candidates at positions tries on the workers
// (tryOnBranches), from the state of sched and the pass, and returns by
// position why those before the first that would go stay, and nil for
// that one, and how many stay.
func (p *Planner) tryAhead(sched *simulator.Scheduler, state *pass, candidates []*consolidationCandidate, tries []int) (map[int]*Decision, int) {
	tried := make([]*candidate, len(tries))
	for k, j := range tries {
		tried[k] = candidates[j].candidate
	}
	outcomes := make([]outcome, len(tries))
	stay := p.tryOnBranches(sched, state, tried, outcomes)
	ahead := make(map[int]*Decision, stay+1)
	for k := range stay {
		ahead[tries[k]] = outcomes[k].kept
	}
	if stay < len(tries) {
		ahead[tries[stay]] = nil
	}
	return ahead, stay
}

// consolidationCandidates are the nodes consolidation may remove: ready
// nodes of a group whose pods have stayed the same for ConsolidateAfter,
// that pass the checks of scale-down but for the utilization threshold,
// that cost something, and on which no pod forbids disruption. They come
// by price per worth, the highest first. Those that a budget of 0 holds
// are left out, with why they stay.
func (p *Planner) consolidationCandidates(snap *snapshot.Snapshot, progress Progress, now time.Time) ([]*consolidationCandidate, map[string]Decision) {
	opts := p.opts.Consolidation
	var candidates []*consolidationCandidate
	held := map[string]Decision{}
	allowed := map[string]allowance{}
	for _, nodeInfo := range snap.NodeInfos() {
		if now.Before(p.stable.pods[nodeInfo.Name()].since.Add(opts.ConsolidateAfter)) {
			continue
		}
		c, kept := p.checkNode(nodeInfo, snap.NodeGroupOf(nodeInfo.Name()), progress.Deleting, now)
		if c == nil || !c.ready || kept != nil && kept.Reason != ReasonNotUnderutilized || forbidsDisruption(nodeInfo, now) {
			continue
		}
		price := opts.Prices.NodePrice(c.group.Options().Price, nodeInfo.Node()).PerHour
		if price <= 0 {
			// Nothing to save.
			continue
		}
		a, seen := allowed[c.group.ID()]
		if !seen {
			a = opts.allowed(c.group, now)
			allowed[c.group.ID()] = a
		}
		if a.nodes == 0 {
			held[nodeInfo.Name()] = Decision{Reason: ReasonConsolidationBudget, Message: "consolidation is held by the disruption budget " + a.budget}
			continue
		}
		var requested snapshot.Resources
		pods := 0
		for _, pod := range nodeInfo.Pods() {
			if roleOf(pod.Pod, p.opts.PriorityCutoff) == podMovable {
				requested.Add(pod.Requests)
				pods++
			}
		}
		gpu := gpuResource(requested)
		worth := pricing.Resources{MilliCPU: requested.MilliCPU, MemoryBytes: requested.Memory, GPUs: requested.Scalar[gpu]}.AtDefaultRates()
		candidates = append(candidates, &consolidationCandidate{candidate: c, price: price, pods: pods, perWorth: float64(price) / float64(max(worth, 1)), allowed: a})
	}
	slices.SortFunc(candidates, func(a, b *consolidationCandidate) int {
		return cmp.Or(cmp.Compare(b.perWorth, a.perWorth), cmp.Compare(b.price, a.price), cmp.Compare(a.nodeInfo.Name(), b.nodeInfo.Name()))
	})
	return candidates, held
}

// forbidsDisruption tells whether a pod on the node asks, with
// DoNotDisruptAnnotation, that its node not be disrupted.
func forbidsDisruption(nodeInfo *snapshot.NodeInfo, now time.Time) bool {
	for _, pod := range nodeInfo.Pods() {
		if pod.Pod.Annotations[DoNotDisruptAnnotation] == "true" && !gone(pod.Pod, now) {
			return true
		}
	}
	return false
}
