package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// actuation carries out what the steps of a loop decided. The steps read
// and plan; every write to the cluster, to its node groups, to the
// objects behind them, and to capacity buffers and provisioning requests
// goes through the actuation. The engine picks one when it builds the
// steps of a configuration: active applies the decisions, dryRun records
// them (Status.Decisions, metrics with mode="DryRun", the log) and writes
// nothing of its own, so that a DryRun loop changes nothing by
// construction: it only gives back what an Active run of the engine
// before placed (dryRun.continueScaleDown).
type actuation interface {
	// mode is the metrics label of what the actuation does: modeActive or
	// modeDryRun.
	mode() string
	// metrics are where the loop records its metrics: nowhere in DryRun
	// mode but for the decisions. The cluster's series are those of the
	// autoscaler that acts on it, which may be another engine of this
	// manager, for another ClusterAutoscaler of the same Cluster.
	metrics() *Metrics
	// groupEvent records an event on the object behind a node group.
	groupEvent(groupID, eventType, reason, message string)
	// giveUpSizes lowers the target size of a group by sizes that have no
	// instance, after a timed-out scale-up.
	giveUpSizes(ctx context.Context, l *loop, group nodegroups.NodeGroup, sizes int)
	// deleteInstances deletes instances of a group, for the reason action
	// names.
	deleteInstances(ctx context.Context, group nodegroups.NodeGroup, instances []nodegroups.Instance, action string)
	// continueScaleDown drives the removals in progress and returns the
	// nodes handed over that their group did not remove, given back.
	continueScaleDown(ctx context.Context, l *loop, view scaledown.View) []scaledown.Released
	// scaleUp carries out a scale-up plan for pending pods, and returns
	// the nodes it adds to each group, by group ID.
	scaleUp(ctx context.Context, l *loop, plan *scaleup.Plan) map[string]int
	// reseat gives pending pods back the room of the nodes bought for
	// them: it evicts the pods that took it once their own nodes are
	// Ready, for their controllers to recreate them there.
	reseat(ctx context.Context, l *loop, reseatings []reseating)
	// raiseToMinimums carries out the scale-ups of groups to the minimum
	// their scheduled minimums set.
	raiseToMinimums(ctx context.Context, l *loop, raises []minimumRaise)
	// scaleDown starts removing the nodes of a scale-down plan.
	scaleDown(ctx context.Context, l *loop, plan *scaledown.Plan)
	// startAtomicScaleUp carries out the plan of the atomic scale-up of a
	// request, all of it or none, and returns the request's answer.
	startAtomicScaleUp(ctx context.Context, l *loop, request *provisioning.Request, plan *scaleup.Plan, pods int, answer provisioning.Answer) provisioning.Answer
	// rollBack takes back the atomic scale-up of a request that failed,
	// and returns the request's answer.
	rollBack(ctx context.Context, l *loop, request *provisioning.Request, scaleUp *atomicScaleUp, failure string, answer provisioning.Answer) provisioning.Answer
	// answerRequests gives the provisioning requests their answers.
	answerRequests(ctx context.Context, l *loop, answers []provisioning.Answer)
	// writeBufferStatus writes what the capacity buffers read in the loop
	// resolved to in their status, with where the scheduled ones stand,
	// and tells their windows and problems in events.
	writeBufferStatus(ctx context.Context, l *loop)
}

// newActuation is the actuation of the steps for their configuration's
// mode.
func newActuation(s *steps) actuation {
	if s.settings.config.DryRun {
		return dryRun{s}
	}
	return active{s}
}

// active applies the decisions of a loop.
type active struct{ s *steps }

var _ actuation = active{}

func (a active) mode() string { return modeActive }

func (a active) metrics() *Metrics { return a.s.opts.Metrics }

func (a active) groupEvent(groupID, eventType, reason, message string) {
	if a.s.opts.GroupRecorder != nil {
		a.s.opts.GroupRecorder.Event(groupID, eventType, reason, message)
	}
}

// groupError logs and counts a node group's write that failed.
func (a active) groupError(ctx context.Context, groupID, action string, err error) {
	klog.FromContext(ctx).Error(err, "Node group action failed", "nodeGroup", groupID, "action", action)
	a.metrics().recordError(a.s.opts.ClusterName, "cloudProviderError")
}

