package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
)

const (
	// workloadEventSource is the component of the events recorded in
	// workload clusters; it is the upstream cluster-autoscaler's, so that
	// what watches for its events keeps working.
	workloadEventSource = "cluster-autoscaler"

	// engineRestartDelay is how long a ClusterAutoscaler waits for a new
	// engine after its engine panicked; it doubles with each panic in a
	// row up to maxEngineRestartDelay, and starts over after twice that
	// without a panic, as the kubelet's CrashLoopBackOff does.
	engineRestartDelay    = 10 * time.Second
	maxEngineRestartDelay = 5 * time.Minute
)

// runningEngine is the engine of one ClusterAutoscaler, running in a
// goroutine of its own until stop.
type runningEngine struct {
	engine *autoscaler.Engine
	// workload is the engine's reader of the workload cluster.
	workload *workloadReader
	// cluster is the Cluster the engine autoscales.
	cluster client.ObjectKey
	// restConfig is the workload cluster connection whose credentials the
	// engine's writes and events use (credentials), which a reconnect to
	// the same server replaces without the engine starting again.
	restConfig  *rest.Config
	credentials *credentialsTransport
	// startedAt is when the engine started.
	startedAt time.Time
	// applied is the configuration the engine runs with.
	applied engineConfig
	// everActive is set once the engine has run with an Active
	// configuration: until a dry loop has run, a loop of it may act.
	everActive bool
	// verbosity is the log level of the engine's loop (spec.logVerbosity).
	verbosity *atomic.Int32
	// kubeconfigChecked is the last reading of the workload kubeconfig
	// that found it usable; only reconciles of the ClusterAutoscaler,
	// which never run concurrently, use it.
	kubeconfigChecked kubeconfigCheck
	// buffersError and requestsError are the last errors of reading the
	// capacity buffers and the provisioning requests that an event
	// reported; reconciles, which never run concurrently, use them.
	buffersError  string
	requestsError string
	// explanation is the last explanation written; reconciles, which
	// never run concurrently, use it.
	explanation explanationPublished

	cancel context.CancelFunc
	// done is closed when the engine's loop has returned.
	done chan struct{}
	// crash is set, before done is closed, when the loop panicked.
	crash *engineCrash
}

// engineCrash is a panic that ended an engine.
type engineCrash struct {
	err *autoscaler.PanicError
	// restartDelay is how long after the panic a new engine starts, at
	// restartAt.
	restartDelay time.Duration
	restartAt    time.Time
}

// stop stops the engine and waits until its loop has returned, so that no
// scaling is half done afterwards.
func (e *runningEngine) stop() {
	e.cancel()
	<-e.done
}

// crashed returns the panic that ended the engine, or nil while it runs.
func (e *runningEngine) crashed() *engineCrash {
	select {
	case <-e.done:
		return e.crash
	default:
		return nil
	}
}

// engineConfig is what an engine runs with, from one generation of a
// ClusterAutoscaler's spec.
type engineConfig struct {
	settings   *autoscaler.Settings
	verbosity  int32
	generation int64
}

// engineRegistry holds the running engines by ClusterAutoscaler. Reconciles
// of one ClusterAutoscaler never run concurrently, so only the map needs a
// lock; starting and stopping happen outside it, and engines of other
// ClusterAutoscalers never wait for each other.
type engineRegistry struct {
	mu      sync.Mutex
	engines map[types.NamespacedName]*runningEngine
}

func (r *engineRegistry) get(key types.NamespacedName) *runningEngine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.engines[key]
}

func (r *engineRegistry) put(key types.NamespacedName, engine *runningEngine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.engines == nil {
		r.engines = map[types.NamespacedName]*runningEngine{}
	}
	r.engines[key] = engine
}

func (r *engineRegistry) remove(key types.NamespacedName) *runningEngine {
	r.mu.Lock()
	defer r.mu.Unlock()
	engine := r.engines[key]
	delete(r.engines, key)
	return engine
}

// actsNoMore tells whether no loop of the engine can act any more, so
// that a DryRun engine may give the Cluster's Lease back: its last loop
// was dry, or it never ran Active and has not finished a loop yet. An
// engine that leaves Active mode may be in a loop that started Active and
// still acts: the Lease is kept until a dry loop has run, so that no other
// manager's engine acts meanwhile. Every loop reconciles again (OnStatus).
func (e *runningEngine) actsNoMore(last autoscaler.Status) bool {
	return last.DryRun || (last.Time.IsZero() && !e.everActive)
}

// list returns the engines of the registry.
func (r *engineRegistry) list() []*runningEngine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Values(r.engines))
}

// removeAll empties the registry and returns what it held.
func (r *engineRegistry) removeAll() []*runningEngine {
	r.mu.Lock()
	defer r.mu.Unlock()
	engines := make([]*runningEngine, 0, len(r.engines))
	for _, engine := range r.engines {
		engines = append(engines, engine)
	}
	r.engines = nil
	return engines
}

