// Package controller runs the ClusterAutoscaler reconciler: one autoscaling
// engine per ClusterAutoscaler, for the workload cluster it names, with the
// engine's findings written back to the ClusterAutoscaler status.
package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/patch"
	"sigs.k8s.io/cluster-api/util/predicates"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
	"github.com/capi-autoscaler/capi-autoscaler/internal/kubeconfig"
)

const (
	// CleanupFinalizer keeps a ClusterAutoscaler until its engine is
	// stopped and what it left on the cluster is removed.
	CleanupFinalizer = "autoscaling.cluster.x-k8s.io/cleanup"

	// controllerName names the controller, its logs and its events.
	controllerName = "clusterautoscaler"
	// clusterNameField indexes ClusterAutoscalers by spec.clusterName.
	clusterNameField = "spec.clusterName"
	// unschedulablePodsWatch names the watch of a workload cluster's pods.
	unschedulablePodsWatch = "clusterautoscaler-unschedulable-pods"

	// DefaultWorkloadCleanupTimeout is how long the deletion of a
	// ClusterAutoscaler waits for an unreachable workload cluster.
	DefaultWorkloadCleanupTimeout = 5 * time.Minute

	// DefaultWorkloadEventQPS and DefaultWorkloadEventBurst limit the
	// events an engine records in its workload cluster: 600 a minute, with
	// room for the events of a scale-up for a few pods at once. The
	// broadcaster queues what is over (up to 1,000 events, then drops
	// them), and its spam filter already bounds those of one object.
	DefaultWorkloadEventQPS   = 10
	DefaultWorkloadEventBurst = 25
)

// The manager's permissions are two ClusterRoles, so that an install can
// grant the second only in the namespaces it autoscales (docs/reference/permissions.md). The end-to-end suite runs the manager with exactly these
// roles and fails on any request they refuse.
//
// manager-role, bound cluster-wide: what the caches list and watch, and the
// ClusterAutoscaler's finalizer and status (patches), so that one in a
// namespace the manager may not act in says why on its own conditions, and
// its events.
// +kubebuilder:rbac:groups=autoscaling.cluster.x-k8s.io,resources=clusterautoscalers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=autoscaling.cluster.x-k8s.io,resources=clusterautoscalers/status,verbs=patch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinedeployments;machinesets;machinepools,verbs=get;list;watch
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=get;list;watch
// +kubebuilder:rbac:groups=infrastructure.cluster.x-k8s.io,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
//
// manager-namespace-role, needed only in the namespaces of the
// ClusterAutoscalers and their Clusters: acting on a Cluster. No list or
// watch: nothing of it is cached. /scale is read, then updated with the
// resourceVersion read (optimistic concurrency); Machines get the deletion
// mark by patch. Secrets are only got, by name: the kubeconfig Secret of
// each Cluster, or the Secret its ClusterAutoscaler names
// (WorkloadKubeconfigs). The Cluster's Lease fences its engine
// (ClusterLeases); the explanation ConfigMap is written in explanation.go.
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machinedeployments/scale;machinesets/scale;machinepools/scale,verbs=get;update,roleName=manager-namespace-role
// +kubebuilder:rbac:groups=cluster.x-k8s.io,resources=machines,verbs=patch,roleName=manager-namespace-role
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,roleName=manager-namespace-role
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update,roleName=manager-namespace-role

