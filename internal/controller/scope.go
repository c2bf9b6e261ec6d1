package controller

import (
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
)

// reconcileScope is what one reconcile learns about a ClusterAutoscaler. Its
// steps fill it in; updateStatus writes the status from it, once, before the
// deferred patch, so that no step writes a condition of its own.
type reconcileScope struct {
	ca *autoscalingv1alpha1.ClusterAutoscaler
	// read is the status as the reconcile read it.
	read *autoscalingv1alpha1.ClusterAutoscalerStatus

	// stopped says why no engine runs, when a step found that none may.
	stopped *stopReason
	// refused is set when another ClusterAutoscaler owns the Cluster: its
	// status, not this one's, tells how the Cluster is autoscaled.
	refused bool
	// otherOwner is the ClusterAutoscaler that owns the Cluster when it is
	// not ca: an Active one beside ca in DryRun mode. Its credentials, not
	// ca's, decide how the Cluster is reached.
	otherOwner *autoscalingv1alpha1.ClusterAutoscaler
	// configErr is why the spec cannot be applied; keptGeneration is the
	// generation a running engine goes on with instead, 0 when none runs.
	configErr      error
	keptGeneration int64
	// engine is the engine that runs for the ClusterAutoscaler after the
	// reconcile, and loop what its last loop saw and did.
	engine *runningEngine
	loop   autoscaler.Status
	// stalled says since when the engine's loop is overdue, when it is.
	stalled string
	// cleanupWait says what a deletion waits for, when it waits.
	cleanupWait string
	// statusElsewhere is set when another manager, the holder of the
	// Cluster's Lease, writes the status: this reconcile leaves it alone.
	statusElsewhere bool
	// actingManager says which manager holds the Cluster's Lease, when
	// this one does: the message of a Ready condition that is True.
	actingManager string
}

// stopReason is why no engine runs for a ClusterAutoscaler: a reason of
// the API and a message for users.
type stopReason struct {
	reason  string
	message string
}

func newReconcileScope(ca *autoscalingv1alpha1.ClusterAutoscaler) *reconcileScope {
	return &reconcileScope{ca: ca, read: ca.Status.DeepCopy()}
}

// stop records that no engine runs, and why.
func (s *reconcileScope) stop(reason, message string) {
	s.stopped = &stopReason{reason: reason, message: message}
}
