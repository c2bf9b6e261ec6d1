package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
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

// workloadEventSource is the component of the events recorded in workload
// clusters; it is the upstream cluster-autoscaler's, so that what watches
// for its events keeps working.
const workloadEventSource = "cluster-autoscaler"

// runningEngine is the engine of one ClusterAutoscaler, running in a
// goroutine of its own until stop.
type runningEngine struct {
	engine *autoscaler.Engine
	// workload is the engine's reader of the workload cluster.
	workload *workloadReader
	// cluster is the Cluster the engine autoscales.
	cluster client.ObjectKey
	// restConfig is the workload cluster connection the engine started
	// with; its writes and events go there.
	restConfig *rest.Config
	// applied is the configuration the engine runs with.
	applied engineConfig
	// verbosity is the log level of the engine's loop (spec.logVerbosity).
	verbosity *atomic.Int32

	cancel context.CancelFunc
	// done is closed when the engine's goroutine has returned.
	done chan struct{}
}

// stop stops the engine and waits until its loop has returned, so that no
// scaling is half done afterwards.
func (e *runningEngine) stop() {
	e.cancel()
	<-e.done
}

// engineConfig is what an engine runs with, from one generation of a
// ClusterAutoscaler's spec.
type engineConfig struct {
	config     autoscaler.Config
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
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("creating a clientset for workload cluster %s: %w", cluster, err)
	}
	workload := newWorkloadReader(r.ClusterCache, cluster, key)

	verbosity := &atomic.Int32{}
	verbosity.Store(desired.verbosity)
	// The engine outlives this reconcile: it runs until stopped or until the
	// manager stops, with a logger of its own.
	logger := withVerbosity(ctrl.LoggerFrom(r.ctx), verbosity).WithValues(
		"ClusterAutoscaler", klog.KObj(ca), "Cluster", klog.KRef(cluster.Namespace, cluster.Name))
	engineCtx, cancel := context.WithCancel(ctrl.LoggerInto(r.ctx, logger))

	// The manager's context, not the engine's: stopping the engine gives
	// back its drains and says so in events, after engineCtx is cancelled.
	// The broadcaster is shut down once the engine has returned.
	broadcaster := record.NewBroadcaster(record.WithContext(r.ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: clientset.CoreV1().Events("")})
	statusEvent := event.GenericEvent{Object: &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}

	groupRecorder := &nodeGroupEventRecorder{ctx: engineCtx, client: r.Client, recorder: r.Recorder}
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: cluster.String(),
		Config:      desired.config,
		NodeGroups: clusterapi.NewProvider(clusterapi.Options{
			Management:          r.Client,
			ManagementAPIReader: r.APIReader,
			Workload:            workload,
			Cluster:             cluster,
			Recorder:            groupRecorder,
		}),
		Cluster:       workload,
		Clientset:     clientset,
		Recorder:      broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: workloadEventSource}),
		GroupRecorder: groupRecorder,
		Metrics:       r.Metrics,
		Clock:         r.Clock,
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
		engine:     engine,
		workload:   workload,
		cluster:    cluster,
		restConfig: restConfig,
		applied:    desired,
		verbosity:  verbosity,
		cancel:     cancel,
		done:       make(chan struct{}),
	}
	go func() {
		defer close(running.done)
		defer broadcaster.Shutdown()
		defer r.Metrics.Forget(cluster.String())
		engine.Run(engineCtx)
	}()
	r.engines.put(key, running)
	ctrl.LoggerFrom(ctx).Info("Started the autoscaling engine")
	return nil
}

// stopEngine stops the engine of a ClusterAutoscaler, if one runs, and
// says whether one did.
func (r *ClusterAutoscalerReconciler) stopEngine(ctx context.Context, key types.NamespacedName) bool {
	running := r.engines.remove(key)
	if running == nil {
		return false
	}
	running.stop()
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