// ClusterAutoscalerReconciler runs one engine per ClusterAutoscaler.
type ClusterAutoscalerReconciler struct {
	// Client reads and writes the management cluster, through the
	// manager's cache.
	Client client.Client
	// APIReader reads the management cluster's API server without a
	// cache, for what a scale-down decides on at the moment it acts;
	// Client when nil.
	APIReader client.Reader
	// ClusterCache connects to workload clusters.
	ClusterCache clustercache.ClusterCache
	// WorkloadKubeconfigs are what the ClusterCache reads kubeconfigs
	// through; reconciles ask it to have the ClusterCache connect again
	// when the credentials of a workload kubeconfig change.
	WorkloadKubeconfigs *WorkloadKubeconfigs
	// Recorder records events in the management cluster.
	Recorder record.EventRecorder
	// Metrics, shared by all engines; nil records none.
	Metrics *autoscaler.Metrics
	// ConditionMetrics export the conditions of every ClusterAutoscaler;
	// nil records none.
	ConditionMetrics *ConditionMetrics
	// Clock drives the engines and the cleanup timeout; the real clock when nil.
	Clock clock.WithTicker
	// WorkloadCleanupTimeout is how long deleting a ClusterAutoscaler
	// retries removing its taints from an unreachable workload cluster
	// before giving up; DefaultWorkloadCleanupTimeout when zero.
	WorkloadCleanupTimeout time.Duration
	// WorkloadEventQPS and WorkloadEventBurst limit the events each engine
	// records in its workload cluster, apart from the engine's other
	// requests; DefaultWorkloadEventQPS and DefaultWorkloadEventBurst when
	// zero.
	WorkloadEventQPS   float32
	WorkloadEventBurst int
	// NodeGroups builds the node groups of an engine; Cluster API's
	// (clusterapi.NewProvider) when nil. Tests put faults in them
	// (e2e/framework/faults).
	NodeGroups func(clusterapi.Options) nodegroups.Provider
	// WatchFilterValue, when set, restricts the controller to
	// ClusterAutoscalers and Clusters whose cluster.x-k8s.io/watch-filter
	// label has this value, as the controllers of Cluster API do.
	WatchFilterValue string
	// Leases fence the Active engines: one runs for a Cluster only while
	// this manager holds the Cluster's Lease. Required.
	Leases *ClusterLeases

	// ctx is the manager's lifetime; engines run under it.
	ctx context.Context
	// controller adds the watches of workload clusters.
	controller controller.Controller
	// statusEvents carries the engines' "a loop finished" and "the loop
	// panicked" to the controller.
	statusEvents chan event.GenericEvent
	engines      engineRegistry
	// restarts holds the delays before a new engine starts, by
	// ClusterAutoscaler, after its engine panicked.
	restarts *flowcontrol.Backoff
}

// SetupWithManager registers the reconciler with the manager. Engines run
// under ctx and are stopped when the manager stops.
func (r *ClusterAutoscalerReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, options controller.Options) error {
	if r.Client == nil || r.ClusterCache == nil || r.WorkloadKubeconfigs == nil || r.Recorder == nil || r.Leases == nil {
		return errors.New("client, cluster cache, workload kubeconfigs, recorder and leases are required")
	}
	if err := r.Leases.Validate(); err != nil {
		return err
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.WorkloadCleanupTimeout == 0 {
		r.WorkloadCleanupTimeout = DefaultWorkloadCleanupTimeout
	}
	if r.WorkloadEventQPS == 0 {
		r.WorkloadEventQPS = DefaultWorkloadEventQPS
	}
	if r.WorkloadEventBurst == 0 {
		r.WorkloadEventBurst = DefaultWorkloadEventBurst
	}
	if r.restarts == nil {
		r.restarts = flowcontrol.NewBackOff(engineRestartDelay, maxEngineRestartDelay)
	}
	r.restarts.Clock = r.Clock
	if r.NodeGroups == nil {
		r.NodeGroups = func(opts clusterapi.Options) nodegroups.Provider { return clusterapi.NewProvider(opts) }
	}
	r.Recorder = messageBoundedRecorder{r.Recorder}
	r.ctx = ctx
	r.statusEvents = make(chan event.GenericEvent)

	if err := mgr.GetFieldIndexer().IndexField(ctx, &autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName); err != nil {
		return fmt.Errorf("indexing ClusterAutoscalers by %s: %w", clusterNameField, err)
	}

	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(controllerName).
		For(&autoscalingv1alpha1.ClusterAutoscaler{}).
		// Not the replays of ClusterResyncPeriod, which are the ClusterCache's.
		Watches(&clusterv1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.clusterToClusterAutoscalers),
			builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
		// A ClusterAutoscaler created, deleted or switching between Active
		// and DryRun may change which one owns its Cluster. Unfiltered by
		// the event filter: that one may be served by another manager.
		WatchesRawSource(source.Kind(mgr.GetCache(), &autoscalingv1alpha1.ClusterAutoscaler{},
			handler.TypedEnqueueRequestsFromMapFunc(r.clusterAutoscalerToOthers),
			predicate.TypedFuncs[*autoscalingv1alpha1.ClusterAutoscaler]{
				// spec.clusterName, the creation time and the name never change.
				UpdateFunc: func(e event.TypedUpdateEvent[*autoscalingv1alpha1.ClusterAutoscaler]) bool {
					return isDryRun(e.ObjectOld) != isDryRun(e.ObjectNew)
				},
				GenericFunc: func(event.TypedGenericEvent[*autoscalingv1alpha1.ClusterAutoscaler]) bool { return false },
			})).
		// Connecting to and losing a workload cluster.
		WatchesRawSource(r.ClusterCache.GetClusterSource(controllerName, r.clusterToClusterAutoscalers)).
		// A loop of an engine finished.
		WatchesRawSource(source.Channel(r.statusEvents, &handler.EnqueueRequestForObject{})).
		WithEventFilter(predicates.ResourceHasFilterLabel(mgr.GetScheme(), ctrl.LoggerFrom(ctx), r.WatchFilterValue)).
		WithOptions(options).
		Build(r)
	if err != nil {
		return fmt.Errorf("creating the %s controller: %w", controllerName, err)
	}
	r.controller = c

	// Stop the engines with the manager, within its graceful shutdown.
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAllEngines()
		// Once no engine acts: another manager may take over at once.
		r.Leases.ReleaseAll()
		return nil
	}))
}

