// Package scaledown decides which nodes to remove (Planner, pure: it only
// simulates on a snapshot) and removes them safely (Actuator: taint, evict
// through the Eviction API, delete through the node group).
//
// A loop calls, in order:
//
//	actuator.Continue(ctx, view)   // drive removals, release leftovers
//	plan := planner.Plan(ctx, snap, opts, actuator.Progress())
//	actuator.Start(ctx, plan)
//
// and planner.RecordScaleUp after every scale-up. The Planner and the
// Actuator live as long as the engine; the options come with each call,
// so a change of configuration neither restarts unneeded timers nor
// forgets drains in progress.
package scaledown

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Planner decides which nodes to remove. It remembers between loops since
// when each node has been unneeded and when the cluster last scaled up.
// It is not safe for concurrent use.
type Planner struct {
	clock         clock.PassiveClock
	unneededSince map[string]time.Time
	lastScaleUp   time.Time
	// stable is what consolidation remembers; nil while it is off.
	stable *stability
	// opts are those of the Plan in progress.
	opts Options
}

// NewPlanner returns a Planner that tells with clk how long nodes have been
// unneeded.
func NewPlanner(clk clock.PassiveClock) *Planner {
	return &Planner{clock: clk, unneededSince: map[string]time.Time{}}
}

// RecordScaleUp notes a scale-up: no node is removed for DelayAfterAdd.
func (p *Planner) RecordScaleUp(at time.Time) {
	if at.After(p.lastScaleUp) {
		p.lastScaleUp = at
	}
}

// Progress is what the Actuator reports about the removals it runs.
type Progress struct {
	// Deleting are the names of the nodes being drained or deleted.
	Deleting map[string]bool
	// Deleted are those of them already deleted through their group, which
	// still lists them: the group's target size no longer counts them.
	Deleted map[string]bool
	// Draining is how many of them are being drained.
	Draining int
	// LastDeletion and LastFailure are when a node was last deleted and
	// when a removal last failed; zero when never.
	LastDeletion, LastFailure time.Time
	// DeletedNodes and EvictedPods count the nodes deleted and the pods
	// evicted since the Actuator was created; ConsolidatedNodes those of
	// the nodes consolidation chose.
	DeletedNodes, EvictedPods, ConsolidatedNodes int
	// Replacing is the replacement under way, nil when none: consolidation
	// follows it (Plan.Replacing) and decides nothing else meanwhile.
	Replacing *Replacing
	// NotGrowing are, by ID, the node groups that must not grow now, with
	// why (e.g. a backoff): consolidation replaces no node by theirs. The
	// engine fills it, not the Actuator.
	NotGrowing map[string]string
}

// Plan is the outcome of one planning pass.
type Plan struct {
	// Empty are the nodes to delete at once: they run nothing but
	// DaemonSet and mirror pods.
	Empty []Removal
	// Drain are the nodes to drain, then delete.
	Drain []Removal
	// Unneeded are the nodes that could go together, the removals included.
	Unneeded []Unneeded
	// Kept says, by node name, why each other node stays, and why each
	// unneeded node that is not removed now waits.
	Kept map[string]Decision
	// Utilization is, by node name, the utilization the nodes were judged
	// on (Utilization.Value); nodes kept before they were measured, such
	// as nodes of no group, have none.
	Utilization map[string]float64
	// Consolidation is what consolidation decided, nil when nothing. The
	// removals of a deletion are among Empty and Drain; those of a
	// replacement are kept (ReasonAwaitingReplacement) until its new
	// nodes, which the actuation asks for, are Ready.
	Consolidation *Consolidation
	// Replacing is where the replacement under way (Progress.Replacing)
	// stands, nil when there is none.
	Replacing *ReplacingOutcome
}

// Removal is a node to remove.
type Removal struct {
	Node  *corev1.Node
	Group nodegroups.NodeGroup
	// ByConsolidation tells that consolidation, not scale-down, chose the
	// node, for Progress.ConsolidatedNodes.
	ByConsolidation bool
	// Moves are, for consolidation, the UIDs of the pods bound to the node
	// when it was chosen: its drain evicts no other pod, but gives the
	// node back.
	Moves map[types.UID]bool
}

// Unneeded is a node that could go.
type Unneeded struct {
	Node        *corev1.Node
	Group       nodegroups.NodeGroup
	Utilization Utilization
	// Since is when the node was first found unneeded.
	Since time.Time
	// RemovableAt is when its unneeded (or unready) time is over.
	RemovableAt time.Time
	// Empty is true when only DaemonSet and mirror pods run on it.
	Empty bool
}