// increaseFailed tells an increase that failed as a failure of the group;
// one the group refused for now was told by increase.
func (a active) increaseFailed(ctx context.Context, groupID, action string, err error) {
	var refused *nodegroups.RefusedError
	if !errors.As(err, &refused) {
		a.groupError(ctx, groupID, action, err)
	}
}

func (a active) giveUpSizes(ctx context.Context, l *loop, group nodegroups.NodeGroup, sizes int) {
	if err := a.giveUp(ctx, l, group, sizes); err != nil {
		a.groupError(ctx, group.ID(), "correcting target size after a timed-out scale-up", err)
	}
}

// giveUp lowers the target size of a group by sizes that have no
// instance, and counts them given up in the loop.
func (a active) giveUp(ctx context.Context, l *loop, group nodegroups.NodeGroup, sizes int) error {
	if err := group.DecreaseTargetSize(ctx, sizes); err != nil {
		return err
	}
	l.givenUp[group.ID()] += sizes
	return nil
}

func (a active) deleteInstances(ctx context.Context, group nodegroups.NodeGroup, instances []nodegroups.Instance, action string) {
	klog.FromContext(ctx).V(2).Info("Deleting instances", "nodeGroup", group.ID(), "count", len(instances), "action", action)
	if err := group.DeleteInstances(ctx, instances); err != nil {
		a.groupError(ctx, group.ID(), action, err)
	}
}

func (a active) continueScaleDown(ctx context.Context, l *loop, view scaledown.View) []scaledown.Released {
	s := a.s
	switch {
	case l.otherAutoscaler != "":
		s.actuator.ReleaseAll(ctx, "another cluster autoscaler acts on the cluster: "+l.otherAutoscaler)
	case !s.settings.config.ScaleDown.Enabled:
		s.actuator.ReleaseAll(ctx, "scale-down is disabled")
	}
	released := s.actuator.Continue(ctx, view)
	s.givenBack.tell(s.opts.GroupRecorder, released, l.now)
	return released
}

// givenBackNodes are, by group ID, the last node each group was handed
// for deletion and did not remove, which the actuation gave back: told on
// the group, and shown on its status row for givenBackShownFor, whichever
// actuation runs then.
type givenBackNodes struct {
	byGroup map[string]givenBack
}

// givenBack is a node deletion that a group did not carry out.
type givenBack struct {
	message string
	at      time.Time
}

// givenBackShownFor is how long a node a group did not remove stays on the
// group's status row.
const givenBackShownFor = time.Hour

// tell records on their groups the nodes handed over that the groups did
// not remove and that were given back, and remembers them for the groups'
// status rows.
func (g *givenBackNodes) tell(recorder NodeGroupEventRecorder, released []scaledown.Released, now time.Time) {
	for _, r := range released {
		if recorder != nil {
			recorder.Event(r.GroupID, corev1.EventTypeWarning, EventNodeNotDeleted, r.Message)
		}
		if g.byGroup == nil {
			g.byGroup = map[string]givenBack{}
		}
		g.byGroup[r.GroupID] = givenBack{message: r.Message, at: now}
	}
}

// shown are the messages of the nodes given back within givenBackShownFor,
// by group ID.
func (g *givenBackNodes) shown(now time.Time) map[string]string {
	messages := make(map[string]string, len(g.byGroup))
	for id, given := range g.byGroup {
		if now.Sub(given.at) < givenBackShownFor {
			messages[id] = given.message
		}
	}
	return messages
}