// Reconcile keeps one engine running per ClusterAutoscaler while its
// Cluster exists, is not paused and is not owned by another
// ClusterAutoscaler (see clusterOwner), and writes the engine's status.
func (r *ClusterAutoscalerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	if err := r.Client.Get(ctx, req.NamespacedName, ca); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted without the finalizer (e.g. removed by hand).
			r.stopEngine(ctx, req.NamespacedName)
			r.Leases.Release(req.NamespacedName)
			r.ConditionMetrics.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues("Cluster", klog.KRef(ca.Namespace, ca.Spec.ClusterName))
	ctx = ctrl.LoggerInto(ctx, log)

	patchHelper, err := patch.NewHelper(ca, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	s := newReconcileScope(ca)
	defer func() {
		if !s.statusElsewhere {
			updateStatus(s)
		}
		if err := patchHelper.Patch(ctx, ca, patch.WithOwnedConditions{Conditions: ownedConditions}); err != nil {
			retErr = kerrors.NewAggregate([]error{retErr, err})
			return
		}
		// As written: the metrics show what the API shows.
		r.ConditionMetrics.record(ca)
	}()

	if !ca.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	// Add the finalizer first, so that nothing runs that deletion would
	// not clean up.
	if controllerutil.AddFinalizer(ca, CleanupFinalizer) {
		return ctrl.Result{}, nil
	}
	return r.reconcileNormal(ctx, s)
}

func (r *ClusterAutoscalerReconciler) reconcileNormal(ctx context.Context, s *reconcileScope) (ctrl.Result, error) {
	ca := s.ca
	key := client.ObjectKeyFromObject(ca)
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, clusterKey(ca), cluster); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		r.stopEngine(ctx, key)
		r.Leases.Release(key)
		s.stop(autoscalingv1alpha1.ClusterNotFoundReason, fmt.Sprintf(
			"Cluster %s does not exist in this management cluster, so nothing is autoscaled; a ClusterAutoscaler left behind by clusterctl move belongs where its Cluster went", clusterKey(ca)))
		return ctrl.Result{}, nil
	}
	if !cluster.DeletionTimestamp.IsZero() {
		r.stopEngine(ctx, key)
		r.Leases.Release(key)
		s.stop(autoscalingv1alpha1.ClusterNotFoundReason, fmt.Sprintf("Cluster %s is being deleted", clusterKey(ca)))
		return ctrl.Result{}, nil
	}
	// Before the checks that return early: a refused or paused
	// ClusterAutoscaler follows its Cluster too.
	ensureClusterOwnerReference(ca, cluster)
	owner, err := r.clusterOwner(ctx, ca)
	if err != nil {
		return ctrl.Result{}, err
	}
	if owner.Name != ca.Name {
		if !isDryRun(ca) {
			r.refuse(ctx, s, owner)
			r.Leases.Release(key)
			return ctrl.Result{}, nil
		}
		s.otherOwner = owner
	}
	if annotations.IsPaused(cluster, ca) {
		if r.stopEngine(ctx, key) {
			r.Recorder.Eventf(ca, corev1.EventTypeNormal, autoscalingv1alpha1.ClusterPausedReason, "Stopped autoscaling Cluster %s while it is paused", clusterKey(ca))
		}
		// Once the engine's loop has returned: another manager's engine
		// may act as soon as the Lease is given back.
		r.Leases.Release(key)
		s.stop(autoscalingv1alpha1.ClusterPausedReason, fmt.Sprintf(
			"Nothing is scaled while Cluster %s has spec.paused or the ClusterAutoscaler has the %s annotation", clusterKey(ca), clusterv1.PausedAnnotation))
		return ctrl.Result{}, nil
	}
	usable, err := r.reconcileWorkloadKubeconfig(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !usable {
		// Secrets are not watched: a missing or invalid one is read again.
		return ctrl.Result{RequeueAfter: workloadKubeconfigRetryInterval}, nil
	}

	desired, err := desiredConfig(ca, r.Clock)
	if err != nil {
		// The error is the user's: it is reported in a condition, and not
		// returned, as retrying cannot fix the spec; changing the spec
		// reconciles again. A running engine goes on with what it has.
		s.configErr = err
		running := r.engines.get(key)
		if running == nil {
			s.stop(autoscalingv1alpha1.InvalidConfigurationReason, "Invalid configuration: "+err.Error())
			return ctrl.Result{}, nil //nolint:nilerr // Invalid spec: reported in a condition; a spec change reconciles again.
		}
		s.keptGeneration = running.applied.generation
		desired = running.applied
	}

	if wait := r.restartWait(s); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	// A DryRun ClusterAutoscaler that owns its Cluster acts on nothing, and
	// gives the Cluster's Lease back once its engine is dry (below).
	givesLeaseBack := isDryRun(ca) && s.otherOwner == nil
	if !isDryRun(ca) && !r.holdClusterLease(ctx, s) {
		return ctrl.Result{}, nil
	}
	running, err := r.ensureEngine(ctx, s, desired)
	if err != nil {
		return ctrl.Result{}, err
	}
	if running == nil {
		if givesLeaseBack {
			r.Leases.Release(key)
		}
		// Not connected yet: the ClusterCache's source reconciles again on connect.
		return ctrl.Result{}, nil
	}
	if running.applied.generation != desired.generation {
		leavingActive := !running.applied.settings.Config().DryRun && desired.settings.Config().DryRun
		running.engine.Apply(desired.settings)
		running.verbosity.Store(desired.verbosity)
		running.applied = desired
		running.everActive = running.everActive || !desired.settings.Config().DryRun
		ctrl.LoggerFrom(ctx).Info("Applied a new configuration", "generation", desired.generation)
		if leavingActive {
			// The same engine goes on, dry: what it placed while it acted
			// is given back, or followed until gone, by its loops.
			r.Recorder.Eventf(ca, corev1.EventTypeNormal, autoscalingv1alpha1.DryRunReason,
				"Cluster %s is no longer autoscaled, only planned for: the drains in progress are given back; the nodes already handed to their groups keep their taint while their Machines go, and are given back if they are still there after %s",
				clusterKey(ca), desired.settings.Config().ScaleDown.NodeDeletionTimeout)
		}
	}
	s.engine = running
	s.loop = running.engine.Status()
	if givesLeaseBack && running.actsNoMore(s.loop) {
		r.Leases.Release(key)
	}
	recheck := r.watchLoopProgress(ctx, s)
	if status := s.loop; !status.Time.IsZero() {
		r.publishExplanation(ctx, ca, running, status)
		r.publishDecisions(ca, status)
		if status.BuffersError != running.buffersError {
			running.buffersError = status.BuffersError
			if status.BuffersError != "" {
				r.Recorder.Eventf(ca, corev1.EventTypeWarning, autoscalingv1alpha1.CapacityBuffersUnreadableReason,
					"No room is kept for the CapacityBuffers of Cluster %s: %s", clusterKey(ca), status.BuffersError)
			}
		}
		if status.RequestsError != running.requestsError {
			running.requestsError = status.RequestsError
			if status.RequestsError != "" {
				r.Recorder.Eventf(ca, corev1.EventTypeWarning, autoscalingv1alpha1.ProvisioningRequestsUnreadableReason,
					"The ProvisioningRequests of Cluster %s are not answered: %s", clusterKey(ca), status.RequestsError)
			}
		}
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// ensureClusterOwnerReference makes the Cluster an owner of the
// ClusterAutoscaler: clusterctl move takes along what a Cluster owns, and
// the garbage collector deletes it with the Cluster. Not a controller
// reference, as no Cluster API controller manages it; no
// blockOwnerDeletion, which would need the update permission on
// clusters/finalizers. A Cluster recreated under the same name replaces the
// reference to the old one.
func ensureClusterOwnerReference(ca *autoscalingv1alpha1.ClusterAutoscaler, cluster *clusterv1.Cluster) {
	ca.SetOwnerReferences(util.EnsureOwnerRef(ca.GetOwnerReferences(), metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(),
		Kind:       clusterv1.ClusterKind,
		Name:       cluster.Name,
		UID:        cluster.UID,
	}))
}

// desiredConfig is the engine configuration the ClusterAutoscaler asks for,
// converted and checked once, here, into the settings an engine on clk
// takes whole: a spec is applied entirely or not at all.
func desiredConfig(ca *autoscalingv1alpha1.ClusterAutoscaler, clk clock.PassiveClock) (engineConfig, error) {
	settings, err := engineconfig.Settings(ca.Spec, clk)
	if err != nil {
		return engineConfig{}, err
	}
	return engineConfig{settings: settings, verbosity: engineconfig.LogVerbosity(ca.Spec), generation: ca.Generation}, nil
}

// ensureEngine returns the engine of the ClusterAutoscaler, starting it
// with desired when the workload cluster is connected. It returns nil, with
// the scope saying why, while there is no engine and no connection.
func (r *ClusterAutoscalerReconciler) ensureEngine(ctx context.Context, s *reconcileScope, desired engineConfig) (*runningEngine, error) {
	ca := s.ca
	key := client.ObjectKeyFromObject(ca)
	running := r.engines.get(key)
	restConfig, err := r.ClusterCache.GetRESTConfig(ctx, clusterKey(ca))
	if err != nil {
		if running != nil {
			// The engine keeps running: its loops report the lost
			// connection and it carries on when the cluster is back.
			return running, nil
		}
		kubeconfigSecret, _ := kubeconfig.Location(ca)
		s.stop(autoscalingv1alpha1.WorkloadClusterUnreachableReason, fmt.Sprintf(
			"The workload cluster cannot be reached with the kubeconfig in Secret %s: %v", kubeconfigSecret.Name, err))
		return nil, nil
	}
	if running != nil && running.restConfig != restConfig {
		// The ClusterCache connected anew, e.g. with a rotated kubeconfig:
		// the engine goes on with the new credentials, and remembers its
		// drains and timers. Only a connection to another server, as when
		// the manager comes to run in the workload cluster, starts it
		// again, with the configuration it had.
		if err := r.useConnection(ctx, running, restConfig); err != nil {
			ctrl.LoggerFrom(ctx).Info("Starting the engine again on the new connection to the workload cluster", "reason", err.Error())
			r.stopEngine(ctx, key)
			desired = running.applied
			running = nil
		}
	}
	// Watches end with a connection; adding one again is a no-op.
	if err := r.watchUnschedulablePods(ctx, clusterKey(ca)); err != nil {
		return nil, err
	}
	if running == nil {
		// The drains of an engine live in its memory: a scale-down that a
		// crash or a restart interrupted between marking a Machine and
		// lowering the replicas is released, not resumed. The taints of
		// such drains go in the engine's first loop. A DryRun engine
		// writes nothing, and leaves the marks alone: the Active engine
		// beside it, or another autoscaler, may be between marking a
		// Machine and lowering the replicas.
		if !isDryRun(ca) {
			if err := clusterapi.ReleaseDeletionMarks(ctx, r.markRelease(ca)); err != nil {
				return nil, err
			}
		}
		if err := r.startEngine(ctx, ca, restConfig, desired); err != nil {
			return nil, err
		}
		r.Recorder.Eventf(ca, corev1.EventTypeNormal, "AutoscalingStarted", "Started autoscaling Cluster %s", clusterKey(ca))
		running = r.engines.get(key)
	}
	if err := r.ClusterCache.Watch(ctx, clusterKey(ca), running.workload.watcher()); err != nil {
		return nil, err
	}
	return running, nil
}

// useConnection has a running engine go on with the credentials of a new
// connection to the same server; an error says why it cannot.
func (r *ClusterAutoscalerReconciler) useConnection(ctx context.Context, running *runningEngine, connection *rest.Config) error {
	if connection.Host != running.restConfig.Host || connection.APIPath != running.restConfig.APIPath {
		return fmt.Errorf("the server changed from %s to %s", running.restConfig.Host, connection.Host)
	}
	if err := running.credentials.use(connection); err != nil {
		return fmt.Errorf("cannot use the new credentials: %w", err)
	}
	running.restConfig = connection
	ctrl.LoggerFrom(ctx).Info("The engine goes on with the new credentials of the workload cluster connection")
	return nil
}

// watchUnschedulablePods triggers the engines of a Cluster when one of its
// pods becomes unschedulable, so that scale-ups need not wait for the next
// scan, and tells them of pods whose nomination kube-scheduler cleared, so
// that they need not wait for the next loop to nominate them again.
func (r *ClusterAutoscalerReconciler) watchUnschedulablePods(ctx context.Context, cluster client.ObjectKey) error {
	unschedulable := func(obj any) bool {
		pod, ok := obj.(*snapshot.Pod)
		return ok && scaleup.IsUnschedulable(pod.Conditions)
	}
	return r.watchPods(ctx, cluster, unschedulablePodsWatch, toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if unschedulable(obj) {
				r.triggerEngines(cluster)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			if unschedulable(newObj) && !unschedulable(oldObj) {
				r.triggerEngines(cluster)
			}
			oldPod, oldOK := oldObj.(*snapshot.Pod)
			pod, ok := newObj.(*snapshot.Pod)
			if oldOK && ok && oldPod.NominatedNodeName != "" && pod.NominatedNodeName == "" {
				for _, running := range r.engines.ofCluster(cluster) {
					running.engine.PodUpdated(oldPod, pod)
				}
			}
		},
	})
}

