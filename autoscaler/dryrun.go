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

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
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
	// AnswerDecision would have set the condition Decision.Answer on a
	// ProvisioningRequest.
	AnswerDecision DecisionKind = "Answer"
	// ReseatDecision would have evicted Decision.Pods from the node of
	// Decision.Nodes, bought for another pod, to move them to the nodes
	// planned for them (reseat.go).
	ReseatDecision DecisionKind = "Reseat"
)

// MaxDecisions is how many dry-run decisions an engine remembers and a
// status keeps, of which at most MaxAnswerDecisions answers: the answers to
// many ProvisioningRequests would otherwise push out the scale-ups and
// scale-downs that a trial of a configuration is judged by.
const (
	MaxDecisions       = 50
	MaxAnswerDecisions = MaxDecisions / 2
)

// KeepRecentDecisions drops the oldest answers beyond MaxAnswerDecisions,
// then the oldest decisions beyond MaxDecisions.
func KeepRecentDecisions[D any](decisions []D, isAnswer func(D) bool) []D {
	answers := 0
	for _, decision := range decisions {
		if isAnswer(decision) {
			answers++
		}
	}
	decisions = slices.DeleteFunc(decisions, func(decision D) bool {
		if answers > MaxAnswerDecisions && isAnswer(decision) {
			answers--
			return true
		}
		return false
	})
	if extra := len(decisions) - MaxDecisions; extra > 0 {
		decisions = slices.Delete(decisions, 0, extra)
	}
	return decisions
}

// Decision is a scale-up, a scale-down or the answer to a
// ProvisioningRequest that a dry-run loop planned and did not carry out.
type Decision struct {
	Kind DecisionKind
	// Time is when the loop that planned it started.
	Time time.Time
	// Groups are the groups it would have changed, by ID, with the nodes
	// each would have gained (positive) or lost (negative).
	Groups []GroupDelta
	// Nodes are the nodes a scale-down would have removed, sorted.
	Nodes []string
	// Pods are the pending pods a scale-up was for, or the pods a reseat
	// would have evicted, sorted.
	Pods []types.NamespacedName
	// OldestPod is when the oldest of Pods was created.
	OldestPod time.Time
	// Request is the namespace/name of the ProvisioningRequest whose
	// atomic scale-up a scale-up was, or that an answer was for, or "".
	Request string
	// Answer is the condition an answer would have set on Request: the
	// one that tells the answer (provisioning.Answer.Conditions).
	Answer *provisioning.Condition
	// Reason says why a scale-down would have removed its nodes when it
	// was not because they were unneeded (consolidation's message), or
	// why a reseat would have evicted its pods.
	Reason string
	// ScheduledMinimum names the scheduled minimums a scale-up would have
	// raised its groups to.
	ScheduledMinimum string
}

// GroupDelta is a change of one group's size.
type GroupDelta struct {
	ID    string
	Delta int
}

// sameAs says whether d and other would do the same: a loop that plans
// again what the last one planned makes no new decision.
func (d Decision) sameAs(other *Decision) bool {
	return other != nil && d.Kind == other.Kind && d.Request == other.Request && d.ScheduledMinimum == other.ScheduledMinimum && slices.Equal(d.Groups, other.Groups) &&
		slices.Equal(d.Nodes, other.Nodes) && slices.Equal(d.Pods, other.Pods) && sameCondition(d.Answer, other.Answer)
}

// sameCondition says whether a and b set the same condition: a message
// that counts what changed since does not make a new answer.
func sameCondition(a, b *provisioning.Condition) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason
}

// Message says what the decision would have done, for events and logs.
func (d Decision) Message() string {
	groups := make([]string, 0, len(d.Groups))
	for _, g := range d.Groups {
		groups = append(groups, fmt.Sprintf("%s %+d", g.ID, g.Delta))
	}
	switch d.Kind {
	case ScaleUpDecision:
		if d.Request != "" {
			return fmt.Sprintf("Would scale up [%s] for ProvisioningRequest %s", strings.Join(groups, ", "), d.Request)
		}
		if d.ScheduledMinimum != "" {
			return fmt.Sprintf("Would scale up [%s] to the minimum of scheduled minimum %s", strings.Join(groups, ", "), d.ScheduledMinimum)
		}
		return fmt.Sprintf("Would scale up [%s] for %d pending pod(s)", strings.Join(groups, ", "), len(d.Pods))
	case ReseatDecision:
		pods := make([]string, 0, len(d.Pods))
		for _, pod := range d.Pods {
			pods = append(pods, pod.String())
		}
		return fmt.Sprintf("Would evict pod(s) %s from node %s: %s", strings.Join(pods, ", "), strings.Join(d.Nodes, ", "), d.Reason)
	case AnswerDecision:
		return fmt.Sprintf("Would set %s=%s (%s) on ProvisioningRequest %s: %s", d.Answer.Type, d.Answer.Status, d.Answer.Reason, d.Request, d.Answer.Message)
	default:
		verb := "remove"
		if slices.ContainsFunc(d.Groups, func(g GroupDelta) bool { return g.Delta > 0 }) {
			// Consolidation replaces them by new nodes.
			verb = "replace"
		}
		message := fmt.Sprintf("Would %s node(s) %s [%s]", verb, strings.Join(d.Nodes, ", "), strings.Join(groups, ", "))
		if d.Reason != "" {
			message += ": " + d.Reason
		}
		return message
	}
}

