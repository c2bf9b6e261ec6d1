// Package autoscaler is the engine. Every loop reads one cluster into a
// snapshot (nodes and pods, the objects the scheduling predicates need,
// Dynamic Resource Allocation's among them, the virtual pods of capacity
// buffers, and the ProvisioningRequests the engine serves), then plans:
// it handles failed and slow provisioning, scales node groups up for
// unschedulable pods and buffers and down for underutilized nodes, and
// answers provisioning requests (check-capacity, and atomic scale-ups with
// their rollback). The steps decide; one actuation carries the decisions
// out (Active) or records them (DryRun), and the loop publishes what it
// saw and did. It knows nothing of Cluster API: it sees node groups
// (nodegroups.Provider), nodes and pods.
//
// engine.go runs the loops; steps.go is one loop, in order; read.go
// reads; plan_scaleup.go, plan_scaledown.go, capacity.go, requests.go and
// rollback.go plan, and atomic_scaleups.go and increases.go keep what the
// plans need to remember; actuation.go (Active, with Active's rollback in
// rollback.go) and dryrun.go (DryRun) act; status.go, told.go,
// explanation.go and metrics.go publish.
package autoscaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Options are what an Engine needs; Metrics, GroupRecorder, Clock and
// OnStatus are optional.
type Options struct {
	// ClusterName labels metrics and logs, e.g. "namespace/name".
	ClusterName string
	// Settings are the configuration the engine starts with
	// (NewSettings, with the engine's Clock).
	Settings *Settings
	// NodeGroups discovers the node groups of the cluster.
	NodeGroups nodegroups.Provider
	// Owner is the ClusterAutoscaler the engine acts for: its taints and
	// cordons say so, it takes back only its own (and what a
	// ClusterAutoscaler that no longer exists left), and the taints of
	// another that exists mean that another engine acts. Its UID is
	// required.
	Owner ownership.Owner
	// Cluster reads nodes, pods, DaemonSets, PodDisruptionBudgets,
	// namespaces, the storage objects (PersistentVolumeClaims,
	// PersistentVolumes, StorageClasses, CSINodes) and the metadata of the
	// controllers of scaledown.ReplicatingControllers of the cluster,
	// usually from a cache; the objects are treated as read-only. When it
	// is also a PodLister, pods are read through ListPods.
	Cluster client.Reader
	// Clientset changes the cluster in Active mode: it taints nodes and
	// evicts pods on scale-down, and nominates pods to the nodes planned
	// for them.
	Clientset kubernetes.Interface
	// Recorder records events on the cluster's pods and nodes.
	Recorder record.EventRecorder
	// GroupRecorder, when set, records events on the objects behind node
	// groups, such as their MachineDeployments.
	GroupRecorder NodeGroupEventRecorder
	// Metrics receives the loop's metrics; nil records none.
	Metrics *Metrics
	// Clock defaults to the real clock.
	Clock clock.WithTicker
	// OnStatus, when set, is called with the status after every loop.
	OnStatus func(Status)
	// LoopTimeout bounds one loop; DefaultLoopTimeout when zero.
	LoopTimeout time.Duration
	// OptionalReadTimeout bounds each of the reads a loop goes on without:
	// those of the storage objects and of the controllers' metadata;
	// DefaultOptionalReadTimeout when zero.
	OptionalReadTimeout time.Duration
	// Buffers, when set, lists the capacity buffers the engine keeps room
	// for, within OptionalReadTimeout; a loop whose read fails goes on
	// without them. In Active mode the engine has it write what they
	// resolved to in their status.
	Buffers buffers.Lister
	// Requests, when set, lists the ProvisioningRequests the engine
	// answers, and in Active mode records its answers.
	Requests provisioning.Lister
	// AtomicScaleUps are the atomic scale-ups in progress that an earlier
	// engine of the cluster recorded in the management cluster
	// (Status.AtomicScaleUps), by request UID: with the engine's own,
	// the only records a rollback trusts to name what to remove. What a
	// ProvisioningRequest's status in the workload cluster says, whoever
	// may write it there, names nothing.
	AtomicScaleUps map[types.UID]provisioning.ScaleUp
}

