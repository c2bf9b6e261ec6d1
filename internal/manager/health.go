package manager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// setupChecks serves the probes: /healthz fails while engines run and the
// loops of all of them are overdue (CheckEnginesProgress), /readyz until
// the caches of the management cluster have synced.
func setupChecks(mgr ctrl.Manager, reconciler *controller.ClusterAutoscalerReconciler) error {
	if err := mgr.AddHealthzCheck("engines", reconciler.CheckEnginesProgress); err != nil {
		return fmt.Errorf("adding the liveness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	return nil
}

// cacheSyncCheckTimeout bounds a readiness check within the probe's
// default timeout of one second; a synced cache answers at once.
const cacheSyncCheckTimeout = 500 * time.Millisecond

// cachesSynced is ready once the caches of the management cluster have
// started and synced: every replica has them, the leader and those waiting
// for the Lease, so that a rollout replaces a replica only by one that can
// take over at once. The caches of workload clusters are left out: one
// unreachable cluster is that ClusterAutoscaler's condition, not the
// manager's.
func cachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), cacheSyncCheckTimeout)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the caches of the management cluster have not synced")
		}
		return nil
	}
}
