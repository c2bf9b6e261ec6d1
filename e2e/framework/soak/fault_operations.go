package soak

import (
	"context"
	"fmt"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
)

// injectFaults makes both sides' fault proxies fail op.Rate of the
// autoscaler's requests, of every kind, for op.For; a later Faults
// operation takes over.
func injectFaults(_ context.Context, env *Env, op Operation) (Result, error) {
	env.faults++
	generation := env.faults
	env.setFaults(faultproxy.Faults{Rate: op.Rate, Hold: 2 * time.Second})
	return Result{Target: fmt.Sprintf("%d fault proxies", len(env.proxies())), Undo: &Undo{After: op.For, Name: "faults stopped", Do: func(_ context.Context, env *Env) error {
		if env.faults == generation {
			env.setFaults(faultproxy.Faults{})
		}
		return nil
	}}}, nil
}

func (env *Env) setFaults(faults faultproxy.Faults) {
	for _, proxy := range env.proxies() {
		proxy.SetFaults(faults)
	}
}

// StopFaults stops the faults of every proxy.
func (env *Env) StopFaults() {
	env.setFaults(faultproxy.Faults{})
}

// restartManager kills the manager, as a crash would, once it checked
// that it never panicked, and starts it again at once.
func restartManager(ctx context.Context, env *Env, op Operation) (Result, error) {
	manager := env.Manager()
	if err := framework.ManagerPanic(manager); err != nil {
		return Result{}, &ViolationError{Err: err}
	}
	select {
	case <-manager.Exited():
		return Result{}, &ViolationError{Err: fmt.Errorf("the manager %s exited: %w", manager.Name(), manager.Err())}
	default:
	}
	if err := manager.Kill(); err != nil {
		return Result{}, err
	}
	env.Managers.Ended(manager, time.Now(), true)
	select {
	case <-manager.Exited():
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	name := fmt.Sprintf("capi-autoscaler-soak-%d", op.Seq)
	return Result{Target: fmt.Sprintf("manager %s, started again as %s", manager.Name(), name)}, env.StartManager(ctx, name)
}