// DefaultLoopTimeout bounds a loop. Loops take milliseconds to a second: a
// loop that takes minutes waits on a read that may never return, such as an
// informer that cannot sync because RBAC forbids its list. Failing it shows
// the cause on the status, where waiting would stop autoscaling silently.
const DefaultLoopTimeout = 2 * time.Minute

// DefaultOptionalReadTimeout bounds the reads of the storage objects, and
// those of the controllers' metadata. The loop goes on without them when
// they time out: only pods with claims need the first, only the pods
// scale-down would evict the second, and a cache's informer that RBAC
// keeps from syncing would otherwise hold every loop until LoopTimeout,
// stopping all autoscaling.
const DefaultOptionalReadTimeout = 10 * time.Second

// PodLister lists the pods of a cluster as pointers to the objects of a
// cache, which the engine does not modify. A cluster has tens of pods per
// node: client.Reader's List copies every one into a PodList in every loop,
// which at 30,000 pods is 35 MB of garbage per loop, and a cache of
// snapshot.Pods holds a sixth of what a cache of corev1.Pods holds.
type PodLister interface {
	ListPods(ctx context.Context) ([]*snapshot.Pod, error)
}

// NodeGroupEventRecorder records an event on the object behind a node group.
type NodeGroupEventRecorder interface {
	Event(groupID, eventType, reason, message string)
}

// PanicError is what Run returns when a loop panicked. The engine is done
// for: its state may be half updated, so a new one takes its place.
type PanicError struct {
	// Value is what the loop panicked with; its stack is in the log.
	Value any
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("the autoscaling loop panicked: %v", e.Value)
}

// Engine autoscales one cluster. Run it with Run; Trigger asks for an early
// loop. It is safe to call Trigger, PodUpdated, Apply, Config, Status and
// Stalled concurrently with Run.
type Engine struct {
	opts    Options
	clock   clock.WithTicker
	trigger chan struct{}
	loops   atomic.Uint64
	// forgetClusterAutoscalers forgets which ClusterAutoscalers the
	// owner found (ownership.Owner.Remembering), as each loop starts.
	forgetClusterAutoscalers func()
	// loopDeadline is when, in Unix nanoseconds, the next loop of Run must
	// have finished at the latest (see Stalled).
	loopDeadline atomic.Int64

	mu       sync.Mutex
	settings *Settings
	status   Status

	// Only the loop touches these. lasting outlives a configuration; steps
	// are built anew for each.
	lasting lasting
	steps   *steps
}

// New returns an Engine for one cluster.
func New(opts Options) (*Engine, error) {
	if opts.Settings == nil || opts.NodeGroups == nil || opts.Cluster == nil || opts.Clientset == nil || opts.Recorder == nil {
		return nil, errors.New("settings, node groups, a cluster reader, a clientset and an event recorder are required")
	}
	if opts.Owner.UID == "" {
		return nil, errors.New("the UID of the ClusterAutoscaler the engine acts for is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.LoopTimeout <= 0 {
		opts.LoopTimeout = DefaultLoopTimeout
	}
	if opts.OptionalReadTimeout <= 0 {
		opts.OptionalReadTimeout = DefaultOptionalReadTimeout
	}
	// A loop asks whose marks each node carries: every other
	// ClusterAutoscaler is looked up once a loop, not once a node.
	owner, forgetClusterAutoscalers := opts.Owner.Remembering()
	opts.Owner = owner
	settings := opts.Settings
	actuator, err := scaledown.NewActuator(opts.Clientset, opts.Recorder, opts.Owner, settings.actuator)
	if err != nil {
		return nil, fmt.Errorf("invalid scale-down configuration: %w", err)
	}
	e := &Engine{
		opts:                     opts,
		clock:                    opts.Clock,
		trigger:                  make(chan struct{}, 1),
		forgetClusterAutoscalers: forgetClusterAutoscalers,
		settings:                 settings,
		lasting: lasting{
			state:    clusterstate.NewRegistry(settings.clusterstate),
			told:     newTold(),
			planner:  scaledown.NewPlanner(opts.Clock),
			actuator: actuator,

			renominations: newRenominations(opts.Clientset, opts.Cluster),
			displacements: displacements{},
		},
	}
	e.lasting.atomic.restore(opts.AtomicScaleUps)
	e.configure(settings)
	e.expectLoopWithin(opts.LoopTimeout)
	opts.Metrics.start(opts.ClusterName)
	return e, nil
}

// Apply applies new settings from the next loop on; the state of the
// cluster (backoffs, unneeded times, drains in progress) is kept.
func (e *Engine) Apply(settings *Settings) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settings = settings
}