// dryRunDecisions are what a dry-run engine decided: the last decision of
// each key (the scale-up of pending pods, scale-down, the atomic scale-up
// and the answer of each request), to tell a new one from one planned again, and the
// last MaxDecisions decisions, oldest first.
type dryRunDecisions struct {
	last map[string]*Decision
	list []Decision
}

// record remembers d under key, if it is new, and says whether it was. A
// loop without a decision of the key forgets the last one (forget), so
// that the same decision later, for a new need, counts again.
func (r *dryRunDecisions) record(key string, d Decision) bool {
	if d.sameAs(r.last[key]) {
		return false
	}
	if r.last == nil {
		r.last = map[string]*Decision{}
	}
	r.last[key] = &d
	r.list = KeepRecentDecisions(append(r.list, d), func(d Decision) bool { return d.Kind == AnswerDecision })
	return true
}

func (r *dryRunDecisions) forget(key string) {
	delete(r.last, key)
}

// forgetGoneRequests forgets the last answers and atomic scale-ups of the
// requests whose keys are not in kept, those gone: an answer given again
// later counts again, and a request deleted while scaling up is not
// remembered for ever.
func (r *dryRunDecisions) forgetGoneRequests(kept map[string]bool) {
	for key, last := range r.last {
		if last.Request != "" && !kept[key] {
			delete(r.last, key)
		}
	}
}

// dryRun records the decisions of a loop in DryRun mode and writes
// nothing: neither the cluster's nodes, pods, capacity buffers and
// provisioning requests, nor its node groups, nor events on any of them.
// What it decides is published instead (Status.Decisions, metrics with
// mode="DryRun", the log). The one write it makes is to give back what
// the engine's own Active loops left in progress: their drains, and the
// nodes handed over that their group does not remove, which it tells on
// the group. An engine that never ran Active has none.
type dryRun struct{ s *steps }

var _ actuation = dryRun{}

func (d dryRun) mode() string { return modeDryRun }

// metrics are nil: the cluster's series are those of the autoscaler that
// acts on it. Decisions are counted apart (publishDecision).
func (d dryRun) metrics() *Metrics { return nil }

func (d dryRun) groupEvent(string, string, string, string) {}

func (d dryRun) giveUpSizes(context.Context, *loop, nodegroups.NodeGroup, int) {}

// deleteInstances leaves failed and long-unregistered instances to the
// autoscaler that acts on the cluster.
func (d dryRun) deleteInstances(context.Context, nodegroups.NodeGroup, []nodegroups.Instance, string) {
}

// continueScaleDown gives back the engine's own drains and follows its
// own hand-overs, of an Active run before: the marks of this manager that
// the engine did not place may be those of the Active engine of another
// ClusterAutoscaler of the Cluster. A node already handed over stays
// tainted while its group removes it, and is given back if it does not.
func (d dryRun) continueScaleDown(ctx context.Context, l *loop, view scaledown.View) []scaledown.Released {
	d.s.actuator.ReleaseAll(ctx, "the ClusterAutoscaler is in DryRun mode")
	released := d.s.actuator.FollowHandedOver(ctx, view)
	d.s.givenBack.tell(d.s.opts.GroupRecorder, released, l.now)
	return released
}

// scaleUp records the scale-up a dry-run loop planned, when new.
func (d dryRun) scaleUp(ctx context.Context, l *loop, plan *scaleup.Plan) map[string]int {
	s := d.s
	if len(plan.Increases) == 0 {
		s.decisions.forget(pendingPodsDecision)
		return nil
	}
	decision := Decision{Kind: ScaleUpDecision, Time: l.now}
	for _, pod := range withoutBufferPods(plan.Helped) {
		decision.Pods = append(decision.Pods, types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name})
		if created := pod.CreationTimestamp.Time; decision.OldestPod.IsZero() || created.Before(decision.OldestPod) {
			decision.OldestPod = created
		}
	}
	increases := plannedIncreases(plan)
	d.publishScaleUp(ctx, l, pendingPodsDecision, decision, plan)
	return increases
}