// ofCluster returns the engines that autoscale a Cluster.
func (r *engineRegistry) ofCluster(cluster client.ObjectKey) []*runningEngine {
	r.mu.Lock()
	defer r.mu.Unlock()
	var engines []*runningEngine
	for _, engine := range r.engines {
		if engine.cluster == cluster {
			engines = append(engines, engine)
		}
	}
	return engines
}

// startEngine starts an engine for the ClusterAutoscaler on the workload
// cluster connection restConfig and registers it.
func (r *ClusterAutoscalerReconciler) startEngine(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler, restConfig *rest.Config, desired engineConfig) error {
	key := client.ObjectKeyFromObject(ca)
	cluster := clusterKey(ca)
	// The broadcaster records until shut down, not until the engine's or
	// the manager's context is done: stopping the engine gives back its
	// drains and says so in events, after both may be cancelled. It is
	// shut down once the engine has returned, its events written.
	credentials, err := newCredentialsTransport(restConfig)
	if err != nil {
		return fmt.Errorf("creating the clients of workload cluster %s: %w", cluster, err)
	}
	clientset, broadcaster, err := r.newWorkloadClients(r.ctx, engineRESTConfig(clientConfig(restConfig, credentials), key))
	if err != nil {
		return fmt.Errorf("creating the clients of workload cluster %s: %w", cluster, err)
	}
	workload := newWorkloadReader(r.ClusterCache, cluster, key)

	verbosity := &atomic.Int32{}
	verbosity.Store(desired.verbosity)
	// The engine outlives this reconcile: it runs until stopped or until the
	// manager stops, with a logger of its own.
	logger := withVerbosity(ctrl.LoggerFrom(r.ctx), verbosity).WithValues(
		"ClusterAutoscaler", klog.KObj(ca), "Cluster", klog.KRef(cluster.Namespace, cluster.Name))
	engineCtx, cancel := context.WithCancel(ctrl.LoggerInto(r.ctx, logger))

	// What the engine's goroutine refers to the ClusterAutoscaler by, in
	// reconcile requests and events; it outlives this reconcile's object.
	regarding := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: ca.UID}}
	statusEvent := event.GenericEvent{Object: regarding}

	// Reads and writes of buffers and provisioning requests that the cache
	// does not serve.
	live := func(ctx context.Context) (client.Client, error) {
		return r.ClusterCache.GetUncachedClient(ctx, cluster)
	}
	groupRecorder := &nodeGroupEventRecorder{ctx: engineCtx, client: r.Client, recorder: r.Recorder}
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: cluster.String(),
		Settings:    desired.settings,
		NodeGroups: r.NodeGroups(clusterapi.Options{
			Management:          r.Client,
			ManagementAPIReader: r.APIReader,
			Workload:            workload,
			Cluster:             cluster,
			Recorder:            groupRecorder,
			Owner:               ca.UID,
		}),
		Owner:         r.marksOwner(ca),
		Cluster:       workload,
		Clientset:     clientset,
		Recorder:      broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: workloadEventSource}),
		GroupRecorder: groupRecorder,
		Metrics:       r.Metrics,
		Clock:         r.Clock,
		Buffers:       newCapacityBuffers(workload, live, r.Clock),
		Requests:      newProvisioningRequests(workload, live, r.Clock),
		// What the engine before this one recorded in the management
		// cluster: the only record of its atomic scale-ups it trusts.
		AtomicScaleUps: atomicScaleUpsOf(ca.Status.AtomicScaleUps),
		// Every loop enqueues the ClusterAutoscaler, whose reconcile
		// writes the engine's status.
		OnStatus: func(autoscaler.Status) {
			select {
			case r.statusEvents <- statusEvent:
			case <-engineCtx.Done():
			}
		},
	})
	if err != nil {
		cancel()
		broadcaster.Shutdown()
		return fmt.Errorf("creating the engine: %w", err)
	}

	running := &runningEngine{
		engine:      engine,
		workload:    workload,
		cluster:     cluster,
		restConfig:  restConfig,
		credentials: credentials,
		startedAt:   r.Clock.Now(),
		applied:     desired,
		everActive:  !desired.settings.Config().DryRun,
		verbosity:   verbosity,
		cancel:      cancel,
		done:        make(chan struct{}),
	}
	go func() {
		err := engine.Run(engineCtx)
		// Writes what is queued, the drains given back included, and stops.
		broadcaster.Shutdown()
		var panicked *autoscaler.PanicError
		if errors.As(err, &panicked) {
			running.crash = r.engineCrashed(regarding, cluster, panicked)
		}
		close(running.done)
		if running.crash != nil {
			// Its reconcile reports the panic and starts a new engine in time.
			select {
			case r.statusEvents <- statusEvent:
			case <-r.ctx.Done():
			}
		}
	}()
	r.engines.put(key, running)
	ctrl.LoggerFrom(ctx).Info("Started the autoscaling engine")
	return nil
}

