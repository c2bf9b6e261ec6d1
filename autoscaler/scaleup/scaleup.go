// Package scaleup decides which node groups to grow, and by how much, so
// that pending pods can schedule. It simulates on a snapshot and returns a
// Plan; the caller executes it with NodeGroup.IncreaseSize.
package scaleup

import (
	"context"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// ScaleUp plans scale-ups. Build it once per configuration with New.
type ScaleUp struct {
	opts          Options
	expanders     []expander
	ignoredLabels sets.Set[string]
	// price is the price expander of the chain, nil when it has none;
	// priceAt is its index in expanders.
	price   *priceExpander
	priceAt int
}

// New validates the options and returns a ScaleUp.
func New(opts Options) (*ScaleUp, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Rand == nil {
		seed := uint64(opts.Clock.Now().UnixNano())
		opts.Rand = rand.New(rand.NewPCG(seed, seed>>1))
	}
	priorities, err := compilePriorities(opts.Priorities)
	if err != nil {
		return nil, err
	}
	s := &ScaleUp{opts: opts, ignoredLabels: sets.New(alwaysIgnoredLabels...).Insert(opts.BalancingIgnoredLabels...)}
	for _, name := range opts.Expanders {
		e, err := newExpander(name, opts, priorities)
		if err != nil {
			return nil, err
		}
		s.expanders = append(s.expanders, e)
		if price, ok := e.(priceExpander); ok && s.price == nil {
			s.price, s.priceAt = &price, len(s.expanders)-1
		}
	}
	return s, nil
}

// State is what the rest of the engine knows about the node groups in
// this loop.
type State struct {
	// Upcoming is the number of nodes per group ID that are requested but
	// not registered yet. Nil means TargetSize minus the registered nodes.
	Upcoming map[string]int
	// Skip, when set, returns why a group must not grow now, such as
	// "in backoff", or "" when it may.
	Skip func(nodegroups.NodeGroup) string
	// Nominations are the places the last plan gave pending pods, in the
	// order it gave them (Plan.Nominations).
	Nominations []Nomination
	// ExpectedNodeNames are, per group ID, the names nodes on their way will
	// register under, when known (nodegroups.ExpectedNodeNames): the plan
	// gives those nodes these names, so that pods placed there can be
	// nominated to them before they register.
	ExpectedNodeNames map[string][]string
	// Pods, when set, are the pods to plan for, all of them, instead of the
	// candidates among the snapshot's pending pods: the pods of a request
	// that asks for nodes for all of them at once.
	Pods []*corev1.Pod
	// LastPlanned are when the last plans planned for the pods they left
	// others behind (Plan.LastPlanned).
	LastPlanned map[types.UID]time.Time
}

// Nomination is the node a plan gave a pending pod: one that exists or is
// on its way, by the name planning gives it. The next loop places the pod
// there first, so that pods planned for in one loop keep their place in
// the next, whatever order first-fit would try, and trigger no second
// scale-up: the way Karpenter nominates pods to the nodes it launched.
type Nomination struct {
	Pod  types.UID
	Node string
	// Group is the node group of Node. Once the nodes on their way
	// register, under other names, the pod goes to a node of the group.
	Group string
	// Nominated says that the plan nominated the pod to Node
	// (Plan.ToNominate): the next plans keep nominating it there while
	// they place it there, after the node has started too.
	Nominated bool
}

// Plan is a scale-up decision.
type Plan struct {
	// Increases are the node groups to grow, by ID.
	Increases []Increase
	// Helped are the pods the increases let schedule.
	Helped []*corev1.Pod
	// Absorbed are the candidates that fit on existing nodes or on nodes on
	// their way, and where: they need no scale-up.
	Absorbed []simulator.Placement
	// NoScaleUp are the candidates no node group can help, with why.
	NoScaleUp []NoScaleUp
	// Nominations are the places of the absorbed and helped candidates, in
	// the order they were given, for State.Nominations of the next loop.
	Nominations []Nomination
	// Rounds show how the helped candidates got their places, round by
	// round; Nominations holds the same places, after the absorbed ones.
	Rounds []Round
	// ToNominate are the absorbed candidates placed on nodes on their way
	// whose names are known: nodes that registered but have not started,
	// and nodes expected under their machines' names; and those the last
	// plan nominated to a node (State.Nominations) that it places there
	// still, now that the node has started. kube-scheduler places pods
	// its own way once such nodes start, unless told (the pods'
	// status.nominatedNodeName) where they were planned, and it clears a
	// nomination on each failed attempt: until the pod is bound, another
	// pod may take its room on its started node. Pods nominated
	// elsewhere, as by kube-scheduler for a preemption, are left out.
	ToNominate []simulator.Placement
	// TemplateErrors say, by group ID, why groups that needed a template
	// (simulator.SetTemplates) have none: they could not grow.
	TemplateErrors map[string]error
	// Deferred are the candidates left for a later loop because there were
	// more than Options.MaxPendingPodsPerLoop.
	Deferred []*corev1.Pod
	// LastPlanned are, when the plan deferred pods, when each pod still
	// pending was last planned for while others were deferred, for
	// State.LastPlanned of the next loop; nil when it deferred none.
	LastPlanned map[types.UID]time.Time
}

// Round is one round of a plan.
type Round struct {
	// Placed are the places the option the expanders chose gave pods on
	// its new nodes.
	Placed []Nomination
	// Reused are the places the pods still pending then found on the
	// nodes planned so far, by this round and those before.
	Reused []Nomination
}

// NewNodes counts the nodes the plan adds.
func (p *Plan) NewNodes() int {
	nodes := 0
	for _, increase := range p.Increases {
		nodes += increase.Delta
	}
	return nodes
}

// addRound adds a round that helped pods.
func (p *Plan) addRound(round Round, helped []*corev1.Pod) {
	p.Rounds = append(p.Rounds, round)
	p.Helped = append(p.Helped, helped...)
	p.Nominations = append(append(p.Nominations, round.Placed...), round.Reused...)
}

// Increase grows one node group.
type Increase struct {
	Group nodegroups.NodeGroup
	Delta int
}

// NoScaleUp is a pod no node group can help.
type NoScaleUp struct {
	Pod *corev1.Pod
	// Reasons say, per node group ID, why the group cannot help. Shared
	// between pods of the same group: do not modify.
	Reasons map[string][]string
}

// NotTriggerScaleUpPrefix starts every NoScaleUp.Message.
const NotTriggerScaleUpPrefix = "pod didn't trigger scale-up: "

// Message is the upstream NotTriggerScaleUp event message, counting node
// groups per reason: "pod didn't trigger scale-up: 2 Insufficient cpu, 1 max node group size reached".
func (n NoScaleUp) Message() string {
	counts := map[string]int{}
	for _, reasons := range n.Reasons {
		for _, reason := range reasons {
			counts[reason]++
		}
	}
	return NotTriggerScaleUpPrefix + simulator.SummarizeReasons(counts)
}

// Plan decides a scale-up for the pending pods of snap. snap is left as it
// was, except that the templates of its node groups are built when missing.
// When there are more candidates than Options.MaxPendingPodsPerLoop, the
// plan is for those within the bound (withinBudget) and defers the others.
func (s *ScaleUp) Plan(ctx context.Context, snap *snapshot.Snapshot, state State) *Plan {
	candidates, deferred := state.Pods, []*corev1.Pod(nil)
	if candidates == nil {
		candidates, deferred = s.withinBudget(Candidates(snap.PendingPods(), s.opts.PriorityCutoff, s.opts.NewPodScaleUpDelay, s.opts.Clock.Now()), state)
	}
	plan := s.planCandidates(ctx, snap, state, candidates)
	if len(deferred) > 0 {
		klog.FromContext(ctx).V(2).Info("Left pending pods for the next loop", "planned", len(candidates), "deferred", len(deferred),
			"maxPendingPodsPerLoop", s.opts.MaxPendingPodsPerLoop)
		plan.Deferred = deferred
		plan.LastPlanned = lastPlanned(candidates, deferred, state.LastPlanned, s.opts.Clock.Now())
	}
	return plan
}

// planCandidates plans for candidates, and plans again for the pods
// nominated to nodes on their way when that needs fewer new nodes.
func (s *ScaleUp) planCandidates(ctx context.Context, snap *snapshot.Snapshot, state State, candidates []*corev1.Pod) *Plan {
	plan := s.plan(ctx, snap, state, candidates)
	registered := nominatedToRegistered(snap, state.Nominations)
	if len(plan.Increases) == 0 || len(registered) == len(state.Nominations) {
		return plan
	}
	// Nodes on their way have no pod bound yet, so their plan may change:
	// the pods nominated to them, planned again with the pods that came
	// since, may need fewer new nodes, as when pods that keep apart arrive
	// after pods that fill the planned nodes two by two.
	again := state
	again.Nominations = registered
	replanned := s.plan(ctx, snap, again, candidates)
	if replanned.NewNodes() >= plan.NewNodes() {
		return plan
	}
	klog.FromContext(ctx).V(2).Info("Planned the pods nominated to nodes on their way again, with the pods that came since",
		"nodes", replanned.NewNodes(), "insteadOf", plan.NewNodes())
	return replanned
}

// nominatedToRegistered are the nominations to nodes that registered.
func nominatedToRegistered(snap *snapshot.Snapshot, nominations []Nomination) []Nomination {
	return slices.DeleteFunc(slices.Clone(nominations), func(n Nomination) bool { return snap.NodeInfo(n.Node) == nil })
}

// maxPodsForOtherPlans is the most candidates for which a plan with
// prices is also planned the other ways (otherPlannings), and each plan
// improved by moving pods between its new nodes (improvePlan): their
// rounds, one a node or so when densest, and their moves cost more the
// more pods there are.
const maxPodsForOtherPlans = 100

// planning is a way to plan round by round.
type planning struct {
	// densestRounds are how many rounds, the first, keep only the first
	// nodes of an option that cost least for what their pods are worth
	// (keepDensest), instead of the option the expanders choose with its
	// last node sized; the rounds after choose so for the pods left.
	densestRounds int
	// largestFirst binpacks the largest pods first, those with required
	// anti-affinity among them rather than before them: small pods that
	// keep apart then fill the room large pods leave, instead of taking
	// the room of a node of their own that a larger pod could have used.
	largestFirst bool
}

// allRounds are as many rounds as a plan has.
const allRounds = math.MaxInt

// otherPlannings are the ways plan also plans, with prices and few pods.
// The first round alone densest and the rest as the expanders choose
// buys the densest nodes without the nodes of its last rounds, which run
// a pod or two each; more rounds densest found no cheaper plan on the
// mixes of make optimum that consolidation did not then leave dearer.
var otherPlannings = []planning{
	{densestRounds: allRounds}, {largestFirst: true}, {densestRounds: allRounds, largestFirst: true}, {densestRounds: 1},
}

// plan plans for the candidates round by round, each round's option for
// all the pods it helps. With prices and few candidates, it also plans
// the other ways and keeps the plan that helps as many pods for least,
// the first on a tie: an option for all the pods a group takes is priced
// by its last nodes too, which often run a pod or two that keep apart, so
// a group whose nodes are the cheapest for most of the pods may lose to
// one that is dearer for all of them (nine 8-cpu nodes, where two 16-cpu
// nodes run most pods for less), and first fit in one order may leave
// room that another order fills.
func (s *ScaleUp) plan(ctx context.Context, snap *snapshot.Snapshot, state State, candidates []*corev1.Pod) *Plan {
	plan := s.planRounds(ctx, snap, state, candidates, planning{}, math.MaxInt64)
	if s.price == nil || len(candidates) > maxPodsForOtherPlans || plan.NewNodes() < 2 {
		return plan
	}
	quiet := klog.NewContext(ctx, logr.Discard())
	cost := s.planCost(snap, plan)
	best, bestCost := plan, cost
	var bestPlanning planning
	for _, way := range otherPlannings {
		other := s.planRounds(quiet, snap, state, candidates, way, bestCost)
		if otherCost := s.planCost(snap, other); len(other.Helped) >= len(plan.Helped) && otherCost < bestCost {
			best, bestCost, bestPlanning = other, otherCost, way
		}
	}
	if best != plan {
		klog.FromContext(ctx).V(2).Info("Planned scale-up another way, for less", "densestRounds", bestPlanning.densestRounds, "largestFirst", bestPlanning.largestFirst,
			"increases", increasesOf(best.Increases), "cost", bestCost, "insteadOf", cost, "insteadOfIncreases", increasesOf(plan.Increases))
	}
	return best
}

// planCost is what the plan's new nodes cost per hour.
func (s *ScaleUp) planCost(snap *snapshot.Snapshot, plan *Plan) pricing.Price {
	var cost pricing.Price
	for _, increase := range plan.Increases {
		template := snap.Template(increase.Group.ID())
		cost += pricing.Price(increase.Delta) * s.price.prices.NodePrice(increase.Group.Options().Price, template.Node()).PerHour
	}
	return cost
}

// increasesOf describes increases for the logs, e.g. "md-0+2,md-1+1".
func increasesOf(increases []Increase) string {
	parts := make([]string, 0, len(increases))
	for _, increase := range increases {
		parts = append(parts, fmt.Sprintf("%s+%d", increase.Group.ID(), increase.Delta))
	}
	return strings.Join(parts, ",")
}

// planRounds plans round by round, the way way says; improvePlan repacks
// the plan when it costs less than repackBelow.
func (s *ScaleUp) planRounds(ctx context.Context, snap *snapshot.Snapshot, state State, candidates []*corev1.Pod, way planning,
	repackBelow pricing.Price) *Plan {
	logger := klog.FromContext(ctx)
	plan := &Plan{}
	if len(candidates) == 0 {
		return plan
	}
	plan.TemplateErrors = simulator.SetTemplates(ctx, snap, s.opts.NodeRules)

	snap.Fork()
	defer snap.Revert()
	sched := simulator.NewScheduler(ctx, snap)
	upcoming := state.Upcoming
	if upcoming == nil {
		upcoming = UpcomingNodes(snap)
	}
	onTheirWay := s.addUpcomingNodes(sched, snap, upcoming, state.ExpectedNodeNames)

	// Pods that fit where they are or on nodes on their way wait for them:
	// first where the last plan put them, then wherever they fit. The pod
	// groups stay in placement order from here on: remaining keeps it.
	allGroups := placementOrder(simulator.GroupPods(candidates))
	podGroups := allGroups
	plan.Absorbed = placeNominated(sched, podGroups, state.Nominations, onTheirWay.unregistered)
	podGroups = remaining(podGroups, placedPods(plan.Absorbed))
	absorbed, podGroups := placeFirstFit(sched, podGroups, simulator.ScheduleOptions{})
	plan.Absorbed = append(plan.Absorbed, absorbed...)
	plan.ToNominate = onTheirWay.toNominate(plan.Absorbed, state.Nominations)
	plan.Nominations = nominations(snap, plan.Absorbed, onTheirWay.groups, plan.ToNominate)
	if len(podGroups) == 0 {
		return plan
	}
	if way.largestFirst {
		podGroups = largestFirst(podGroups)
	}

	skipReasons := map[string]string{}
	var growable []*candidate
	for _, group := range snap.NodeGroups() {
		c, reason := s.candidate(sched, group, state, upcoming, plan.TemplateErrors)
		if reason != "" {
			skipReasons[group.ID()] = reason
			continue
		}
		growable = append(growable, c)
	}
	slices.SortFunc(growable, func(a, b *candidate) int { return strings.Compare(a.group.ID(), b.group.ID()) })
	linkSimilar(growable, s.ignoredLabels)

	// Round by round, the expanders choose an option for the pods still
	// pending and its nodes stay for the next round, until no option helps:
	// pods that need different node shapes get all their nodes in one loop.
	// planned are the nodes of the rounds so far, by name, with their
	// groups; the rounds add them after the nodes there are now.
	planned := map[string]string{}
	onPlanned := simulator.ScheduleOptions{FromNode: len(snap.NodeInfos())}
	for {
		r := s.round(sched, growable, podGroups, skipReasons, len(planned))
		if r.chosen == nil {
			plan.NoScaleUp = noScaleUp(podGroups, r.estimates, r.groupReasons)
			break
		}
		// The chosen option, or the nodes but the last of an option and a
		// cheaper option for the pods of the last: each is kept.
		var chosen []*estimate
		if len(plan.Rounds) < way.densestRounds {
			chosen = []*estimate{s.keepDensest(sched, r, growable)}
		} else {
			chosen = s.sizeCheapest(ctx, sched, r, growable, skipReasons, len(planned))
		}
		if chosen == nil {
			keep(sched, r.chosen)
			countPlanned(growable, r.chosen.increases, 1)
			chosen = []*estimate{r.chosen}
		}
		for _, option := range chosen {
			plan.Increases = addIncreases(plan.Increases, option.increases)
			for _, nomination := range option.nominations {
				planned[nomination.Node] = nomination.Group
			}
			podGroups = remaining(podGroups, option.pods)
		}
		// The pods still pending go to the nodes planned so far, as they
		// went to the nodes on their way, before the next round buys nodes
		// for them: a node planned with room left may take them now, such
		// as when a spread kept them off it until other domains had pods.
		var reused []simulator.Placement
		reused, podGroups = placeFirstFit(sched, podGroups, onPlanned)
		for i, option := range chosen {
			r := Round{Placed: option.nominations}
			helped := option.pods
			if i == len(chosen)-1 {
				r.Reused = nominations(snap, reused, planned, nil)
				helped = slices.Concat(helped, placedPods(reused))
			}
			plan.addRound(r, helped)
			logger.V(2).Info("Planned scale-up", "round", len(plan.Rounds), "nodeGroup", option.group.ID(), "nodes", option.nodes,
				"pods", len(option.pods), "podsOnPlannedNodes", len(r.Reused), "increases", len(option.increases))
		}
		if len(podGroups) == 0 {
			break
		}
	}
	// Only with price first in the chain: the expanders ahead of it
	// choose by what the moves do not weigh.
	if s.price != nil && s.priceAt == 0 && len(candidates) <= maxPodsForOtherPlans && len(planned) > 0 {
		s.improvePlan(ctx, sched, plan, growable, allGroups, planned, repackBelow)
	}
	return plan
}

// countPlanned adds sign times the increases to the nodes the rounds plan
// for each group.
func countPlanned(growable []*candidate, increases []Increase, sign int) {
	for _, increase := range increases {
		c := growable[slices.IndexFunc(growable, func(c *candidate) bool { return c.group == increase.Group })]
		c.planned += sign * increase.Delta
	}
}

// sizeCheapest sizes the last new node of an option to its pods, as
// Karpenter launches each NodeClaim as the cheapest type its pods fit: a
// round buys nodes of one group for as many pods as they take, so its
// last node often runs a few pods that a smaller, cheaper node of another
// group would run, and an option of large nodes whose last node is sized
// may cost less than the option chosen (three 16-cpu nodes, where one
// 32-cpu node and one 16-cpu node cost less). It sizes the chosen option
// and each other option the expanders ahead of price kept that could
// cost less for what its pods are worth, and keeps the sized option of
// the lowest price score, with nothing changed on a tie. It returns the
// two options, kept and counted as planned, or nil when the chosen option
// stays. Only prices tell what is cheaper: without the price expander in
// the chain, the chosen option always stays, and the other expanders,
// ahead of price, still choose the option for the pods left.
func (s *ScaleUp) sizeCheapest(ctx context.Context, sched *simulator.Scheduler, r roundResult, growable []*candidate,
	skipReasons map[string]string, planned int) []*estimate {
	price := s.price
	if price == nil {
		return nil
	}
	score := func(cost pricing.Price, option *estimate) float64 {
		return float64(cost) / float64(podWorth(option.requested))
	}
	if podWorth(r.chosen.requested) == 0 {
		return nil
	}
	var best *estimate
	bestScore := score(price.cost(r.chosen), r.chosen)
	options := []*estimate{r.chosen}
	for _, option := range s.aheadOfPrice(r.estimates) {
		if option != r.chosen && option.nodes > 0 && podWorth(option.requested) > 0 {
			options = append(options, option)
		}
	}
	for _, option := range options {
		// Sizing saves at most the option's last node.
		if option.nodes < 2 || score(price.cost(option)*pricing.Price(option.nodes-1)/pricing.Price(option.nodes), option) >= bestScore {
			continue
		}
		if cost, sized := s.sizeLastNode(ctx, sched, option, growable, skipReasons, planned, false); sized != nil && score(cost, option) < bestScore {
			best, bestScore = option, score(cost, option)
		}
	}
	if best == nil {
		return nil
	}
	_, sized := s.sizeLastNode(ctx, sched, best, growable, skipReasons, planned, true)
	return sized
}

// keepDensest keeps, of the options the expanders ahead of price keep,
// the first nodes that cost least for what the pods binpacking put on
// them are worth, the option of the first group by ID on a tie, and
// returns them as an option, kept and counted as planned.
func (s *ScaleUp) keepDensest(sched *simulator.Scheduler, r roundResult, growable []*candidate) *estimate {
	best, bestNodes, bestScore := r.chosen, r.chosen.nodes, math.Inf(1)
	for _, option := range s.aheadOfPrice(r.estimates) {
		if nodes, score := s.densestNodes(option); score < bestScore {
			best, bestNodes, bestScore = option, nodes, score
		}
	}
	if bestNodes < best.nodes {
		opts := best.opts
		opts.maxNodes = bestNodes
		trimmed := binpack(sched, opts)
		trimmed.group, trimmed.template = best.group, best.template
		best = trimmed
	}
	keep(sched, best)
	countPlanned(growable, best.increases, 1)
	return best
}

// densestNodes returns how many of the option's first nodes cost least
// for what their pods are worth, the most nodes on a tie, and that cost
// per worth; +Inf when its pods are worth nothing.
func (s *ScaleUp) densestNodes(option *estimate) (int, float64) {
	prices := map[string]pricing.Price{}
	for _, member := range option.opts.members {
		prices[member.group.ID()] = s.price.prices.NodePrice(member.group.Options().Price, member.template.Node()).PerHour
	}
	requests := map[types.UID]snapshot.Resources{}
	for _, podGroup := range option.opts.podGroups {
		for _, pod := range podGroup.Pods {
			requests[pod.UID] = podGroup.Requests()
		}
	}
	// The nodes in the order binpacking added them, each with its first pod.
	index := map[string]int{}
	var costs, worths []pricing.Price
	for _, nomination := range option.nominations {
		i, ok := index[nomination.Node]
		if !ok {
			i = len(costs)
			index[nomination.Node] = i
			costs, worths = append(costs, prices[nomination.Group]), append(worths, 0)
		}
		worths[i] += podWorth(requests[nomination.Pod])
	}
	bestNodes, bestScore := 0, math.Inf(1)
	var cost, worth pricing.Price
	for i := range costs {
		cost, worth = cost+costs[i], worth+worths[i]
		if worth == 0 {
			continue
		}
		if score := float64(cost) / float64(worth); score <= bestScore {
			bestNodes, bestScore = i+1, score
		}
	}
	return bestNodes, bestScore
}

// aheadOfPrice are the options the expanders ahead of price in the chain
// keep.
func (s *ScaleUp) aheadOfPrice(options []*estimate) []*estimate {
	options = slices.DeleteFunc(slices.Clone(options), func(est *estimate) bool { return est.nodes == 0 })
	for _, e := range s.expanders[:s.priceAt] {
		if len(options) <= 1 {
			break
		}
		options = e.best(options)
	}
	return options
}

// sizeLastNode binpacks the option's pods on its nodes but the last, lets
// the expanders choose, in a round of their own, an option for the pods
// left over, and, when that option helps them all and the two cost less
// than the option, returns what they cost and the two options; nil
// otherwise. With keep, the two options are kept and counted as planned;
// without, nothing is changed.
func (s *ScaleUp) sizeLastNode(ctx context.Context, sched *simulator.Scheduler, option *estimate, growable []*candidate,
	skipReasons map[string]string, planned int, keepSized bool) (pricing.Price, []*estimate) {
	price := s.price
	opts := option.opts
	opts.maxNodes = option.nodes - 1
	sched.Fork()
	trimmed := binpackOn(sched, opts)
	helped := sets.New(option.pods...)
	if trimmed.nodes == 0 || !helped.HasAll(trimmed.pods...) {
		sched.Revert()
		return 0, nil
	}
	left := only(remaining(option.opts.podGroups, trimmed.pods), helped)
	if slices.ContainsFunc(left, spreads) {
		sched.Revert()
		return 0, nil
	}
	// The round probes the groups for the pods left: keeping an option
	// again needs their probes for all the pods.
	probes := make([]map[*simulator.PodGroup]probeResult, len(growable))
	for j, c := range growable {
		probes[j] = c.probe
	}
	undo := func() {
		countPlanned(growable, trimmed.increases, -1)
		for j, c := range growable {
			c.probe = probes[j]
		}
		sched.Revert()
	}
	countPlanned(growable, trimmed.increases, 1)
	r := s.round(sched, growable, left, skipReasons, planned+trimmed.nodes)
	cost := price.cost(trimmed)
	if r.chosen != nil {
		cost += price.cost(r.chosen)
	}
	if r.chosen == nil || len(r.chosen.pods) != podsOf(left) || cost >= price.cost(option) {
		undo()
		return 0, nil
	}
	if !keepSized {
		undo()
		return cost, []*estimate{trimmed, r.chosen}
	}
	keep(sched, r.chosen)
	countPlanned(growable, r.chosen.increases, 1)
	sched.Commit()
	klog.FromContext(ctx).V(4).Info("Sized the last node of a scale-up option to its pods", "nodeGroup", option.group.ID(),
		"nodes", option.nodes, "lastNodePods", podsOf(left), "lastNodeGroup", r.chosen.group.ID(), "saving", price.cost(option)-cost)
	return cost, []*estimate{trimmed, r.chosen}
}

// spreads tells whether the pods of podGroup spread over topology
// domains: on a node of another group, in another zone, they change
// where the rest of their spread may go, which the cost of the round's
// pods alone does not tell.
func spreads(podGroup *simulator.PodGroup) bool {
	return len(podGroup.Pods[0].Spec.TopologySpreadConstraints) > 0
}

// only returns the pod groups with only the pods of keep.
func only(podGroups []*simulator.PodGroup, keep sets.Set[*corev1.Pod]) []*simulator.PodGroup {
	var result []*simulator.PodGroup
	for _, podGroup := range podGroups {
		pods := slices.DeleteFunc(slices.Clone(podGroup.Pods), func(pod *corev1.Pod) bool { return !keep.Has(pod) })
		if len(pods) == len(podGroup.Pods) {
			result = append(result, podGroup)
		} else if len(pods) > 0 {
			result = append(result, podGroup.Subset(pods))
		}
	}
	return result
}

// roundResult is one round of planning: the options for the pods still
// pending, and the one the expanders chose, if any helps.
type roundResult struct {
	estimates []*estimate
	chosen    *estimate
	// groupReasons say why groups had no option in this round.
	groupReasons map[string]string
}

// round estimates, for every candidate that may still grow, what its new
// nodes would do for podGroups, and lets the expanders choose. planned is
// how many nodes earlier rounds added.
func (s *ScaleUp) round(sched *simulator.Scheduler, growable []*candidate, podGroups []*simulator.PodGroup,
	skipReasons map[string]string, planned int) roundResult {
	// Shared by the estimates of every node group, each in its own fork.
	sched.Prepare(podGroups...)
	r := roundResult{groupReasons: maps.Clone(skipReasons)}
	var candidates []*candidate
	for _, c := range growable {
		if c.room() <= 0 {
			r.groupReasons[c.group.ID()] = ReasonMaxGroupSize
			continue
		}
		candidates = append(candidates, c)
	}
	workers := s.workers(sched, len(candidates), podGroups)
	// Every probe before any binpacking: binpacking reads the probes of
	// the similar groups too.
	forEach(workers, len(candidates), func(sched *simulator.Scheduler, i int) {
		probeCandidate(sched, candidates[i], podGroups)
	})
	totals := totalsOf(sched.Snapshot().NodeInfos())
	classes := simulator.FitClasses(podGroups)
	// The estimate of each candidate, by the binpacking it takes: balanced,
	// the nodes do not depend on which member leads, and the candidates
	// with the same members share the first one's.
	var binpacks []binpackOptions
	binpackOf := make([]int, len(candidates))
	balanced := map[string]int{}
	for i, c := range candidates {
		binpackOf[i] = -1
		maxNodes, capReason := s.nodesAllowed(totals, c.template, planned)
		if maxNodes <= 0 {
			r.groupReasons[c.group.ID()] = capReason
			continue
		}
		members := c.members()
		key := membersKey(members)
		if j, ok := balanced[key]; ok {
			binpackOf[i] = j
			continue
		}
		binpackOf[i] = len(binpacks)
		if s.opts.BalanceSimilarNodeGroups {
			balanced[key] = binpackOf[i]
		}
		binpacks = append(binpacks, binpackOptions{
			members: members, balance: s.opts.BalanceSimilarNodeGroups,
			podGroups: podGroups, maxNodes: maxNodes, capReason: capReason, classes: classes,
		})
	}
	estimates := make([]*estimate, len(binpacks))
	forEach(workers, len(binpacks), func(sched *simulator.Scheduler, j int) {
		estimates[j] = binpack(sched, binpacks[j])
	})
	for i, c := range candidates {
		if binpackOf[i] < 0 {
			continue
		}
		// The same nodes, as the option of this group.
		named := *estimates[binpackOf[i]]
		named.group, named.template = c.group, c.template
		r.estimates = append(r.estimates, &named)
	}
	options := slices.DeleteFunc(slices.Clone(r.estimates), func(est *estimate) bool { return est.nodes == 0 })
	if len(options) > 0 {
		r.chosen = s.choose(options)
	}
	return r
}

// keep places the chosen option's pods on its new nodes for good, for the
// rounds that follow: binpacking the same pods on the same members again
// gives the same nodes.
func keep(sched *simulator.Scheduler, chosen *estimate) {
	sched.Fork()
	binpackOn(sched, chosen.opts)
	sched.Commit()
}

// addIncreases adds more to increases, keeping one increase per group, in
// the order of group IDs.
func addIncreases(increases, more []Increase) []Increase {
	for _, increase := range more {
		if i := slices.IndexFunc(increases, func(known Increase) bool { return known.Group == increase.Group }); i >= 0 {
			increases[i].Delta += increase.Delta
			continue
		}
		increases = append(increases, increase)
	}
	slices.SortFunc(increases, func(a, b Increase) int { return strings.Compare(a.Group.ID(), b.Group.ID()) })
	return increases
}

// candidate returns the group with its template and room to grow, or says
// why it cannot grow at all.
func (s *ScaleUp) candidate(sched *simulator.Scheduler, group nodegroups.NodeGroup, state State, upcoming map[string]int,
	templateErrors map[string]error) (*candidate, string) {
	if state.Skip != nil {
		if reason := state.Skip(group); reason != "" {
			return nil, reason
		}
	}
	template := sched.Snapshot().Template(group.ID())
	if template == nil {
		if err := templateErrors[group.ID()]; err != nil {
			return nil, fmt.Sprintf("%s: %v", ReasonNoTemplate, err)
		}
		return nil, ReasonNoTemplate
	}
	c := &candidate{group: group, template: template, upcoming: upcoming[group.ID()]}
	if c.room() <= 0 {
		return nil, ReasonMaxGroupSize
	}
	return c, ""
}

// nodesAllowed is the most nodes like template one round of a scale-up may
// add, after the planned nodes of earlier rounds, and the limit that binds:
// the cluster-wide limits and MaxNodesPerScaleUp.
func (s *ScaleUp) nodesAllowed(totals clusterTotals, template *snapshot.NodeInfo, planned int) (int, string) {
	allowed, reason := s.opts.Limits.nodesAllowed(totals, template)
	if s.opts.MaxNodesPerScaleUp > 0 && s.opts.MaxNodesPerScaleUp-planned < allowed {
		allowed, reason = max(s.opts.MaxNodesPerScaleUp-planned, 0), ReasonMaxNodesPerScaleUp
	}
	return allowed, reason
}

func (s *ScaleUp) choose(options []*estimate) *estimate {
	for _, e := range s.expanders {
		if len(options) == 1 {
			break
		}
		options = e.best(options)
	}
	return options[0]
}

// UpcomingNodes counts per group the nodes asked for but not registered:
// target size minus the group's nodes in the snapshot.
func UpcomingNodes(snap *snapshot.Snapshot) map[string]int {
	upcoming := map[string]int{}
	for _, group := range snap.NodeGroups() {
		if n := group.TargetSize() - len(snap.RegisteredNodes(group.ID())); n > 0 {
			upcoming[group.ID()] = n
		}
	}
	return upcoming
}

// nodesOnTheirWay are the nodes a plan adds for the nodes on their way.
type nodesOnTheirWay struct {
	// named are those whose names are known: nodes that registered but
	// have not started, and nodes expected under their machines' names.
	named sets.Set[string]
	// unregistered are, per group ID, the names of those that are not
	// among the group's registered nodes, in the order they were added.
	unregistered map[string][]string
	// groups are the group IDs of those that are not among their group's
	// registered nodes, by name.
	groups map[string]string
}

// toNominate are the placements of pods that no other node was nominated
// for, on nodes whose names are known, or on the node the last plan
// nominated them to (lastPlan), which may have started since: their
// nominations stand until they are bound. A pod that merely fits on a
// node that has started is left to kube-scheduler.
func (n nodesOnTheirWay) toNominate(placements []simulator.Placement, lastPlan []Nomination) []simulator.Placement {
	nominated := map[types.UID]string{}
	for _, nomination := range lastPlan {
		if nomination.Nominated {
			nominated[nomination.Pod] = nomination.Node
		}
	}
	var result []simulator.Placement
	for _, placement := range placements {
		current := placement.Pod.Status.NominatedNodeName
		kept := nominated[placement.Pod.UID] == placement.NodeName
		if (n.named.Has(placement.NodeName) || kept) && (current == "" || current == placement.NodeName || n.named.Has(current)) {
			result = append(result, placement)
		}
	}
	return result
}

// addUpcomingNodes adds the upcoming nodes of each group: those that
// registered but have not started, as they will be once started, with the
// pods that will run there (kube-scheduler keeps the pods waiting for them
// off until they start); then, for those that have not registered, copies
// of the group's template, under the names in expected first, or the node
// registered under such a name that no group holds yet, as it will be once
// started.
func (s *ScaleUp) addUpcomingNodes(sched *simulator.Scheduler, snap *snapshot.Snapshot, upcoming map[string]int, expected map[string][]string) nodesOnTheirWay {
	added := nodesOnTheirWay{named: sets.New[string](), unregistered: map[string][]string{}, groups: map[string]string{}}
	now := s.opts.Clock.Now()
	for _, group := range snap.NodeGroups() {
		left := upcoming[group.ID()]
		template := snap.Template(group.ID())
		for _, name := range snap.RegisteredNodes(group.ID()) {
			if left == 0 || !s.notStarted(snap.NodeInfo(name), now) {
				continue
			}
			s.addStarted(sched, snap.NodeInfo(name), template)
			added.named.Insert(name)
			left--
		}
		if template == nil {
			continue
		}
		names := expected[group.ID()]
		for i := range left {
			name := upcomingNodeName(template, i)
			if i < len(names) {
				name = names[i]
				// The node registered before its instance knew it (as
				// before Cluster API links a Machine to its Node): a node
				// of the group on its way all the same, whose pods
				// kube-scheduler is told of.
				if info := snap.NodeInfo(name); info != nil && snap.NodeGroupOf(name) == nil && s.notStarted(info, now) {
					s.addStarted(sched, info, template)
					added.named.Insert(name)
					added.unregistered[group.ID()] = append(added.unregistered[group.ID()], name)
					added.groups[name] = group.ID()
					continue
				}
			}
			if sched.AddNode(template.CopyAs(name)) != nil {
				// A node of that name exists already: the name says
				// nothing about this one.
				name = upcomingNodeName(template, i)
				_ = sched.AddNode(template.CopyAs(name))
			} else if i < len(names) {
				added.named.Insert(name)
			}
			added.unregistered[group.ID()] = append(added.unregistered[group.ID()], name)
			added.groups[name] = group.ID()
		}
	}
	return added
}

// notStarted says whether the registered node of info is on its way.
func (s *ScaleUp) notStarted(info *snapshot.NodeInfo, now time.Time) bool {
	return s.opts.NodeRules.Readiness(info.Node(), now) == nodefacts.NotStarted
}

// addStarted replaces the registered node of info, which has not started,
// with the node it will be once started, with the pods that will run
// there.
func (s *ScaleUp) addStarted(sched *simulator.Scheduler, info *snapshot.NodeInfo, template *snapshot.NodeInfo) {
	// Its DRA devices are those it publishes, or, before its drivers
	// publish them, its template's.
	resourceSlices := info.ResourceSlices()
	if len(resourceSlices) == 0 && template != nil {
		resourceSlices = template.ResourceSlices()
	}
	started := snapshot.NewNodeInfo(s.opts.NodeRules.Started(info.Node()), info.Pods()...).
		WithAttachLimits(info.AttachLimits()).WithResourceSlices(resourceSlices)
	// The node was in the snapshot, so it succeeds.
	_ = sched.ReplaceNode(started)
}

// upcomingNodeName names the i-th node on its way of a group. A plan names
// its new nodes the same way, after those already on their way, so that
// they have the same names in the next loop.
func upcomingNodeName(template *snapshot.NodeInfo, i int) string {
	return fmt.Sprintf("%s-upcoming-%d", template.Name(), i)
}

// placeNominated places the candidates that the last plan gave a node on
// that node, in the same order, as long as it takes them; then those whose
// node registered under its own name meanwhile, on the first node of its
// group that takes them. unregistered are the names of the nodes on their way
// that have not registered, per group ID.
func placeNominated(sched *simulator.Scheduler, podGroups []*simulator.PodGroup, nominated []Nomination, unregistered map[string][]string) []simulator.Placement {
	if len(nominated) == 0 {
		return nil
	}
	type member struct {
		group *simulator.PodGroup
		pod   *corev1.Pod
	}
	byUID := map[types.UID]member{}
	for _, podGroup := range podGroups {
		for _, pod := range podGroup.Pods {
			byUID[pod.UID] = member{group: podGroup, pod: pod}
		}
	}
	snap := sched.Snapshot()
	groupNodes := map[string][]string{}
	nodesOf := func(groupID string) []string {
		nodes, ok := groupNodes[groupID]
		if !ok {
			nodes = slices.Concat(snap.RegisteredNodes(groupID), unregistered[groupID])
			groupNodes[groupID] = nodes
		}
		return nodes
	}
	var placed []simulator.Placement
	place := func(m member, nodes []string) {
		for _, node := range nodes {
			if sched.PlaceOn(m.group, m.pod, node) == nil {
				placed = append(placed, simulator.Placement{Pod: m.pod, NodeName: node})
				return
			}
		}
	}
	// The pods whose node is still there first, so that a pod whose node
	// is gone does not take the room planned there for another.
	var nodeGone []Nomination
	for _, nomination := range nominated {
		m, ok := byUID[nomination.Pod]
		if !ok {
			continue
		}
		if snap.NodeInfo(nomination.Node) == nil {
			nodeGone = append(nodeGone, nomination)
			continue
		}
		place(m, []string{nomination.Node})
	}
	for _, nomination := range nodeGone {
		place(byUID[nomination.Pod], nodesOf(nomination.Group))
	}
	return placed
}

// placeFirstFit places the pod groups, in order, each pod on the first
// node that opts allow and it fits, trying again the pods that depend on
// other pods as long as that places more, as kube-scheduler's queue would.
// It returns where the pods went and the pod groups left.
func placeFirstFit(sched *simulator.Scheduler, podGroups []*simulator.PodGroup, opts simulator.ScheduleOptions) ([]simulator.Placement, []*simulator.PodGroup) {
	placed := sched.ScheduleGroups(podGroups, opts).Scheduled
	return placed, remaining(podGroups, placedPods(placed))
}

// nominations are the placements with the groups of their nodes: unregistered
// maps the names of the nodes on their way, or planned, to their groups.
// Those of toNominate are Nominated.
func nominations(snap *snapshot.Snapshot, placements []simulator.Placement, unregistered map[string]string, toNominate []simulator.Placement) []Nomination {
	nominated := sets.New[types.UID]()
	for _, placement := range toNominate {
		nominated.Insert(placement.Pod.UID)
	}
	result := make([]Nomination, 0, len(placements))
	for _, placement := range placements {
		nomination := Nomination{Pod: placement.Pod.UID, Node: placement.NodeName, Group: unregistered[placement.NodeName],
			Nominated: nominated.Has(placement.Pod.UID)}
		if group := snap.NodeGroupOf(placement.NodeName); group != nil {
			nomination.Group = group.ID()
		}
		result = append(result, nomination)
	}
	return result
}

// placedPods are the pods of placements.
func placedPods(placements []simulator.Placement) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, len(placements))
	for _, placement := range placements {
		pods = append(pods, placement.Pod)
	}
	return pods
}