// reseat records the evictions of the pods that took the room of others
// that a dry-run loop would make, when new, and forgets those of the pods
// it no longer re-seats.
func (d dryRun) reseat(ctx context.Context, l *loop, reseatings []reseating) {
	decided := map[string]bool{}
	for _, r := range reseatings {
		decided[reseatDecision(r.pod.UID)] = true
	}
	for key := range d.s.decisions.last {
		if strings.HasPrefix(key, reseatDecisionPrefix) && !decided[key] {
			d.s.decisions.forget(key)
		}
	}
	for _, r := range reseatings {
		decision := Decision{Kind: ReseatDecision, Time: l.now, Nodes: []string{r.node},
			Reason: fmt.Sprintf("planned for nodes on their way, Ready now, they took the room of pod %s, which the node was bought for", klog.KObj(r.pod))}
		for _, m := range r.moves {
			if m.ready {
				decision.Pods = append(decision.Pods, types.NamespacedName{Namespace: m.pod.Namespace, Name: m.pod.Name})
			}
		}
		if len(decision.Pods) > 0 {
			d.publishDecision(ctx, reseatDecision(r.pod.UID), decision, 0)
		}
	}
}

// raiseToMinimums records the raises to scheduled minimums a dry-run loop
// planned, when new.
func (d dryRun) raiseToMinimums(ctx context.Context, l *loop, raises []minimumRaise) {
	if len(raises) == 0 {
		d.s.decisions.forget(scheduledMinimumsDecision)
		return
	}
	decision := Decision{Kind: ScaleUpDecision, Time: l.now}
	var names []string
	nodes := 0
	for _, raise := range raises {
		decision.Groups = append(decision.Groups, GroupDelta{ID: raise.increase.Group.ID(), Delta: raise.increase.Delta})
		names = append(names, raise.minimum.ActiveNames()...)
		nodes += raise.increase.Delta
	}
	slices.Sort(names)
	decision.ScheduledMinimum = strings.Join(slices.Compact(names), ", ")
	d.publishDecision(ctx, scheduledMinimumsDecision, decision, nodes)
	d.s.planner.RecordScaleUp(l.now)
}

// publishScaleUp publishes a scale-up decision under key, with the groups
// of plan, and has scale-down wait as the scale-up would: delayAfterAdd.
func (d dryRun) publishScaleUp(ctx context.Context, l *loop, key string, decision Decision, plan *scaleup.Plan) {
	for _, increase := range plan.Increases {
		decision.Groups = append(decision.Groups, GroupDelta{ID: increase.Group.ID(), Delta: increase.Delta})
	}
	d.publishDecision(ctx, key, decision, plan.NewNodes())
	d.s.planner.RecordScaleUp(l.now)
}

// scaleDown records the removals a dry-run loop planned, when new.
func (d dryRun) scaleDown(ctx context.Context, l *loop, plan *scaledown.Plan) {
	removals := slices.Concat(plan.Empty, plan.Drain)
	deltas := map[string]int{}
	decision := Decision{Kind: ScaleDownDecision, Time: l.now}
	if consolidation := plan.Consolidation; consolidation != nil {
		decision.Reason = consolidation.Message()
		// A replacement's removals wait for its new nodes, which an
		// Active engine would ask for now.
		if replacement := consolidation.Replacement; replacement != nil {
			removals = consolidation.Removals
			for _, g := range replacement.Groups {
				deltas[g.Group.ID()] += g.Nodes
			}
		}
	}
	if len(removals) == 0 {
		d.s.decisions.forget(scaleDownDecision)
		return
	}
	for _, removal := range removals {
		decision.Nodes = append(decision.Nodes, removal.Node.Name)
		deltas[removal.Group.ID()]--
	}
	slices.Sort(decision.Nodes)
	for id, delta := range deltas {
		decision.Groups = append(decision.Groups, GroupDelta{ID: id, Delta: delta})
	}
	d.publishDecision(ctx, scaleDownDecision, decision, len(removals))
}

