package soak

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

func init() {
	appliers[SecondManager] = secondManager
	appliers[KillLeader] = killLeader
	appliers[CrashAtWrite] = crashAtWrite
}

// secondManager starts a second manager, the suite's binary with its
// arguments, for op.For: both serve the soak's ClusterAutoscalers, and
// only the holder of the Cluster's Lease may act. A second manager that
// runs already is left to its own end.
func secondManager(ctx context.Context, env *Env, op Operation) (Result, error) {
	if second := env.runningSecond(); second != nil {
		return Result{Skipped: "the second manager " + second.Name() + " runs already"}, nil
	}
	second, err := env.startSecond(ctx, op)
	if err != nil {
		return Result{}, err
	}
	return Result{Target: "manager " + second.Name(), Undo: env.stopSecond(op, second)}, nil
}

// startSecond starts a second manager.
func (env *Env) startSecond(ctx context.Context, op Operation) (*localstack.Process, error) {
	second, err := env.Stack.StartProcess(ctx, fmt.Sprintf("capi-autoscaler-soak-second-%d", op.Seq), env.Manager().Binary(), env.ManagerArgs...)
	if err != nil {
		return nil, err
	}
	env.Managers.Add(second)
	env.second = second
	return second, nil
}

// stopSecond stops the second manager after op.For, as a rollout of its
// Deployment would (SIGTERM): it stops its engines and gives its Leases
// back. One already killed is left alone.
func (env *Env) stopSecond(op Operation, second *localstack.Process) *Undo {
	return &Undo{After: op.For, Name: "manager " + second.Name() + " stopped", Do: func(context.Context, *Env) error {
		if env.second == second {
			env.second = nil
		}
		select {
		case <-second.Exited():
			return nil
		default:
		}
		err := second.Stop()
		env.Managers.Ended(second, time.Now(), false)
		return err
	}}
}

// runningSecond is the second manager, while it runs.
func (env *Env) runningSecond() *localstack.Process {
	if env.second == nil {
		return nil
	}
	select {
	case <-env.second.Exited():
		return nil
	default:
		return env.second
	}
}

// killLeader kills (SIGKILL) the manager that holds the Cluster's Lease
// while a second one runs, starting a second one for op.For first when
// none does: the other must take the Lease over once it expires. The
// suite's manager, killed, is started again at once, as RestartManager
// does.
func killLeader(ctx context.Context, env *Env, op Operation) (Result, error) {
	result := Result{}
	if env.runningSecond() == nil {
		second, err := env.startSecond(ctx, op)
		if err != nil {
			return Result{}, err
		}
		result.Target = "manager " + second.Name() + " started, "
		result.Undo = env.stopSecond(op, second)
	}
	holder, err := env.Managers.Holder()
	if err != nil {
		return result, err
	}
	if holder == nil {
		result.Skipped = "no manager says it holds the Lease of the Cluster"
		return result, nil
	}
	killed, err := env.kill(ctx, holder, fmt.Sprintf("capi-autoscaler-soak-%d", op.Seq))
	result.Target += killed
	return result, err
}

// kill kills a manager (SIGKILL), once it checked that it had not
// exited, and starts the suite's again at once under the name restart.
// It says what it did.
func (env *Env) kill(ctx context.Context, manager *localstack.Process, restart string) (string, error) {
	select {
	case <-manager.Exited():
		return "", &ViolationError{Err: fmt.Errorf("the manager %s exited: %w", manager.Name(), manager.Err())}
	default:
	}
	if err := manager.Kill(); err != nil {
		return "", err
	}
	env.Managers.Ended(manager, time.Now(), true)
	return env.restartIfSuite(ctx, manager, restart)
}

// restartIfSuite starts the suite's manager again under the name restart
// when it is the one killed; a second one is not.
func (env *Env) restartIfSuite(ctx context.Context, killed *localstack.Process, restart string) (string, error) {
	if killed != env.Manager() {
		return "manager " + killed.Name() + " killed", nil
	}
	return fmt.Sprintf("manager %s killed, started again as %s", killed.Name(), restart), env.StartManager(ctx, restart)
}

