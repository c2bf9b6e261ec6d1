package controller

import (
	"fmt"
	"net/http"
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
