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

// StopFaults stops the faults of every proxy, and ends the outage of the
// workload API server.
func (env *Env) StopFaults() {
	env.setFaults(faultproxy.Faults{})
	env.Stack.Workload.Proxy.SetOutage(faultproxy.Outage{})
}

// workloadUnreachable makes the workload API server unreachable for
// op.For to the requests the autoscaler makes with its workload
// credentials, those of framework.WorkloadServiceAccount: refused, or
// black-holed. They go through the workload cluster's fault proxy. In the
// SeparateWorkload topology it stands in front of the workload API server
// and carries nothing else of the autoscaler's. Self-hosted, it is the one
// proxy in front of the one API server, and "the workload side" is the
// engine's connection to the workload cluster: the manager's own requests
// (leader election, Machines, its ClusterAutoscalers), made as its own
// ServiceAccount, still get through, as when a management cluster loses
// its way to a workload cluster. A later WorkloadUnreachable takes over.
func workloadUnreachable(_ context.Context, env *Env, op Operation) (Result, error) {
	env.outages++
	generation := env.outages
	mode := faultproxy.Refuse
	if op.BlackHole {
		mode = faultproxy.BlackHole
	}
	sa := framework.WorkloadServiceAccount
	proxy := env.Stack.Workload.Proxy
	proxy.SetOutage(faultproxy.Outage{Mode: mode, Of: faultproxy.ServiceAccountCaller(sa.Namespace, sa.Name)})
	return Result{Target: fmt.Sprintf("the fault proxy of %s, for ServiceAccount %s", env.Stack.Workload.Name, sa), Undo: &Undo{
		After: op.For, Name: "workload API server reachable",
		Do: func(context.Context, *Env) error {
			if env.outages == generation {
				proxy.SetOutage(faultproxy.Outage{})
			}
			return nil
		},
	}}, nil
}

// restartManager kills the manager, as a crash would, once it checked
// that it never panicked, and starts it again at once.
func restartManager(ctx context.Context, env *Env, op Operation) (Result, error) {
	env.lifecycle.Lock()
	defer env.lifecycle.Unlock()
	env.restartCrashedLocked(ctx)
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