// Config returns the configuration the engine runs with.
func (e *Engine) Config() Config {
	return e.currentSettings().config
}

// Status returns the status of the last loop.
func (e *Engine) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

// PodUpdated tells the engine of a change of a pod of its cluster, from
// old to pod: a nomination of the last loop's plan that kube-scheduler
// cleared is written back at once (see renominations).
func (e *Engine) PodUpdated(old, pod *snapshot.Pod) {
	e.lasting.renominations.podUpdated(old, pod)
}

// Trigger asks for a loop soon, e.g. because a pod became unschedulable.
// A burst of triggers shares one loop (see settle).
func (e *Engine) Trigger() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// Run runs loops every ScanInterval and soon after a Trigger, but no
// sooner than MinLoopInterval after the last loop a trigger started, until
// ctx is done; then it returns nil. A panic in a loop ends Run too, with a
// *PanicError once it is logged with its stack and counted: a panic must
// not end the process, which autoscales other clusters too. Either way the
// drains in progress are given back.
func (e *Engine) Run(ctx context.Context) (err error) {
	logger := klog.FromContext(ctx)
	logger.Info("Starting autoscaling loop")
	defer logger.Info("Stopped autoscaling loop")
	// Deferred before releaseDrains, so that it runs after it and also
	// catches a panic of the release.
	defer e.recoverPanic(ctx, &err)
	defer e.releaseDrains(ctx)

	renominating, stopRenominating := context.WithCancel(ctx)
	var renominated sync.WaitGroup
	renominated.Go(func() { e.lasting.renominations.run(renominating) })
	defer renominated.Wait()
	defer stopRenominating()

	// lastTriggered is when the last loop that a trigger started began.
	var lastTriggered time.Time
	e.expectLoopWithin(e.opts.LoopTimeout)
	for {
		e.RunOnce(ctx, e.clock.Now())
		config := e.Config()
		// The next loop starts within a scan interval, or a batch window
		// after a trigger, and is cut at the loop timeout. The minimum loop
		// interval, at most a scan interval after the start of a loop
		// before this one ended, is over by then.
		e.expectLoopWithin(config.ScanInterval + config.TriggerBatchWindow + e.opts.LoopTimeout)
		timer := e.clock.NewTimer(config.ScanInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C():
		case <-e.trigger:
			timer.Stop()
			if !e.settle(ctx) || !e.waitUntil(ctx, lastTriggered.Add(config.MinLoopInterval)) {
				return nil
			}
			lastTriggered = e.clock.Now()
		}
	}
}

// recoverPanic turns a panic of Run into a *PanicError in err, logging it
// with its stack as Kubernetes components do and counting it.
func (e *Engine) recoverPanic(ctx context.Context, err *error) {
	r := recover()
	if r == nil {
		return
	}
	for _, handle := range utilruntime.PanicHandlers {
		handle(ctx, r)
	}
	e.opts.Metrics.recordPanic(e.opts.ClusterName)
	*err = &PanicError{Value: r}
}

// expectLoopWithin sets the deadline of the next loop of Run from now.
func (e *Engine) expectLoopWithin(d time.Duration) {
	e.loopDeadline.Store(e.clock.Now().Add(d).UnixNano())
}

// Stalled says whether the loop of a running engine is overdue: it has
// gone past the time by which a loop must have finished (a scan interval,
// a trigger batch window and the loop timeout after the previous one; the
// loop timeout after Run started). Loops whose reads fail or time out still
// finish; an overdue loop is stuck where no timeout reaches it, such as a
// deadlock or an OnStatus that blocks.
func (e *Engine) Stalled() bool {
	return e.clock.Now().After(e.LoopDeadline())
}

// LoopDeadline is when the next loop of Run must have finished at the
// latest: past it, the engine is Stalled.
func (e *Engine) LoopDeadline() time.Time {
	return time.Unix(0, e.loopDeadline.Load())
}

// releaseTimeout bounds the release of the drains in progress when the
// engine stops.
const releaseTimeout = 30 * time.Second

