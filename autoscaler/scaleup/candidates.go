package scaleup

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// Candidates are the pending pods that may trigger a scale-up: the
// scheduler found no node for them (PodScheduled=False, reason
// Unschedulable), their priority is at least the cutoff, they are older than
// the delay and not being deleted.
func Candidates(pending []*corev1.Pod, priorityCutoff int32, newPodDelay time.Duration, now time.Time) []*corev1.Pod {
	var candidates []*corev1.Pod
	for _, pod := range pending {
		if pod.DeletionTimestamp != nil || !IsUnschedulable(pod.Status.Conditions) ||
			corev1helpers.PodPriority(pod) < priorityCutoff ||
			now.Sub(pod.CreationTimestamp.Time) < newPodDelay {
			continue
		}
		candidates = append(candidates, pod)
	}
	return candidates
}

// IsUnschedulable tells from a pod's conditions whether kube-scheduler
// reported that the pod fits no node.
func IsUnschedulable(conditions []corev1.PodCondition) bool {
	for _, condition := range conditions {
		if condition.Type == corev1.PodScheduled {
			return condition.Status == corev1.ConditionFalse && condition.Reason == corev1.PodReasonUnschedulable
		}
	}
	return false
}