// remaining returns the pod groups without the pods placed.
func remaining(podGroups []*simulator.PodGroup, placed []*corev1.Pod) []*simulator.PodGroup {
	if len(placed) == 0 {
		return podGroups
	}
	done := sets.New(placed...)
	var result []*simulator.PodGroup
	for _, podGroup := range podGroups {
		pods := slices.DeleteFunc(slices.Clone(podGroup.Pods), done.Has)
		if len(pods) == len(podGroup.Pods) {
			result = append(result, podGroup)
		} else if len(pods) > 0 {
			result = append(result, podGroup.Subset(pods))
		}
	}
	return result
}

// noScaleUp lists the pods of a round that no option helped, with each
// group's reason.
func noScaleUp(podGroups []*simulator.PodGroup, estimates []*estimate, groupReasons map[string]string) []NoScaleUp {
	var result []NoScaleUp
	for _, podGroup := range podGroups {
		var reasons map[string][]string
		for _, pod := range podGroup.Pods {
			if reasons == nil {
				reasons = make(map[string][]string, len(groupReasons)+len(estimates))
				for id, reason := range groupReasons {
					reasons[id] = []string{reason}
				}
				for _, est := range estimates {
					if why := est.reasons[podGroup]; len(why) > 0 {
						reasons[est.group.ID()] = why
					}
				}
			}
			result = append(result, NoScaleUp{Pod: pod, Reasons: reasons})
		}
	}
	return result
}