func (a active) scaleUp(ctx context.Context, l *loop, plan *scaleup.Plan) map[string]int {
	s := a.s
	logger := klog.FromContext(ctx)
	scaled := 0
	for _, increase := range plan.Increases {
		id := increase.Group.ID()
		if err := a.increase(ctx, l, increase); err != nil {
			a.increaseFailed(ctx, id, "increasing size", err)
			continue
		}
		scaled += increase.Delta
		target := a.increased(l, increase, "", "Scale-up")
		logger.Info("Scaled up node group", "nodeGroup", id, "delta", increase.Delta, "targetSize", target+increase.Delta)
	}
	// After the increases: the nominations wait for machines that boot for
	// long, while up to maxNominationsPerLoop pod writes would hold the new
	// machines back, and a burst's nodes would become Ready further apart.
	s.nominate(ctx, placementsOfRealPods(plan.ToNominate))
	if scaled > 0 {
		a.scaledUp(l, scaled)
		message := s.scaleUpMessage(plan.Increases)
		for _, pod := range withoutBufferPods(plan.Helped) {
			s.opts.Recorder.Event(pod, corev1.EventTypeNormal, EventTriggeredScaleUp, message)
		}
		for _, buffer := range buffersOf(plan.Helped) {
			s.opts.Recorder.Event(buffer, corev1.EventTypeNormal, EventTriggeredScaleUp, message)
		}
	}

	for _, pod := range realNoScaleUp(plan.NoScaleUp) {
		if message := pod.Message(); s.told.notTriggered.tell(string(pod.Pod.UID), message, l.now) {
			s.opts.Recorder.Event(pod.Pod, corev1.EventTypeNormal, EventNotTriggerScaleUp, message)
		}
	}
	for _, unhelped := range buffersNotHelped(plan.NoScaleUp) {
		if s.told.notTriggered.tell(string(unhelped.buffer.UID), unhelped.message, l.now) {
			s.opts.Recorder.Event(unhelped.buffer, corev1.EventTypeNormal, EventNotTriggerScaleUp, unhelped.message)
		}
	}
	s.told.notTriggered.endRound()
	return l.increased
}

func (a active) reseat(ctx context.Context, l *loop, reseatings []reseating) {
	s := a.s
	logger := klog.FromContext(ctx)
	for _, r := range reseatings {
		if message := r.message(); s.told.reseats.tell(string(r.pod.UID), message, l.now) {
			s.opts.Recorder.Event(r.pod, corev1.EventTypeNormal, EventReseat, message)
		}
		for _, m := range r.moves {
			if !m.ready || m.evicted {
				continue
			}
			grace := gracePeriod(m.pod, s.settings.config.ScaleDown.MaxGracefulTermination)
			if err := evictPod(ctx, s.opts.Clientset, m.pod, grace); err != nil {
				// A PodDisruptionBudget that allows no disruption now
				// included: the next loop tries again.
				logger.V(2).Info("Failed to evict a pod to move it to the node planned for it", "pod", klog.KRef(m.pod.Namespace, m.pod.Name), "node", r.node,
					"plannedNode", m.to, "err", err)
				continue
			}
			s.displacements[r.pod.UID].evicted.Insert(m.pod.UID)
			message := m.message(r)
			logger.Info("Evicted a pod to move it to the node planned for it", "pod", klog.KRef(m.pod.Namespace, m.pod.Name), "node", r.node,
				"plannedNode", m.to, "for", klog.KObj(r.pod), "reason", message)
			s.opts.Recorder.Event(m.pod.Full(), corev1.EventTypeNormal, EventReseat, "Evicted: "+message)
			if info := l.snapshot.NodeInfo(r.node); info != nil {
				s.opts.Recorder.Event(info.Node(), corev1.EventTypeNormal, EventReseat, "Evicted "+message)
			}
			a.metrics().recordEvictions(s.opts.ClusterName, 1)
		}
	}
	s.told.reseats.endRound()
}

func (a active) raiseToMinimums(ctx context.Context, l *loop, raises []minimumRaise) {
	scaled := 0
	for _, raise := range raises {
		id := raise.increase.Group.ID()
		from := a.s.state.Group(id).Target + l.increased[id]
		if err := a.increase(ctx, l, raise.increase); err != nil {
			a.increaseFailed(ctx, id, "increasing size to the scheduled minimum", err)
			continue
		}
		scaled += raise.increase.Delta
		message := raise.message(from)
		a.increased(l, raise.increase, "", "Scale-up to the "+message)
		klog.FromContext(ctx).Info("Scaled up node group to its scheduled minimum", "nodeGroup", id, "delta", raise.increase.Delta,
			"targetSize", from+raise.increase.Delta, "scheduledMinimums", raise.minimum.ActiveNames())
	}
	if scaled > 0 {
		a.scaledUp(l, scaled)
	}
}

