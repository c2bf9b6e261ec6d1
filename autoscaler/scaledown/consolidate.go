package scaledown

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
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
)

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
	// Prices price the nodes of the groups that have no price of their
	// own (pricing.Table.NodePrice).
	Prices pricing.Table
	// MaxSimulations bounds the removals one pass simulates, so that a
	// pass over a large cluster stays short.
	MaxSimulations int
}

// deletes tells whether consolidation removes nodes.
func (o ConsolidationOptions) deletes() bool { return o.Policy == ConsolidationDelete }

// allowed is how many nodes of group consolidation may disrupt at once:
// the group's own budget when it has one, else Budget.
func (o ConsolidationOptions) allowed(group nodegroups.NodeGroup) int {
	budget := o.Budget
	if own := group.Options().ConsolidationBudget; own != nil {
		budget = *own
	}
	// Both budgets were checked: their scaling cannot fail.
	allowed, _ := intstr.GetScaledValueFromIntOrPercent(&budget, group.TargetSize(), true)
	return max(allowed, 0)
}

func (o ConsolidationOptions) validate() error {
	switch o.Policy {
	case "", ConsolidationDisabled:
		return nil
	case ConsolidationDelete:
	default:
		return fmt.Errorf("consolidation policy must be %s or %s, got %q", ConsolidationDisabled, ConsolidationDelete, o.Policy)
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
	return nil
}

// Consolidation is what consolidation decided in a pass: the nodes it
// removes together (also in Plan.Empty or Plan.Drain) and what that saves.
type Consolidation struct {
	Removals []Removal
	// Savings are the prices of the nodes removed, per hour.
	Savings pricing.Price
}

// Message says what consolidation does, for events, logs and decisions.
func (c *Consolidation) Message() string {
	names := make([]string, 0, len(c.Removals))
	for _, removal := range c.Removals {
		names = append(names, removal.Node.Name)
	}
	return fmt.Sprintf("consolidation: removing nodes %s saves %s/h", strings.Join(names, ", "), c.Savings)
}

// stability remembers since when the cluster has had the nodes it has, and
// each node the pods it runs, by fingerprints of their names and UIDs.
type stability struct {
	seed  maphash.Seed
	nodes unchangedSince
	pods  map[string]unchangedSince
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
	// perWorth is the node's price over what its movable pods are worth at
	// the default rates: the nodes that cost most for what they run go
	// first.
	perWorth float64
}

// consolidate looks, once scale-down has chosen nothing in the pass and
// nothing is being removed, for nodes whose pods all fit on the nodes that
// remain, whatever their utilization, and adds them to plan. It grows the
// set greedily, the nodes that cost most for what they run first, each
// simulated as if those already in the set were gone, as scale-down
// simulates: the pods moved onto a node of the set move again, and a node
// whose pods then fit nowhere is left out for the next.
func (p *Planner) consolidate(ctx context.Context, snap *snapshot.Snapshot, progress Progress, plan *Plan, now time.Time) {
	if p.stable == nil {
		p.stable = &stability{seed: maphash.MakeSeed()}
	}
	p.stable.observe(snap, now)
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
	candidates := p.consolidationCandidates(snap, progress, now)
	if len(candidates) == 0 {
		return
	}

	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	defer sched.Revert()
	state := &pass{
		sizes: map[string]int{}, pdbs: newPDBTracker(logger, snap.PodDisruptionBudgets()),
		movedOnto: map[string][]simulator.Placement{}, scans: sched.NewScans(),
	}
	p.startPass(ctx, sched, progress, state)
	allowed := map[string]int{}
	decided := &Consolidation{}
	simulations := 0
	for _, c := range candidates {
		if simulations == opts.MaxSimulations {
			logger.V(4).Info("Consolidation reached its simulations for this pass", "simulations", simulations)
			break
		}
		id := c.group.ID()
		left, seen := allowed[id]
		if !seen {
			left = opts.allowed(c.group)
		}
		if left == 0 {
			continue
		}
		simulations++
		empty, kept := p.tryRemove(sched, c.candidate, state)
		if kept != nil {
			logger.V(5).Info("Consolidation cannot remove node", "node", klog.KObj(c.nodeInfo.Node()), "reason", kept.Reason, "message", kept.Message)
			continue
		}
		allowed[id] = left - 1
		removal := Removal{Node: c.nodeInfo.Node(), Group: c.group, ByConsolidation: true}
		if empty {
			plan.Empty = append(plan.Empty, removal)
		} else {
			plan.Drain = append(plan.Drain, removal)
		}
		delete(plan.Kept, removal.Node.Name)
		decided.Removals = append(decided.Removals, removal)
		decided.Savings += c.price
	}
	if len(decided.Removals) > 0 {
		plan.Consolidation = decided
		logger.V(2).Info("Consolidating", "nodes", len(decided.Removals), "savingsPerHour", decided.Savings.String(), "simulations", simulations)
	}
}

// consolidationCandidates are the nodes consolidation may remove: ready
// nodes of a group whose pods have stayed the same for ConsolidateAfter,
// that pass the checks of scale-down but for the utilization threshold,
// that cost something, and on which no pod forbids disruption. They come
// by price per worth, the highest first.
func (p *Planner) consolidationCandidates(snap *snapshot.Snapshot, progress Progress, now time.Time) []*consolidationCandidate {
	opts := p.opts.Consolidation
	var candidates []*consolidationCandidate
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
		var requested snapshot.Resources
		for _, pod := range nodeInfo.Pods() {
			if roleOf(pod.Pod, p.opts.PriorityCutoff) == podMovable {
				requested.Add(pod.Requests)
			}
		}
		gpu := gpuResource(requested)
		worth := pricing.Resources{MilliCPU: requested.MilliCPU, MemoryBytes: requested.Memory, GPUs: requested.Scalar[gpu]}.AtDefaultRates()
		candidates = append(candidates, &consolidationCandidate{candidate: c, price: price, perWorth: float64(price) / float64(max(worth, 1))})
	}
	slices.SortFunc(candidates, func(a, b *consolidationCandidate) int {
		return cmp.Or(cmp.Compare(b.perWorth, a.perWorth), cmp.Compare(b.price, a.price), cmp.Compare(a.nodeInfo.Name(), b.nodeInfo.Name()))
	})
	return candidates
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
