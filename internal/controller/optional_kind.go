package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// optionalKindRetry is how long an engine goes without a kind of the
// workload cluster after it could not be listed: its CRD is not installed
// there, or the role there does not allow reading it.
const optionalKindRetry = 5 * time.Minute

// optionalKind lists, from the workload cluster's cache, a kind the
// cluster may not have or may not let the manager read: CapacityBuffers
// and ProvisioningRequests. Its first list is a live one of one object:
// the cache's informer for a kind it cannot list would wait for a sync
// that never comes, holding the loop, and retry in the background for as
// long as the cache lives. A failed list is not tried again for
// optionalKindRetry.
type optionalKind struct {
	// kind names the kind in errors, plural.
	kind   string
	cached client.Reader
	live   func(context.Context) (client.Client, error)
	clock  clock.PassiveClock

	// unavailableUntil: the last list failed (unavailable says why, nil
	// when the CRD is not installed), and is not tried again before.
	unavailableUntil time.Time
	unavailable      error
	// readable is set once a live list succeeded: the cache may list them.
	readable bool
}

// list fills list and returns true; or returns false, with no error when
// the workload cluster does not have the kind, which is the usual case.
func (k *optionalKind) list(ctx context.Context, list client.ObjectList) (bool, error) {
	now := k.clock.Now()
	if now.Before(k.unavailableUntil) {
		return false, k.unavailable
	}
	err := k.probe(ctx, list)
	if err == nil {
		k.readable = true
		err = k.cached.List(ctx, list)
	}
	if err == nil {
		return true, nil
	}
	k.unavailableUntil = now.Add(optionalKindRetry)
	if meta.IsNoMatchError(err) {
		k.unavailable = nil
		return false, nil
	}
	k.unavailable = fmt.Errorf("listing %s (tried again after %s): %w", k.kind, k.unavailableUntil.Format(time.RFC3339), err)
	return false, k.unavailable
}

// probe lists one object live until one such list succeeded.
func (k *optionalKind) probe(ctx context.Context, list client.ObjectList) error {
	if k.readable {
		return nil
	}
	c, err := k.live(ctx)
	if err != nil {
		return err
	}
	return c.List(ctx, list.DeepCopyObject().(client.ObjectList), client.Limit(1))
}
