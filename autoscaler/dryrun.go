package autoscaler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// DecisionKind is what a dry-run decision would have done.
type DecisionKind string

const (
	// ScaleUpDecision would have added nodes.
	ScaleUpDecision DecisionKind = "ScaleUp"
	// ScaleDownDecision would have started removing nodes.
	ScaleDownDecision DecisionKind = "ScaleDown"
)

// maxDecisions is how many dry-run decisions an engine remembers, the
// most the ClusterAutoscaler status keeps.
const maxDecisions = 50

// Decision is a scale-up or a scale-down that a dry-run loop planned and
// did not carry out.
type Decision struct {
	Kind DecisionKind
	// Time is when the loop that planned it started.
	Time time.Time
	// Groups are the groups it would have changed, by ID, with the nodes
	// each would have gained (positive) or lost (negative).
	Groups []GroupDelta
	// Nodes are the nodes a scale-down would have removed, sorted.
	Nodes []string
	// Pods are the pending pods a scale-up was for, sorted.
	Pods []types.NamespacedName
	// OldestPod is when the oldest of Pods was created.
	OldestPod time.Time
}

// GroupDelta is a change of one group's size.
type GroupDelta struct {
	ID    string
	Delta int
}

// sameAs says whether d and other would do the same: a loop that plans
// again what the last one planned makes no new decision.
func (d Decision) sameAs(other *Decision) bool {
	return other != nil && d.Kind == other.Kind && slices.Equal(d.Groups, other.Groups) &&
		slices.Equal(d.Nodes, other.Nodes) && slices.Equal(d.Pods, other.Pods)
}

// Message says what the decision would have done, for events and logs.
func (d Decision) Message() string {
	groups := make([]string, 0, len(d.Groups))
	for _, g := range d.Groups {
		groups = append(groups, fmt.Sprintf("%s %+d", g.ID, g.Delta))
	}
	switch d.Kind {
	case ScaleUpDecision:
		return fmt.Sprintf("Would scale up [%s] for %d pending pod(s)", strings.Join(groups, ", "), len(d.Pods))
	default:
		return fmt.Sprintf("Would remove node(s) %s [%s]", strings.Join(d.Nodes, ", "), strings.Join(groups, ", "))
	}
}

// dryRunDecisions are what a dry-run engine decided: the last decision of
// each kind, to tell a new one from one planned again, and the last
// maxDecisions decisions, oldest first.
type dryRunDecisions struct {
	last map[DecisionKind]*Decision
	list []Decision
}

// record remembers d, if it is new, and says whether it was. A loop of
// the kind without a decision forgets the last one (forget), so that the
// same decision later, for a new need, counts again.
func (r *dryRunDecisions) record(d Decision) bool {
	if d.sameAs(r.last[d.Kind]) {
		return false
	}
	if r.last == nil {
		r.last = map[DecisionKind]*Decision{}
	}
	r.last[d.Kind] = &d
	r.list = append(r.list, d)
	if extra := len(r.list) - maxDecisions; extra > 0 {
		r.list = slices.Delete(r.list, 0, extra)
	}
	return true
}

func (r *dryRunDecisions) forget(kind DecisionKind) {
	delete(r.last, kind)
}

// dryRun says whether the loop only plans: in DryRun mode the engine
// writes nothing to the cluster, neither its nodes, pods and node groups,
// nor events on them, and publishes what it would have done instead.
func (s *steps) dryRun() bool {
	return s.settings.config.DryRun
}

// metrics are where the loop records its metrics: nowhere in DryRun mode
// but for the decisions (publishDecision). The cluster's series are those
// of the autoscaler that acts on it, which may be another engine of this
// manager, for another ClusterAutoscaler of the same Cluster.
func (s *steps) metrics() *Metrics {
	if s.dryRun() {
		return nil
	}
	return s.opts.Metrics
}

// wouldScaleUp records the scale-up a dry-run loop planned, when new.
func (s *steps) wouldScaleUp(ctx context.Context, l *loop, plan *scaleup.Plan) {
	if len(plan.Increases) == 0 {
		s.history.decisions.forget(ScaleUpDecision)
		return
	}
	d := Decision{Kind: ScaleUpDecision, Time: l.now}
	nodes := 0
	for _, increase := range plan.Increases {
		d.Groups = append(d.Groups, GroupDelta{ID: increase.Group.ID(), Delta: increase.Delta})
		nodes += increase.Delta
	}
	for _, pod := range withoutBufferPods(plan.Helped) {
		d.Pods = append(d.Pods, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		if created := pod.CreationTimestamp.Time; d.OldestPod.IsZero() || created.Before(d.OldestPod) {
			d.OldestPod = created
		}
	}
	s.publishDecision(ctx, d, nodes)
	// As the scale-up would have: scale-down waits delayAfterAdd.
	s.planner.RecordScaleUp(l.now)
}

// wouldScaleDown records the removals a dry-run loop planned, when new.
func (s *steps) wouldScaleDown(ctx context.Context, l *loop, plan *scaledown.Plan) {
	removals := slices.Concat(plan.Empty, plan.Drain)
	if len(removals) == 0 {
		s.history.decisions.forget(ScaleDownDecision)
		return
	}
	d := Decision{Kind: ScaleDownDecision, Time: l.now}
	deltas := map[string]int{}
	for _, removal := range removals {
		d.Nodes = append(d.Nodes, removal.Node.Name)
		deltas[removal.Group.ID()]--
	}
	slices.Sort(d.Nodes)
	for id, delta := range deltas {
		d.Groups = append(d.Groups, GroupDelta{ID: id, Delta: delta})
	}
	s.publishDecision(ctx, d, len(removals))
}

// publishDecision adds a new decision to the loop's status, its metrics
// and the log.
func (s *steps) publishDecision(ctx context.Context, d Decision, nodes int) {
	slices.SortFunc(d.Groups, func(a, b GroupDelta) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(d.Pods, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if !s.history.decisions.record(d) {
		return
	}
	klog.FromContext(ctx).Info("Dry run: not carrying out a decision", "decision", d.Kind, "message", d.Message())
	if d.Kind == ScaleUpDecision {
		s.opts.Metrics.recordScaleUp(s.opts.ClusterName, modeDryRun, nodes)
	} else {
		s.opts.Metrics.recordScaleDown(s.opts.ClusterName, scaleDownUnderutilized, modeDryRun, nodes)
	}
}