// engineRESTConfig is the connection of the engine of a ClusterAutoscaler
// for its writes and events: its user agent names the ClusterAutoscaler,
// so that the workload cluster's audit log tells which one wrote, when
// several, such as an Active and a DryRun one, serve a Cluster.
func engineRESTConfig(restConfig *rest.Config, key types.NamespacedName) *rest.Config {
	config := rest.CopyConfig(restConfig)
	config.UserAgent = fmt.Sprintf("%s (ClusterAutoscaler %s)", cmp.Or(restConfig.UserAgent, rest.DefaultKubernetesUserAgent()), key)
	return config
}

// newWorkloadClients returns an engine's clients of the workload cluster
// of restConfig: a clientset for its writes (taints, evictions), and a
// broadcaster for its events with a rate limit of their own, so that the
// events of a scale-up, one per pod it helps, do not hold up the writes,
// nor these the events. Events over their limit wait in the broadcaster's
// queue.
func (r *ClusterAutoscalerReconciler) newWorkloadClients(ctx context.Context, restConfig *rest.Config) (kubernetes.Interface, record.EventBroadcaster, error) {
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, nil, err
	}
	eventConfig := rest.CopyConfig(restConfig)
	eventConfig.QPS, eventConfig.Burst, eventConfig.RateLimiter = r.WorkloadEventQPS, r.WorkloadEventBurst, nil
	events, err := kubernetes.NewForConfig(eventConfig)
	if err != nil {
		return nil, nil, err
	}
	return clientset, newEventBroadcaster(ctx, events.CoreV1()), nil
}

// engineCrashed says, in an event, that the engine of a ClusterAutoscaler
// panicked, and when a new one starts: its state may be half updated, so a
// new engine takes over, as after a restart of the manager, but only for
// this cluster; the other engines go on undisturbed. The engine logged the
// panic with its stack and counted it.
func (r *ClusterAutoscalerReconciler) engineCrashed(regarding *autoscalingv1alpha1.ClusterAutoscaler, cluster client.ObjectKey, err *autoscaler.PanicError) *engineCrash {
	now := r.Clock.Now()
	id := client.ObjectKeyFromObject(regarding).String()
	r.restarts.GC()
	r.restarts.Next(id, now)
	delay := r.restarts.Get(id)
	r.Recorder.Eventf(regarding, corev1.EventTypeWarning, autoscalingv1alpha1.EnginePanickedReason,
		"The autoscaling loop of Cluster %s panicked: %v; a new engine starts in %s", cluster, err.Value, delay)
	return &engineCrash{err: err, restartDelay: delay, restartAt: now.Add(delay)}
}

// restartWait returns how long the ClusterAutoscaler still waits for a new
// engine after its engine panicked, with the scope saying why; 0 when
// its engine did not panic, or when the wait is over and the engine that
// panicked is gone from the registry, for a new one to start.
func (r *ClusterAutoscalerReconciler) restartWait(s *reconcileScope) time.Duration {
	key := client.ObjectKeyFromObject(s.ca)
	running := r.engines.get(key)
	if running == nil {
		return 0
	}
	crash := running.crashed()
	if crash == nil {
		return 0
	}
	if wait := crash.restartAt.Sub(r.Clock.Now()); wait > 0 {
		s.stop(autoscalingv1alpha1.EnginePanickedReason, fmt.Sprintf(
			"The autoscaling loop panicked: %v; a new engine starts %s after the panic, at %s",
			crash.err.Value, crash.restartDelay, crash.restartAt.UTC().Format(time.RFC3339)))
		return wait
	}
	// Its loop has returned: there is nothing to stop.
	r.engines.remove(key)
	return 0
}

// stopEngine stops the engine of a ClusterAutoscaler, if one runs, and
// says whether one did.
func (r *ClusterAutoscalerReconciler) stopEngine(ctx context.Context, key types.NamespacedName) bool {
	running := r.engines.remove(key)
	if running == nil {
		return false
	}
	running.stop()
	// Only once the loop has returned, which would publish them again. An
	// engine that panicked keeps them until this: its panics stay counted
	// across the engines that take its place.
	if running.applied.settings.Config().DryRun {
		r.Metrics.ForgetDryRun(running.cluster.String())
	} else {
		r.Metrics.Forget(running.cluster.String())
	}
	ctrl.LoggerFrom(ctx).Info("Stopped the autoscaling engine")
	return true
}

// stopAllEngines stops every engine when the manager stops, so that loops
// end before the process exits.
func (r *ClusterAutoscalerReconciler) stopAllEngines() {
	for _, running := range r.engines.removeAll() {
		running.stop()
	}
}

// triggerEngines asks the engines of a Cluster for a loop soon.
func (r *ClusterAutoscalerReconciler) triggerEngines(cluster client.ObjectKey) {
	for _, running := range r.engines.ofCluster(cluster) {
		running.engine.Trigger()
	}
}

// clusterKey is the key of the Cluster a ClusterAutoscaler autoscales.
func clusterKey(ca *autoscalingv1alpha1.ClusterAutoscaler) client.ObjectKey {
	return client.ObjectKey{Namespace: ca.Namespace, Name: ca.Spec.ClusterName}
}
