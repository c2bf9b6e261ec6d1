package controller

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

const (
	// maxNotTriggerScaleUpReasons is how many reasons the status keeps.
	maxNotTriggerScaleUpReasons = 10
	// maxCapacityBuffers is how many buffers the status lists.
	maxCapacityBuffers = 50
	// maxNodeGroupRows is the most node group rows the CRD accepts.
	maxNodeGroupRows = 1000
	// maxReasonLength is the longest backoff reason, problem or pod reason
	// the CRD accepts.
	maxReasonLength = 1024
	// maxConditionMessageLength is the longest condition message the API accepts.
	maxConditionMessageLength = 32 * 1024
)

// ownedConditions are the conditions this controller writes; on a conflict
// the patch helper keeps its values.
var ownedConditions = []string{
	autoscalingv1alpha1.ReadyCondition,
	autoscalingv1alpha1.ScalingActiveCondition,
	autoscalingv1alpha1.ClusterHealthyCondition,
	autoscalingv1alpha1.ConfigurationAppliedCondition,
	autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition,
}

// lastLoopTimeRefresh is how old status.lastLoopTime grows at most while
// loops run: a loop that changes nothing else a reader sees costs no
// write, and lastLoopTime still shows within a minute that loops run.
const lastLoopTimeRefresh = time.Minute

// updateStatus writes the ClusterAutoscaler's status from what the
// reconcile learned, in s: the only place a reconcile writes it.
func updateStatus(s *reconcileScope) {
	ca := s.ca
	if s.cleanupWait != "" {
		setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason, s.cleanupWait)
	}
	if s.stopped != nil {
		setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, s.stopped.reason, s.stopped.message)
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, s.stopped.reason, s.stopped.message)
		setCondition(ca, autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionUnknown, s.stopped.reason, s.stopped.message)
	}
	setConfigurationApplied(s)
	if s.refused {
		// The owner's status tells how the Cluster is autoscaled.
		ca.Status = autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: ca.Status.Conditions}
		return
	}
	if s.engine == nil {
		return
	}
	ca.Status.ObservedGeneration = s.engine.applied.generation
	if !s.loop.Time.IsZero() {
		setStatusFromLoop(ca, s.loop)
		// Before the loop time is stamped, which compares the status with
		// what was read.
		if ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition); ready.Status == metav1.ConditionTrue && s.actingManager != "" {
			setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, ready.Reason, s.actingManager)
		}
		stampLoopTime(ca, s.read, s.loop.Time, s.engine.startedAt)
	}
	if s.stalled != "" {
		// Over what the last loop, long ago, found.
		setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, autoscalingv1alpha1.LoopStalledReason, s.stalled)
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.LoopStalledReason, "Nothing is scaled until the loop finishes")
	}
}

// setConfigurationApplied says whether the engine runs with the spec's
// generation; it keeps what the condition said when the reconcile did not
// get as far as the configuration.
func setConfigurationApplied(s *reconcileScope) {
	ca := s.ca
	switch {
	case s.refused:
		setCondition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, s.stopped.message)
	case s.configErr != nil && s.keptGeneration == 0:
		setCondition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason, "Invalid configuration: "+s.configErr.Error())
	case s.configErr != nil:
		setCondition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason,
			fmt.Sprintf("Invalid configuration in generation %d, autoscaling goes on with generation %d: %v", ca.Generation, s.keptGeneration, s.configErr))
	case s.engine != nil && s.engine.applied.generation == ca.Generation:
		setCondition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "")
	}
}

