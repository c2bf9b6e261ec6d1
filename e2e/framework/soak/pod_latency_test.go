package soak

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodWaitCountsFromCreation checks that a pod the watch first sees
// Unschedulable some time after its creation, as after the scheduler's
// retries or a slow watch, is counted from its creation.
func TestPodWaitCountsFromCreation(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	latencies := newPodLatencies(func() time.Time { return now })
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		UID: "a", Labels: map[string]string{FitsLabel: "true"}, CreationTimestamp: metav1.NewTime(start),
	}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}

	now = start.Add(20 * time.Second)
	latencies.see(pod.DeepCopy())
	now = start.Add(30 * time.Second)
	bound := pod.DeepCopy()
	bound.Spec.NodeName = "node"
	latencies.see(bound)
	latencies.see(bound)

	if waited := latencies.Waited(); len(waited) != 1 || waited[0] != 30*time.Second {
		t.Fatalf("waited %v, want [30s] from the pod's creation", waited)
	}
}