// Plan finds the unneeded nodes of snap and chooses those to remove now,
// with opts, which must be valid (Options.Validate). snap is left as it was.
func (p *Planner) Plan(ctx context.Context, snap *snapshot.Snapshot, opts Options, progress Progress) *Plan {
	logger := klog.FromContext(ctx)
	p.opts = opts
	now := p.clock.Now()
	plan := &Plan{Kept: map[string]Decision{}, Utilization: map[string]float64{}}

	var candidates []*candidate
	for _, nodeInfo := range snap.NodeInfos() {
		if opts.Consolidation.Replaces() && progress.Replacing.adds(snap, nodeInfo.Name()) {
			plan.Kept[nodeInfo.Name()] = Decision{Reason: ReasonReplacementUnderWay, Message: "the node is a new node of a replacement under way: " + progress.Replacing.Consolidation.Message()}
			continue
		}
		c, kept := p.checkNode(nodeInfo, snap.NodeGroupOf(nodeInfo.Name()), progress.Deleting, now)
		if c != nil {
			plan.Utilization[nodeInfo.Name()] = c.utilization.Value
		}
		if kept != nil {
			plan.Kept[nodeInfo.Name()] = *kept
			continue
		}
		c.since = p.unneededSince[nodeInfo.Name()]
		candidates = append(candidates, c)
	}
	// Nodes that were unneeded before go first, so that a newcomer cannot
	// take the place their pods would move to and reset their timers;
	// then the emptiest nodes.
	slices.SortStableFunc(candidates, func(a, b *candidate) int {
		if a.since.IsZero() != b.since.IsZero() {
			if a.since.IsZero() {
				return 1
			}
			return -1
		}
		if c := a.since.Compare(b.since); c != 0 {
			return c
		}
		return cmp.Compare(a.utilization.Value, b.utilization.Value)
	})

	unneeded := p.simulate(ctx, snap, progress, candidates, plan)
	p.track(now, unneeded)
	plan.Unneeded = make([]Unneeded, 0, len(unneeded))
	for _, u := range unneeded {
		plan.Unneeded = append(plan.Unneeded, Unneeded{
			Node: u.nodeInfo.Node(), Group: u.group, Utilization: u.utilization,
			Since: u.since, RemovableAt: u.since.Add(p.removableAfter(u.candidate)), Empty: u.empty,
		})
	}
	p.choose(now, progress, plan)
	switch {
	case !opts.Consolidation.deletes():
		p.stable = nil
	case progress.Replacing != nil && opts.Consolidation.Replaces():
		p.observe(snap, now)
		p.followReplacement(ctx, snap, progress, plan, now)
	default:
		p.observe(snap, now)
		p.consolidate(ctx, snap, progress, plan, now)
	}
	logger.V(4).Info("Planned scale-down", "unneeded", len(plan.Unneeded), "empty", len(plan.Empty), "drain", len(plan.Drain))
	return plan
}

// track starts the timer of newly unneeded nodes and forgets the nodes
// that are needed again.
func (p *Planner) track(now time.Time, unneeded []*unneededNode) {
	since := make(map[string]time.Time, len(unneeded))
	for _, u := range unneeded {
		if u.since.IsZero() {
			u.since = now
		}
		since[u.nodeInfo.Name()] = u.since
	}
	p.unneededSince = since
}

// choose picks, among the unneeded nodes, those whose time is over, within
// the delays and the parallelism limits.
func (p *Planner) choose(now time.Time, progress Progress, plan *Plan) {
	cooldown := p.cooldown(now, progress)
	drains := progress.Draining
	for _, u := range plan.Unneeded {
		name := u.Node.Name
		switch {
		case now.Before(u.RemovableAt):
			reason := ReasonNotUnneededLongEnough
			if !p.opts.NodeRules.Ready(u.Node) {
				reason = ReasonNotUnreadyLongEnough
			}
			plan.Kept[name] = Decision{Reason: reason, Message: fmt.Sprintf("unneeded since %s, removable at %s", u.Since.Format(time.RFC3339), u.RemovableAt.Format(time.RFC3339))}
		case cooldown != nil:
			plan.Kept[name] = *cooldown
		case u.Empty && len(plan.Empty) < p.opts.MaxEmptyBulkDelete:
			plan.Empty = append(plan.Empty, Removal{Node: u.Node, Group: u.Group})
		case !u.Empty && drains < p.opts.MaxParallelDrains:
			drains++
			plan.Drain = append(plan.Drain, Removal{Node: u.Node, Group: u.Group})
		default:
			plan.Kept[name] = Decision{Reason: ReasonParallelismLimitReached, Message: "as many nodes as allowed are being removed"}
		}
	}
}

// cooldown says why removals are paused now, or nil.
func (p *Planner) cooldown(now time.Time, progress Progress) *Decision {
	for _, delay := range []struct {
		after time.Time
		wait  time.Duration
		what  string
	}{
		{p.lastScaleUp, p.opts.DelayAfterAdd, "a scale-up"},
		{progress.LastDeletion, p.opts.DelayAfterDelete, "a node deletion"},
		{progress.LastFailure, p.opts.DelayAfterFailure, "a failed scale-down"},
	} {
		if !delay.after.IsZero() && now.Before(delay.after.Add(delay.wait)) {
			return &Decision{Reason: ReasonScaleDownInCooldown, Message: fmt.Sprintf("scale-down paused until %s after %s", delay.after.Add(delay.wait).Format(time.RFC3339), delay.what)}
		}
	}
	return nil
}