// crashAtWrite kills the manager that acts on the Cluster right after
// the API server accepted the op.Nth write of op.Point the fault proxies
// see from now, as a crash right there would, and starts the suite's
// manager again at once. It waits for that write up to op.For; none is
// nothing to act on.
func crashAtWrite(ctx context.Context, env *Env, op Operation) (Result, error) {
	var (
		mu      sync.Mutex
		seen    int
		stopped bool
		killed  *localstack.Process
		err     error
	)
	crashed := make(chan struct{})
	stop := env.observe(func(r faultproxy.Request) {
		if !op.Point.matches(r) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		seen++
		if seen != op.Nth {
			return
		}
		defer close(crashed)
		// The writer is the manager that acts, which holds the Lease.
		holder, holderErr := env.Managers.Holder()
		if err = holderErr; err != nil || holder == nil {
			return
		}
		if err = holder.Kill(); err == nil {
			env.Managers.Ended(holder, time.Now(), true)
			killed = holder
		}
	})
	timer := time.NewTimer(op.For)
	defer timer.Stop()
	select {
	case <-crashed:
	case <-timer.C:
	case <-ctx.Done():
	}
	stop()
	// No kill from now on: one under way is over once the lock is taken.
	mu.Lock()
	stopped = true
	mu.Unlock()
	switch {
	case err != nil:
		return Result{}, err
	case killed == nil && seen >= op.Nth:
		return Result{Skipped: fmt.Sprintf("no manager says it holds the Lease at %s write #%d", op.Point, op.Nth)}, nil
	case killed == nil:
		return Result{Skipped: fmt.Sprintf("%d %s writes within %s", seen, op.Point, op.For)}, nil
	}
	restarted, err := env.restartIfSuite(ctx, killed, fmt.Sprintf("capi-autoscaler-soak-%d", op.Seq))
	return Result{Target: fmt.Sprintf("after %s write #%d, %s", op.Point, op.Nth, restarted)}, err
}

// matches tells whether the API server accepted a write of the point's
// kind.
func (p CrashPoint) matches(r faultproxy.Request) bool {
	if r.Status < http.StatusOK || r.Status >= http.StatusMultipleChoices {
		return false
	}
	write := r.Verb == "update" || r.Verb == "patch"
	switch p {
	case CrashAfterScale:
		return write && r.Resource == "machinedeployments" && r.Subresource == "scale"
	case CrashAfterNodeWrite:
		return write && r.APIGroup == "" && r.Resource == "nodes" && r.Subresource == ""
	case CrashAfterEviction:
		return r.Verb == "create" && r.APIGroup == "" && r.Resource == "pods" && r.Subresource == "eviction"
	case CrashAfterMark:
		return write && r.Resource == "machines" && r.Subresource == ""
	}
	return false
}

// requestObservers pass each request the fault proxies answered to every
// observer: a proxy takes one.
type requestObservers struct {
	mu        sync.Mutex
	installed bool
	next      int
	observers map[int]func(faultproxy.Request)
}

// observe calls fn with each request the fault proxies answer, from the
// requests' goroutines, until stop is called.
func (env *Env) observe(fn func(faultproxy.Request)) (stop func()) {
	o := &env.requests
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.installed {
		o.installed = true
		o.observers = map[int]func(faultproxy.Request){}
		for _, proxy := range env.proxies() {
			proxy.Observe(o.dispatch)
		}
	}
	o.next++
	id := o.next
	o.observers[id] = fn
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		delete(o.observers, id)
	}
}

func (o *requestObservers) dispatch(r faultproxy.Request) {
	o.mu.Lock()
	observers := make([]func(faultproxy.Request), 0, len(o.observers))
	for _, fn := range o.observers {
		observers = append(observers, fn)
	}
	o.mu.Unlock()
	for _, fn := range observers {
		fn(r)
	}
}

// StopObserving stops observing the fault proxies' requests, and stops
// the second manager if it runs, at the end of the spec.
func (env *Env) StopObserving() error {
	for _, proxy := range env.proxies() {
		proxy.Observe(nil)
	}
	if second := env.runningSecond(); second != nil {
		return second.Stop()
	}
	return nil
}