// releaseDrains gives back the nodes being drained when the engine stops
// (a pause, a deletion, a restart): nothing drives their drains any more,
// and they must not stay tainted meanwhile. Nodes already handed to their
// group keep their taint until they are gone.
func (e *Engine) releaseDrains(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	e.lasting.actuator.ReleaseAll(ctx, "the autoscaler stopped autoscaling the cluster")
}

// settle lets a burst of triggers, e.g. the pods of a new Deployment
// becoming unschedulable one by one, settle into one loop: it waits until
// no trigger came for TriggerQuietPeriod, and at most TriggerBatchWindow.
// It returns false when ctx is done.
func (e *Engine) settle(ctx context.Context) bool {
	config := e.Config()
	window := e.clock.NewTimer(config.TriggerBatchWindow)
	defer window.Stop()
	for {
		quiet := e.clock.NewTimer(config.TriggerQuietPeriod)
		select {
		case <-ctx.Done():
			quiet.Stop()
			return false
		case <-window.C():
			quiet.Stop()
			return true
		case <-quiet.C():
			return true
		case <-e.trigger:
			quiet.Stop()
		}
	}
}

// waitUntil holds a triggered loop until t, so that under a stream of
// triggers, pod churn, loops start at most once per MinLoopInterval. Loops
// of the scan interval neither wait nor hold back: they come seconds apart,
// and a pod that turns unschedulable right after one must not wait for
// more than the quiet period. The triggers that
// come meanwhile are taken in: the loop that follows reads the cache after
// them. It returns false when ctx is done.
func (e *Engine) waitUntil(ctx context.Context, t time.Time) bool {
	wait := t.Sub(e.clock.Now())
	if wait <= 0 {
		return true
	}
	timer := e.clock.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C():
			return true
		case <-e.trigger:
		}
	}
}

func (e *Engine) currentSettings() *Settings {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.settings
}

// RunOnce runs one loop at now and returns its status.
func (e *Engine) RunOnce(ctx context.Context, now time.Time) Status {
	id := e.loops.Add(1)
	logger := klog.FromContext(ctx).WithValues("loop", id)
	ctx = klog.NewContext(ctx, logger)

	e.forgetClusterAutoscalers()
	e.configure(e.currentSettings())
	start := e.clock.Now()
	loopCtx, cancel := context.WithTimeout(ctx, e.opts.LoopTimeout)
	status := e.steps.run(loopCtx, now)
	if errors.Is(loopCtx.Err(), context.DeadlineExceeded) {
		status.Err = fmt.Errorf("the loop did not finish within %s: %w", e.opts.LoopTimeout, cmp.Or(status.Err, loopCtx.Err()))
	}
	cancel()
	e.lasting.renominations.loopEnded()
	end := e.clock.Now()
	e.steps.metrics().observeFunction(e.opts.ClusterName, "main", start, end)
	logger.V(4).Info("Finished loop", "duration", end.Sub(start))
	return e.publish(ctx, status)
}

func (e *Engine) publish(ctx context.Context, status Status) Status {
	if status.Err != nil {
		klog.FromContext(ctx).Error(status.Err, "Autoscaling loop failed")
		e.steps.metrics().recordError(e.opts.ClusterName, errorLoop)
	}
	e.mu.Lock()
	e.status = status
	e.mu.Unlock()
	e.steps.metrics().publish(e.opts.ClusterName, status, e.steps.settings.config.Limits)
	if e.opts.OnStatus != nil {
		e.opts.OnStatus(status)
	}
	return status
}

// configure rebuilds the steps when the settings changed. The lasting
// parts take the new settings, so unneeded timers, backoffs and drains in
// progress go on.
func (e *Engine) configure(settings *Settings) {
	if e.steps != nil && e.steps.settings == settings {
		return
	}
	e.lasting.state.SetOptions(settings.clusterstate)
	e.lasting.actuator.SetOptions(settings.actuator)
	e.steps = &steps{opts: e.opts, settings: settings, lasting: &e.lasting, clock: e.clock}
	e.steps.act = newActuation(e.steps)
	if e.steps.act.mode() == modeActive {
		// Decisions are those of DryRun loops.
		e.lasting.decisions = dryRunDecisions{}
	}
}