// startAtomicScaleUp records the atomic scale-up a request would get, and
// answers what an Active engine would.
func (d dryRun) startAtomicScaleUp(ctx context.Context, l *loop, request *provisioning.Request, plan *scaleup.Plan, pods int, answer provisioning.Answer) provisioning.Answer {
	decision := Decision{Kind: ScaleUpDecision, Time: l.now, Request: request.Key()}
	d.publishScaleUp(ctx, l, requestDecision(request.UID), decision, plan)
	return scalingUpAnswer(answer, atomicScaleUpRecord(plan, l), plan, pods)
}

// rollBack removes nothing: a failed atomic scale-up that an Active run of
// the engine started is left as it is, recorded, for the autoscaler that
// acts on the cluster.
func (d dryRun) rollBack(_ context.Context, _ *loop, _ *provisioning.Request, scaleUp *atomicScaleUp, failure string, answer provisioning.Answer) provisioning.Answer {
	answer.Outcome, answer.ScaleUp = provisioning.ScalingUp, scaleUp.record
	answer.Message = failure + "; an Active autoscaler would roll the scale-up back"
	return answer
}

// answerRequests publishes, in the log and as an Answer decision, each
// answer that differs from the last given to its request, and forgets the
// scale-up decisions of the requests that no longer need one.
func (d dryRun) answerRequests(ctx context.Context, l *loop, answers []provisioning.Answer) {
	noRetry := map[types.UID]bool{}
	// The requests served, answered or not by this loop, and those ended.
	served := map[string]bool{}
	for _, request := range l.requests {
		noRetry[request.UID] = request.NoRetry
		served[answerDecision(request.UID)] = true
		served[requestDecision(request.UID)] = true
	}
	for _, answer := range answers {
		if answer.Outcome != provisioning.ScalingUp {
			d.s.decisions.forget(requestDecision(answer.UID))
		}
		klog.FromContext(ctx).V(2).Info("Dry run: not answering a ProvisioningRequest", "ProvisioningRequest", klog.KRef(answer.Namespace, answer.Name),
			"outcome", answer.Outcome, "message", answer.Message)
		conditions := answer.Conditions(noRetry[answer.UID])
		if len(conditions) == 0 {
			continue
		}
		key := answerDecision(answer.UID)
		served[key] = true
		request := types.NamespacedName{Namespace: answer.Namespace, Name: answer.Name}.String()
		d.publishDecision(ctx, key, Decision{Kind: AnswerDecision, Time: l.now, Request: request, Answer: &conditions[len(conditions)-1]}, 0)
	}
	d.s.decisions.forgetGoneRequests(served)
}

// writeBufferStatus writes nothing, and tells no window in events: the
// buffers' room, and where the scheduled ones stand, is in the status of
// the ClusterAutoscaler (Status.Buffers).
func (d dryRun) writeBufferStatus(context.Context, *loop) {}

// Keys of the last decisions (dryRunDecisions.last): one for the scale-up
// of pending pods, one for scale-down, and for each request one for its
// atomic scale-up and one for its answer.
const (
	pendingPodsDecision = "pending pods"
	// scheduledMinimumsDecision is the key of the raises to scheduled
	// minimums.
	scheduledMinimumsDecision = "scheduled minimums"
	scaleDownDecision         = "scale-down"
)

func requestDecision(uid types.UID) string { return "ProvisioningRequest " + string(uid) }

// reseatDecisionPrefix starts the keys of the re-seats of pods.
const reseatDecisionPrefix = "reseat of pod "

func reseatDecision(uid types.UID) string { return reseatDecisionPrefix + string(uid) }

func answerDecision(uid types.UID) string { return "answer to ProvisioningRequest " + string(uid) }

// publishDecision adds a new decision to the loop's status, its metrics
// and the log.
func (d dryRun) publishDecision(ctx context.Context, key string, decision Decision, nodes int) {
	s := d.s
	slices.SortFunc(decision.Groups, func(a, b GroupDelta) int { return cmp.Compare(a.ID, b.ID) })
	slices.SortFunc(decision.Pods, func(a, b types.NamespacedName) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	if !s.decisions.record(key, decision) {
		return
	}
	klog.FromContext(ctx).Info("Dry run: not carrying out a decision", "decision", decision.Kind, "message", decision.Message())
	switch decision.Kind {
	case ScaleUpDecision:
		s.opts.Metrics.recordScaleUp(s.opts.ClusterName, modeDryRun, nodes)
	case ScaleDownDecision:
		// Only consolidation gives a scale-down a reason.
		reason := scaleDownUnderutilized
		if decision.Reason != "" {
			reason = scaleDownConsolidation
		}
		s.opts.Metrics.recordScaleDown(s.opts.ClusterName, reason, modeDryRun, nodes)
	}
}
