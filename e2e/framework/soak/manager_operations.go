package soak

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"

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
	env.lifecycle.Lock()
	defer env.lifecycle.Unlock()
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
		env.lifecycle.Lock()
		defer env.lifecycle.Unlock()
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
	env.lifecycle.Lock()
	defer env.lifecycle.Unlock()
	env.restartCrashedLocked(ctx)
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

// crashAtWrite arms a crash and lets the soak go on: the manager that
// acts on the Cluster is killed, from the fault proxies' goroutine, right
// after the API server accepted the op.Nth write of op.Point they see
// from now, as a crash right there would, if it comes within op.For; Run
// starts the suite's manager again at once. The kill goes to the history
// when it happens, with the write; the undo disarms it, and finds nothing
// to act on when no kill came.
func crashAtWrite(_ context.Context, env *Env, op Operation) (Result, error) {
	trigger := &crashTrigger{point: op.Point, nth: op.Nth, fire: func(r faultproxy.Request) { env.crashAt(op, r) }}
	env.arm(trigger)
	return Result{Target: fmt.Sprintf("armed for %s", op.For), Undo: &Undo{After: op.For, Name: "crash disarmed", Do: func(context.Context, *Env) error {
		env.disarm(trigger)
		if seen, fired := trigger.disarm(); !fired {
			return &NothingToActOn{Reason: fmt.Sprintf("%d %s writes within %s", seen, op.Point, op.For)}
		}
		return nil
	}}}, nil
}

// What an armed crash records when it fires, and when Run starts the
// suite's manager again after it.
const (
	crashFired   = "crash"
	restartFired = "restart after the crash"
)

// crashTrigger counts the writes of a point the API server accepted and
// fires once, at the nth, unless disarmed first.
type crashTrigger struct {
	point CrashPoint
	nth   int
	// fire is called from the request's goroutine, with the write.
	fire func(faultproxy.Request)

	mu       sync.Mutex
	seen     int
	disarmed bool
}

func (t *crashTrigger) observe(r faultproxy.Request) {
	if !t.point.matches(r) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.disarmed {
		return
	}
	t.seen++
	if t.seen == t.nth {
		t.disarmed = true
		t.fire(r)
	}
}

// disarm stops the trigger, once a fire under way is over, and says how
// many writes it saw and whether it fired.
func (t *crashTrigger) disarm() (seen int, fired bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.disarmed = true
	return t.seen, t.seen >= t.nth
}

// arm has the trigger observe the fault proxies' requests until disarm.
func (env *Env) arm(t *crashTrigger) {
	stop := env.observe(t.observe)
	env.triggersMu.Lock()
	defer env.triggersMu.Unlock()
	if env.triggers == nil {
		env.triggers = map[*crashTrigger]func(){}
	}
	env.triggers[t] = stop
}

// disarm stops the trigger observing, and disarms it.
func (env *Env) disarm(t *crashTrigger) {
	env.triggersMu.Lock()
	stop := env.triggers[t]
	delete(env.triggers, t)
	env.triggersMu.Unlock()
	if stop != nil {
		stop()
	}
	t.disarm()
}

// disarmAll disarms every armed crash: none kills a manager once it
// returns.
func (env *Env) disarmAll() {
	env.triggersMu.Lock()
	triggers := make([]*crashTrigger, 0, len(env.triggers))
	for t := range env.triggers {
		triggers = append(triggers, t)
	}
	env.triggersMu.Unlock()
	for _, t := range triggers {
		env.disarm(t)
	}
}

// crashAt kills the manager that holds the Cluster's Lease, the writer of
// r, and records it in the history; the suite's is left for
// restartCrashed, which Run is woken to call.
func (env *Env) crashAt(op Operation, r faultproxy.Request) {
	env.lifecycle.Lock()
	defer env.lifecycle.Unlock()
	entry := Applied{At: time.Now(), Op: op, Fired: crashFired}
	write := fmt.Sprintf("%s write #%d (%s %s)", op.Point, op.Nth, r.Rule(), klog.KRef(r.Namespace, r.Name))
	holder, err := env.Managers.Holder()
	switch {
	case err != nil:
		entry.Err = err
	case holder == nil:
		entry.Result.Skipped = "no manager says it holds the Lease at " + write
	default:
		entry.Err = holder.Kill()
		entry.Result.Target = fmt.Sprintf("manager %s killed after %s", holder.Name(), write)
	}
	if entry.Err == nil && holder != nil {
		env.Managers.Ended(holder, entry.At, true)
		if holder == env.Manager() {
			env.crashed = &crashedManager{op: op, process: holder}
		}
	}
	if env.history != nil {
		env.history.Record(entry)
	}
	if env.crashes != nil {
		select {
		case env.crashes <- struct{}{}:
		default:
		}
	}
}

// crashedManager is the suite's manager an armed crash killed, until
// restartCrashed starts it again.
type crashedManager struct {
	op      Operation
	process *localstack.Process
}

// restartCrashed starts the suite's manager again if an armed crash killed
// it, and records it in the history.
func (env *Env) restartCrashed(ctx context.Context) {
	env.lifecycle.Lock()
	defer env.lifecycle.Unlock()
	env.restartCrashedLocked(ctx)
}

func (env *Env) restartCrashedLocked(ctx context.Context) {
	crashed := env.crashed
	if crashed == nil {
		return
	}
	env.crashed = nil
	name := fmt.Sprintf("capi-autoscaler-soak-%d", crashed.op.Seq)
	entry := Applied{At: time.Now(), Op: crashed.op, Fired: restartFired, Result: Result{Target: fmt.Sprintf("manager %s started again as %s", crashed.process.Name(), name)}}
	select {
	case <-crashed.process.Exited():
		entry.Err = env.StartManager(ctx, name)
	case <-ctx.Done():
		entry.Err = ctx.Err()
	}
	if env.history != nil {
		env.history.Record(entry)
	}
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

// StopObserving disarms the armed crashes, stops observing the fault
// proxies' requests, and stops the second manager if it runs, at the end
// of the spec.
func (env *Env) StopObserving() error {
	env.disarmAll()
	for _, proxy := range env.proxies() {
		proxy.Observe(nil)
	}
	if second := env.runningSecond(); second != nil {
		return second.Stop()
	}
	return nil
}