// increased registers an increase the group took, for the request of
// requestUID ("" for pending pods), in the loop, the cluster state and the
// increases new instances are credited to, and tells it on the group in an
// event that what starts. It returns the group's target size before it.
func (a active) increased(l *loop, increase scaleup.Increase, requestUID types.UID, what string) int {
	s := a.s
	id := increase.Group.ID()
	target := s.state.Group(id).Target
	l.increased[id] += increase.Delta
	s.state.RegisterScaleUp(id, increase.Delta, l.now)
	s.atomic.queueIncrease(increase.Group, increase.Delta, requestUID, l.now)
	a.groupEvent(id, corev1.EventTypeNormal, EventScaledUpGroup,
		fmt.Sprintf("%s: setting group %s size to %d instead of %d (max: %d)", what, id, target+increase.Delta, target, increase.Group.MaxSize()))
	return target
}

// scaledUp records a scale-up that added nodes, in all.
func (a active) scaledUp(l *loop, nodes int) {
	a.s.history.lastScaleUp = l.now
	a.s.planner.RecordScaleUp(l.now)
	a.metrics().recordScaleUp(a.s.opts.ClusterName, modeActive, nodes)
}

// increase raises a group's target size; when the group refuses, it
// backs off and says so, and the error says what failed.
func (a active) increase(ctx context.Context, l *loop, increase scaleup.Increase) error {
	id := increase.Group.ID()
	err := increase.Group.IncreaseSize(ctx, increase.Delta)
	if err == nil {
		return nil
	}
	var refused *nodegroups.RefusedError
	if errors.As(err, &refused) {
		// Not a failure of the group: a later loop grows it, without the
		// backoff of a failed scale-up.
		klog.FromContext(ctx).V(2).Info("Node group refused to grow for now", "nodeGroup", id, "delta", increase.Delta, "reason", refused.Reason)
		return err
	}
	message := fmt.Sprintf("Failed to increase %s by %d: %v", id, increase.Delta, err)
	a.s.state.Backoff(id, "IncreaseSizeFailed", message, l.now)
	a.groupEvent(id, corev1.EventTypeWarning, EventFailedToScaleUpGroup, message)
	a.metrics().recordFailedScaleUp(a.s.opts.ClusterName, "api")
	return errors.New(message)
}

func (a active) scaleDown(ctx context.Context, l *loop, plan *scaledown.Plan) {
	a.followReplacement(ctx, plan)
	if consolidation := plan.Consolidation; consolidation != nil && a.replace(ctx, l, consolidation) {
		message := consolidation.Message()
		klog.FromContext(ctx).Info("Consolidating", "message", message)
		for _, id := range consolidationGroups(consolidation) {
			a.groupEvent(id, corev1.EventTypeNormal, EventConsolidation, message)
		}
	}
	if len(plan.Empty)+len(plan.Drain) > 0 {
		klog.FromContext(ctx).Info("Scaling down", "emptyNodes", len(plan.Empty), "drainedNodes", len(plan.Drain))
		// Outside the planning fork: the pods to evict are those read
		// from the cluster, not the pending pods placed to plan.
		a.s.actuator.Start(ctx, plan, l.snapshot)
	}
}

// replace asks for the new nodes of a consolidation that replaces nodes,
// and has the actuator follow it: the nodes it replaces are drained once
// the new ones are Ready. It says whether the consolidation goes on: a
// deletion always does, a replacement of which a group refused to grow
// does not, and the groups that grew for it are taken back.
func (a active) replace(ctx context.Context, l *loop, consolidation *scaledown.Consolidation) bool {
	replacement := consolidation.Replacement
	if replacement == nil {
		return true
	}
	increases := make([]scaleup.Increase, 0, len(replacement.Groups))
	for _, g := range replacement.Groups {
		increases = append(increases, scaleup.Increase{Group: g.Group, Delta: g.Nodes})
	}
	for i, increase := range increases {
		if err := a.increase(ctx, l, increase); err != nil {
			a.increaseFailed(ctx, increase.Group.ID(), "adding the nodes of a replacement", err)
			for _, done := range increases[:i] {
				if err := done.Group.DecreaseTargetSize(ctx, done.Delta); err != nil {
					a.groupError(ctx, done.Group.ID(), "taking back the nodes of a replacement", err)
				}
			}
			return false
		}
	}
	before := map[string]bool{}
	for _, increase := range increases {
		a.increased(l, increase, "", "Consolidation")
		for _, name := range l.snapshot.RegisteredNodes(increase.Group.ID()) {
			before[name] = true
		}
	}
	a.scaledUp(l, replacement.Nodes())
	a.s.actuator.StartReplacing(&scaledown.Replacing{Consolidation: consolidation, Started: l.now, Before: before})
	return true
}