// indexByClusterName indexes ClusterAutoscalers under clusterNameField.
func indexByClusterName(obj client.Object) []string {
	return []string{obj.(*autoscalingv1alpha1.ClusterAutoscaler).Spec.ClusterName}
}

// clusterToClusterAutoscalers maps a Cluster to the ClusterAutoscalers that
// name it (and that this manager serves, with --watch-filter).
func (r *ClusterAutoscalerReconciler) clusterToClusterAutoscalers(ctx context.Context, cluster client.Object) []ctrl.Request {
	return r.clusterAutoscalersOf(ctx, client.ObjectKeyFromObject(cluster))
}

// clusterAutoscalersOf lists the ClusterAutoscalers that name a Cluster and
// that this manager serves, with --watch-filter.
func (r *ClusterAutoscalerReconciler) clusterAutoscalersOf(ctx context.Context, cluster client.ObjectKey) []ctrl.Request {
	cas, err := r.listClusterAutoscalers(ctx, cluster)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the ClusterAutoscalers of a Cluster", "Cluster", klog.KRef(cluster.Namespace, cluster.Name))
		return nil
	}
	requests := make([]ctrl.Request, 0, len(cas))
	for i := range cas {
		requests = append(requests, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&cas[i])})
	}
	return requests
}

// listClusterAutoscalers lists the ClusterAutoscalers that name a Cluster
// and that this manager serves, with --watch-filter.
func (r *ClusterAutoscalerReconciler) listClusterAutoscalers(ctx context.Context, cluster client.ObjectKey) ([]autoscalingv1alpha1.ClusterAutoscaler, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	opts := []client.ListOption{client.InNamespace(cluster.Namespace), client.MatchingFields{clusterNameField: cluster.Name}}
	// The event filter saw the object of the event, if any, not these.
	if r.WatchFilterValue != "" {
		opts = append(opts, client.MatchingLabels{clusterv1.WatchLabel: r.WatchFilterValue})
	}
	if err := r.Client.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	return list.Items, nil
}