// setStatusFromLoop writes what the engine's last loop saw and did into the
// ClusterAutoscaler status, but for its time (stampLoopTime). Times are
// truncated to seconds, as the API stores them, so that an unchanged status
// causes no patch.
func setStatusFromLoop(ca *autoscalingv1alpha1.ClusterAutoscaler, status autoscaler.Status) {
	if status.Err != nil {
		reason := autoscalingv1alpha1.LoopFailedReason
		message := "The autoscaling loop failed: " + status.Err.Error()
		if isWorkloadClusterUnreachable(status.Err) {
			reason = autoscalingv1alpha1.WorkloadClusterUnreachableReason
			message = "The workload cluster cannot be reached: " + status.Err.Error()
		}
		setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, reason, message)
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, reason, "Nothing is scaled until the loop succeeds")
		return
	}

	setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "")
	ca.Status.AtomicScaleUps = atomicScaleUpRecords(status.AtomicScaleUps)
	setRolledBack(ca, status.UnfinishedRollbacks)
	setScheduledMinimumsValid(ca, status.ScheduledMinimumProblems)

	autoscaled := 0
	rows := make([]autoscalingv1alpha1.NodeGroupStatus, 0, len(status.NodeGroups))
	for _, group := range status.NodeGroups {
		if group.Autoscaled {
			autoscaled++
		}
		if len(rows) < maxNodeGroupRows {
			rows = append(rows, nodeGroupRow(group))
		}
	}

	switch {
	case status.DryRun:
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.DryRunReason, dryRunMessage(status))
	case status.OtherAutoscaler != "":
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.OtherAutoscalerActiveReason, status.ScalingMessage)
	case status.ScalingActive:
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, podsLeftMessage(status.PodsLeftForNextLoop))
	case autoscaled == 0:
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.NoNodeGroupsReason, status.ScalingMessage)
	default:
		setCondition(ca, autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.ClusterUnhealthyReason, status.ScalingMessage)
	}
	if status.ClusterHealthy {
		setCondition(ca, autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason, status.HealthMessage)
	} else {
		setCondition(ca, autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionFalse, autoscalingv1alpha1.ClusterUnhealthyReason, status.HealthMessage)
	}

	ca.Status.NodeGroupCount = int32(autoscaled)
	ca.Status.NodeGroups = rows
	ca.Status.Nodes = int32(status.Nodes)
	ca.Status.ReadyNodes = int32(status.ReadyNodes)
	ca.Status.UnschedulablePods = int32(status.UnschedulablePods)
	ca.Status.PodsLeftForNextLoop = int32(status.PodsLeftForNextLoop)
	ca.Status.NotTriggerScaleUpReasons = nil
	for _, reason := range status.NotTriggerScaleUpReasons {
		if len(ca.Status.NotTriggerScaleUpReasons) == maxNotTriggerScaleUpReasons {
			break
		}
		ca.Status.NotTriggerScaleUpReasons = append(ca.Status.NotTriggerScaleUpReasons,
			autoscalingv1alpha1.PodReasonCount{Reason: truncate(reason.Reason, maxReasonLength), Pods: int32(reason.Pods)})
	}
	ca.Status.CapacityBuffers = nil
	for _, buffer := range status.Buffers {
		if len(ca.Status.CapacityBuffers) == maxCapacityBuffers {
			break
		}
		room := autoscalingv1alpha1.CapacityBufferRoom{Name: buffer.Buffer, Replicas: int32(buffer.Replicas),
			Held: int32(buffer.Held), Upcoming: int32(buffer.Upcoming), Unplaceable: int32(buffer.Unplaceable)}
		switch {
		case len(buffer.Reasons) > 0:
			room.Message = truncate(buffer.Reasons[0].Reason, maxReasonLength)
		case buffer.Schedule != "":
			room.Message = truncate(buffer.Schedule, maxReasonLength)
		}
		ca.Status.CapacityBuffers = append(ca.Status.CapacityBuffers, room)
	}
	ca.Status.LastScaleUpTime = statusTime(status.LastScaleUp)
	ca.Status.LastScaleDownTime = statusTime(status.LastScaleDown)
}

// setRolledBack says what the rollbacks of atomic scale-ups that gave up
// left, while it is there; the condition appears with the first of them,
// so that a cluster whose rollbacks all finish never shows it.
func setRolledBack(ca *autoscalingv1alpha1.ClusterAutoscaler, unfinished []string) {
	switch {
	case len(unfinished) > 0:
		setCondition(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition, metav1.ConditionFalse, autoscalingv1alpha1.RollbackIncompleteReason,
			strings.Join(unfinished, "\n"))
	case conditions.Has(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition):
		setCondition(ca, autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition, metav1.ConditionTrue, autoscalingv1alpha1.RolledBackReason, "")
	}
}

// stampLoopTime sets status.lastLoopTime to loopTime, when the engine's
// last loop started, if the status is written anyway (anything else in it
// differs from read, the status as the reconcile read it), if the engine,
// started at engineStart, has not stamped a loop yet, or if the time read
// is lastLoopTimeRefresh old. Otherwise it keeps the time read, so that a
// loop that changed nothing a reader sees costs no write.
func stampLoopTime(ca *autoscalingv1alpha1.ClusterAutoscaler, read *autoscalingv1alpha1.ClusterAutoscalerStatus, loopTime, engineStart time.Time) {
	last := read.LastLoopTime
	ca.Status.LastLoopTime = last
	if last == nil || last.Before(statusTime(engineStart)) || loopTime.Sub(last.Time) >= lastLoopTimeRefresh ||
		!equality.Semantic.DeepEqual(ca.Status, *read) {
		ca.Status.LastLoopTime = statusTime(loopTime)
	}
}