// followReplacement ends the replacement under way once its nodes are
// drained or it is abandoned, which it tells on its groups, and forgets
// one that consolidation no longer follows (its policy changed).
func (a active) followReplacement(ctx context.Context, plan *scaledown.Plan) {
	outcome := plan.Replacing
	switch {
	case outcome == nil:
		if a.s.actuator.Progress().Replacing != nil {
			klog.FromContext(ctx).Info("Consolidation no longer replaces nodes: forgetting the replacement under way, its new nodes are left to scale-down")
			a.s.actuator.EndReplacing()
		}
		return
	case outcome.Abandoned == "" && !outcome.Ready:
		return
	}
	a.s.actuator.EndReplacing()
	reason, eventType := EventConsolidation, corev1.EventTypeNormal
	if outcome.Abandoned != "" {
		reason, eventType = EventConsolidationAbandoned, corev1.EventTypeWarning
	}
	message := outcome.Message()
	klog.FromContext(ctx).Info("Replacement under way", "outcome", reason, "message", message)
	for _, id := range consolidationGroups(outcome.Replacing.Consolidation) {
		a.groupEvent(id, eventType, reason, message)
	}
}

// consolidationGroups are the IDs of the groups a consolidation changes:
// those of its removals and of its new nodes, sorted.
func consolidationGroups(consolidation *scaledown.Consolidation) []string {
	ids := make([]string, 0, len(consolidation.Removals)+1)
	for _, removal := range consolidation.Removals {
		ids = append(ids, removal.Group.ID())
	}
	if replacement := consolidation.Replacement; replacement != nil {
		for _, g := range replacement.Groups {
			ids = append(ids, g.Group.ID())
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

func (a active) startAtomicScaleUp(ctx context.Context, l *loop, request *provisioning.Request, plan *scaleup.Plan, pods int, answer provisioning.Answer) provisioning.Answer {
	s := a.s
	logger := klog.FromContext(ctx).WithValues("ProvisioningRequest", klog.KRef(request.Namespace, request.Name))
	for i, increase := range plan.Increases {
		if err := a.increase(ctx, l, increase); err != nil {
			for _, done := range plan.Increases[:i] {
				if err := done.Group.DecreaseTargetSize(ctx, done.Delta); err != nil {
					a.groupError(ctx, done.Group.ID(), "taking back the increase of an atomic scale-up", err)
				}
			}
			answer.Outcome, answer.Message = provisioning.NotFound, err.Error()+"; the other increases were taken back"
			return answer
		}
	}

	record := atomicScaleUpRecord(plan, l)
	for _, increase := range plan.Increases {
		a.increased(l, increase, request.UID, "Scale-up for ProvisioningRequest "+request.Key())
	}
	a.scaledUp(l, plan.NewNodes())
	s.atomic.remember(request.UID, &atomicScaleUp{record: record, queued: true})
	logger.Info("Started an atomic scale-up", "pods", pods, "nodes", plan.NewNodes(), "increases", addedNodes(plan))
	return scalingUpAnswer(answer, record, plan, pods)
}

// atomicScaleUpRecord is the record of the atomic scale-up of plan,
// started in loop l.
func atomicScaleUpRecord(plan *scaleup.Plan, l *loop) *provisioning.ScaleUp {
	return &provisioning.ScaleUp{Started: l.now, Groups: plannedIncreases(plan)}
}

// addedNodes says what a scale-up plan adds, e.g. "2 to md-0, 1 to md-1".
func addedNodes(plan *scaleup.Plan) string {
	added := make([]string, 0, len(plan.Increases))
	for _, increase := range plan.Increases {
		added = append(added, fmt.Sprintf("%d to %s", increase.Delta, increase.Group.ID()))
	}
	return strings.Join(added, ", ")
}

// scalingUpAnswer is the answer of a request whose atomic scale-up starts.
func scalingUpAnswer(answer provisioning.Answer, record *provisioning.ScaleUp, plan *scaleup.Plan, pods int) provisioning.Answer {
	answer.Outcome, answer.ScaleUp = provisioning.ScalingUp, record
	answer.Message = fmt.Sprintf("Adding %s for the %d pods", addedNodes(plan), pods)
	return answer
}

func (a active) rollBack(ctx context.Context, l *loop, request *provisioning.Request, scaleUp *atomicScaleUp, failure string, answer provisioning.Answer) provisioning.Answer {
	s := a.s
	if scaleUp.rollback == nil {
		scaleUp.rollback = &rollback{failure: failure, started: l.now, done: sets.New[string](), givenUp: map[string]int{}}
	}
	rb := scaleUp.rollback
	logger := klog.FromContext(ctx).WithValues("ProvisioningRequest", klog.KRef(request.Namespace, request.Name))
	left, err := a.removeScaleUp(ctx, l, scaleUp.record, rb)
	switch {
	case len(left) == 0 && err == nil:
		s.atomic.forget(request.UID)
		logger.Info("Rolled back an atomic scale-up", "failure", rb.failure, "keptNodesWithPods", rb.kept)
		answer.Outcome = provisioning.ScaleUpFailed
		answer.Message = rb.failure + "; the nodes it added were removed"
		if rb.kept > 0 {
			answer.Message += fmt.Sprintf(", but for %d that run pods and are left to scale-down", rb.kept)
		}
	case l.now.Sub(rb.started) >= rollbackTimeout:
		cause := "their group refused their removal, or they ran pods when the API server was read"
		if err != nil {
			cause = err.Error()
		}
		unfinished := unfinishedRollback{request: request.Key(), left: left, cause: cause}
		s.atomic.giveUp(request.UID, unfinished)
		logger.Info("Gave up rolling back an atomic scale-up", "failure", rb.failure, "left", left, "cause", cause)
		for _, id := range slices.Sorted(maps.Keys(left)) {
			a.groupEvent(id, corev1.EventTypeWarning, EventScaleUpRollbackIncomplete,
				fmt.Sprintf("Gave up, after %s, removing instance(s) %s that the atomic scale-up of ProvisioningRequest %s added: %s; they are left to scale-down",
					rollbackTimeout, strings.Join(left[id], ", "), request.Key(), cause))
		}
		answer.Outcome = provisioning.ScaleUpFailed
		answer.Message = fmt.Sprintf("%s; %s, left to scale-down", rb.failure, unfinished.message())
	default:
		// Tried again next loop: the failure stays, and what was
		// handed over already is not asked again.
		answer.Outcome, answer.ScaleUp = provisioning.ScalingUp, scaleUp.record
		answer.Message = fmt.Sprintf("%s; rolling back, %d instance(s) left to remove", rb.failure, countLeft(left))
		if err != nil {
			answer.Message += ": " + err.Error()
		}
	}
	return answer
}

func (a active) answerRequests(ctx context.Context, _ *loop, answers []provisioning.Answer) {
	a.s.opts.Requests.Answer(ctx, answers)
}

func (a active) writeBufferStatus(ctx context.Context, l *loop) {
	s := a.s
	for _, buffer := range l.listedBuffers {
		key := buffer.Key()
		switch window, scheduled := l.bufferWindows[key]; {
		case buffer.ScheduleProblem != "":
			if s.told.bufferSchedules.tell(key, buffer.ScheduleProblem, l.now) {
				s.opts.Recorder.Event(bufferReference(&buffer), corev1.EventTypeWarning, EventInvalidBufferSchedule,
					"The buffer's schedule is ignored, and it holds its room at all times: "+buffer.ScheduleProblem)
			}
		case scheduled:
			// Told by reason: a window whose lead time starts before the
			// last closes holds the room on, and tells nothing.
			reason := EventBufferWindowClosed
			if window.Holding {
				reason = EventBufferWindowOpened
			}
			if s.told.bufferSchedules.tell(key, reason, l.now) {
				s.opts.Recorder.Event(bufferReference(&buffer), corev1.EventTypeNormal, reason, "The buffer: "+window.Message())
			}
		}
	}
	s.told.bufferSchedules.endRound()
	s.opts.Buffers.WriteStatus(ctx, l.bufferWindows)
}
