package controller

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// CheckEnginesProgress is the manager's liveness check, a healthz.Checker.
// It fails when engines run and the loop of every one of them is overdue
// (autoscaler.Engine.Stalled): no cluster is autoscaled any more, a stall
// that only a restart of the manager can end, such as a deadlock or a
// controller that no longer takes the engines' statuses.
//
// It passes while any running engine's loops finish, whether they succeed
// or fail, and when no engine runs: no ClusterAutoscaler, a replica that
// is not the leader, or engines that panicked and wait for their
// successors. An unreachable cluster or a panicking engine is the
// condition of one ClusterAutoscaler; restarting the manager for it would
// give back the drains of every other cluster.
func (r *ClusterAutoscalerReconciler) CheckEnginesProgress(*http.Request) error {
	running, stalled := 0, 0
	for _, e := range r.engines.list() {
		if e.crashed() != nil {
			continue
		}
		running++
		if e.engine.Stalled() {
			stalled++
		}
	}
	if running > 0 && stalled == running {
		return fmt.Errorf("the loops of all %d running engines are overdue", running)
	}
	return nil
}

// watchLoopProgress reports, in the scope, an engine whose loop is overdue
// (autoscaler.Engine.Stalled, the rule of CheckEnginesProgress too), with
// one event when it becomes so: one engine stuck among others that loop is
// its ClusterAutoscaler's condition, not the manager's liveness. It
// returns when to look again: when the loop is due, as a loop that never
// finishes sends no status to reconcile on; none while it is overdue,
// since the loop that finishes at last does.
func (r *ClusterAutoscalerReconciler) watchLoopProgress(ctx context.Context, s *reconcileScope) time.Duration {
	engine := s.engine.engine
	deadline := engine.LoopDeadline()
	if !engine.Stalled() {
		return deadline.Sub(r.Clock.Now()) + loopProgressMargin
	}
	ca := s.ca
	s.stalled = fmt.Sprintf("The autoscaling loop of Cluster %s was due to finish by %s and has not: it is stuck where no timeout reaches it, and nothing is scaled until it finishes",
		clusterKey(ca), deadline.UTC().Format(time.RFC3339))
	if ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition); ready == nil || ready.Reason != autoscalingv1alpha1.LoopStalledReason {
		ctrl.LoggerFrom(ctx).Info("The autoscaling loop is overdue", "dueBy", deadline)
		r.Recorder.Eventf(ca, corev1.EventTypeWarning, autoscalingv1alpha1.LoopStalledReason, "%s", s.stalled)
	}
	return 0
}

// loopProgressMargin is how long after a loop was due its ClusterAutoscaler
// is looked at again: past the deadline, not on it.
const loopProgressMargin = time.Second
