package controller

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
)

const (
	// maxDecisionPods is how many pods a decision in the status names.
	maxDecisionPods = 20
	// maxDecisionEntries is how many groups or nodes a decision in the
	// status names.
	maxDecisionEntries = 100
	// maxAnswerMessage is how long the message of an answer in the status
	// is.
	maxAnswerMessage = 10240
)

// publishDecisions adds the decisions of a DryRun engine that the status
// does not have yet to status.dryRunDecisions, and tells them in
// WouldScaleUp, WouldScaleDown and WouldAnswerProvisioningRequest events,
// one per kind; in Active mode it empties the list. The engine keeps its
// last decisions, not only those of its last loop, so that none is lost
// when reconciles skip loops; one already in the status is not added
// again, so a status write that failed loses none either.
func (r *ClusterAutoscalerReconciler) publishDecisions(ca *autoscalingv1alpha1.ClusterAutoscaler, status autoscaler.Status) {
	if !status.DryRun {
		ca.Status.DryRunDecisions = nil
		return
	}
	published := ca.Status.DryRunDecisions
	var kinds []autoscaler.DecisionKind
	told := map[autoscaler.DecisionKind][]string{}
	for _, decision := range status.Decisions {
		entry := decisionEntry(decision)
		if slices.ContainsFunc(published, func(p autoscalingv1alpha1.DryRunDecision) bool { return equality.Semantic.DeepEqual(p, entry) }) {
			continue
		}
		published = append(published, entry)
		if _, ok := told[decision.Kind]; !ok {
			kinds = append(kinds, decision.Kind)
		}
		told[decision.Kind] = append(told[decision.Kind], decision.Message())
	}
	// The new decisions of a kind are told together, in one event: the
	// recorder combines more than 10 events of a reason on an object
	// within 10 minutes into one, of which only the last message shows.
	for _, kind := range kinds {
		r.Recorder.Eventf(ca, corev1.EventTypeNormal, decisionReasons[kind], "%s", strings.Join(told[kind], "; "))
	}
	ca.Status.DryRunDecisions = autoscaler.KeepRecentDecisions(published, func(d autoscalingv1alpha1.DryRunDecision) bool {
		return d.Kind == autoscalingv1alpha1.AnswerDecision
	})
}

// decisionReasons are the reasons of the events that tell the decisions,
// by kind.
var decisionReasons = map[autoscaler.DecisionKind]string{
	autoscaler.ScaleUpDecision:   autoscalingv1alpha1.WouldScaleUpReason,
	autoscaler.ScaleDownDecision: autoscalingv1alpha1.WouldScaleDownReason,
	autoscaler.AnswerDecision:    autoscalingv1alpha1.WouldAnswerProvisioningRequestReason,
	autoscaler.ReseatDecision:    autoscalingv1alpha1.WouldReseatReason,
}

// decisionEntry is a decision as the status keeps it.
func decisionEntry(decision autoscaler.Decision) autoscalingv1alpha1.DryRunDecision {
	entry := autoscalingv1alpha1.DryRunDecision{
		Time:                  *statusTime(decision.Time),
		Kind:                  autoscalingv1alpha1.DecisionKind(decision.Kind),
		Nodes:                 decision.Nodes[:min(len(decision.Nodes), maxDecisionEntries)],
		PodCount:              int32(len(decision.Pods)),
		OldestPodCreationTime: statusTime(decision.OldestPod),
		ProvisioningRequest:   decision.Request,
		ScheduledMinimum:      truncate(decision.ScheduledMinimum, maxReasonLength),
	}
	if answer := decision.Answer; answer != nil {
		entry.Answer = &autoscalingv1alpha1.ProvisioningRequestAnswer{
			ConditionType: answer.Type, Status: answer.Status, Reason: answer.Reason,
			Message: truncate(answer.Message, maxAnswerMessage),
		}
	}
	for _, group := range decision.Groups[:min(len(decision.Groups), maxDecisionEntries)] {
		entry.NodeGroups = append(entry.NodeGroups, autoscalingv1alpha1.NodeGroupDelta{ID: group.ID, Delta: int32(group.Delta)})
	}
	for _, pod := range decision.Pods[:min(len(decision.Pods), maxDecisionPods)] {
		entry.Pods = append(entry.Pods, pod.String())
	}
	return entry
}

// dryRunMessage is the message of ScalingActive in DryRun mode.
func dryRunMessage(status autoscaler.Status) string {
	var message strings.Builder
	message.WriteString("DryRun mode: every loop plans, and what it would do is published in status.dryRunDecisions and in events; nothing in the cluster is changed")
	if status.OtherAutoscaler != "" {
		fmt.Fprintf(&message, ". Another cluster autoscaler acts on the cluster: %s", status.OtherAutoscaler)
	}
	return message.String()
}