// priceSources are the API's names of where the engine's prices come from.
var priceSources = map[pricing.Source]autoscalingv1alpha1.PriceSource{
	pricing.SourceNodeGroup:    autoscalingv1alpha1.NodeGroupPriceSource,
	pricing.SourceInstanceType: autoscalingv1alpha1.InstanceTypePriceSource,
	pricing.SourceDefault:      autoscalingv1alpha1.DefaultPriceSource,
}

func nodeGroupRow(group autoscaler.NodeGroupStatus) autoscalingv1alpha1.NodeGroupStatus {
	row := autoscalingv1alpha1.NodeGroupStatus{
		ID:            group.ID,
		TargetSize:    int32(group.TargetSize),
		Registered:    int32(group.Registered),
		Ready:         int32(group.Ready),
		Upcoming:      int32(group.Upcoming),
		BackoffUntil:  statusTime(group.BackoffUntil),
		BackoffReason: truncate(group.BackoffReason, maxReasonLength),
		Problem:       truncate(group.Problem, maxReasonLength),
	}
	if group.Price.Source != "" {
		row.Price, row.PriceSource = group.Price.PerHour.String(), priceSources[group.Price.Source]
	}
	if group.Autoscaled {
		// Set even when 0, so that a group with only a max-size annotation
		// shows the min it is kept at.
		row.MinSize = ptr.To(int32(group.MinSize))
		row.MaxSize = ptr.To(int32(group.MaxSize))
	}
	if minimum := group.ScheduledMinimum; minimum != nil {
		row.ScheduledMinimum = &autoscalingv1alpha1.NodeGroupScheduledMinimum{AnnotatedMinSize: int32(minimum.Annotated)}
		for _, active := range minimum.Active {
			row.ScheduledMinimum.Active = append(row.ScheduledMinimum.Active, scheduledWindow(active))
		}
		if minimum.Next != nil {
			row.ScheduledMinimum.Next = ptr.To(scheduledWindow(*minimum.Next))
		}
	}
	return row
}

func scheduledWindow(w minimums.Active) autoscalingv1alpha1.ScheduledWindow {
	return autoscalingv1alpha1.ScheduledWindow{Name: w.Name, MinSize: int32(w.MinSize),
		Opens: *statusTime(w.Window.Opens), Closes: *statusTime(w.Window.Closes)}
}

// setScheduledMinimumsValid says which windows of spec.scheduledMinimums
// are ignored, and why; the condition appears with the first scheduled
// minimum.
func setScheduledMinimumsValid(ca *autoscalingv1alpha1.ClusterAutoscaler, problems []string) {
	switch {
	case len(problems) > 0:
		setCondition(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition, metav1.ConditionFalse, autoscalingv1alpha1.InvalidScheduledMinimumReason,
			strings.Join(problems, "\n"))
	case len(ca.Spec.ScheduledMinimums) > 0:
		setCondition(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition, metav1.ConditionTrue, autoscalingv1alpha1.ScheduledMinimumsReadReason, "")
	default:
		conditions.Delete(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition)
	}
}

func setCondition(ca *autoscalingv1alpha1.ClusterAutoscaler, conditionType string, status metav1.ConditionStatus, reason, message string) {
	conditions.Set(ca, metav1.Condition{
		Type:    conditionType,
		Status:  status,
		Reason:  reason,
		Message: truncate(message, maxConditionMessageLength),
	})
}

// statusTime is t as the API stores it (seconds), or nil when t is zero.
func statusTime(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	return &metav1.Time{Time: t.Truncate(time.Second)}
}

func truncate(s string, maxLength int) string {
	if len(s) <= maxLength {
		return s
	}
	const ellipsis = "..."
	// Cutting may split a multi-byte character: drop its remains.
	return strings.ToValidUTF8(s[:maxLength-len(ellipsis)], "") + ellipsis
}

// podsLeftMessage says, on the ScalingActive condition, that the last loop
// left pending pods for the next one; "" when it left none.
func podsLeftMessage(left int) string {
	if left == 0 {
		return ""
	}
	return fmt.Sprintf("%d pending pod(s) left for the next loop: more than spec.maxPendingPodsPerLoop were pending", left)
}
