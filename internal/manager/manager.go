// Package manager is capi-autoscaler's manager: its flags, scheme,
// controllers, health checks, memory limit and diagnostics endpoint. main.go
// runs it; the end-to-end suite runs it with node groups that panic on
// request (e2e/framework/faults/manager).
package manager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/logs"
	logsv1 "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // registers --logging-format=json
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(clusterv1.AddToScheme(scheme))
	utilruntime.Must(autoscalingv1alpha1.AddToScheme(scheme))
	// Read in workload clusters, through the ClusterCache, which uses the
	// manager's scheme.
	utilruntime.Must(capacitybufferv1beta1.AddToScheme(scheme))
	utilruntime.Must(provisioningv1.AddToScheme(scheme))
}

// Options are what a build of the manager chooses, as opposed to what its
// command line sets.
type Options struct {
	// NodeGroups builds the node groups of each engine; Cluster API's
	// (clusterapi.NewProvider) when nil, as in the product's build.
	NodeGroups func(clusterapi.Options) nodegroups.Provider
}

// Main parses the command line, sets up logging and runs the manager until
// it is signalled to stop. It returns the exit code of the process.
func Main(build Options) int {
	opts := &commandLine{logging: logsv1.NewLoggingConfiguration()}
	opts.bind(pflag.CommandLine)
	pflag.Parse()

	if err := logsv1.ValidateAndApply(opts.logging, nil); err != nil {
		fmt.Fprintf(os.Stderr, "Invalid logging flags: %v\n", err)
		return 1
	}
	ctrl.SetLogger(klog.Background())
	defer logs.FlushLogs()

	if err := run(opts, build); err != nil {
		klog.Background().Error(err, "Manager stopped with an error")
		return 1
	}
	return 0
}

func run(opts *commandLine, build Options) error {
	log := klog.Background()
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(defaultGCPercent)
	}
	softLimit, err := goMemoryLimit(opts.goMemoryLimitPercent, os.LookupEnv)
	if err != nil {
		return err
	}
	if softLimit > 0 {
		debug.SetMemoryLimit(softLimit)
		log.Info("Set the Go memory limit from the container's", "percent", opts.goMemoryLimitPercent, "bytes", softLimit)
	}
	ctx := ctrl.SetupSignalHandler()
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	restConfig.UserAgent = "capi-autoscaler"

	mgrOpts, err := managerOptions(opts)
	if err != nil {
		return err
	}
	mgr, err := newManager(ctx, restConfig, mgrOpts, ctrl.NewManager)
	if err != nil {
		return err
	}
	recorder, stopRecording, err := controller.NewEventRecorder(ctx, mgr)
	if err != nil {
		return err
	}
	// Once the manager has stopped, and its engines with it.
	defer stopRecording()
	reconciler, err := setupControllers(ctx, mgr, opts, recorder, build.NodeGroups)
	if err != nil {
		return err
	}
	if err := setupChecks(mgr, reconciler); err != nil {
		return err
	}

	log.Info("Starting manager", "leaderElection", opts.leaderElect, "spreadClusters", opts.spreadClusters)
	return mgr.Start(ctx)
}

// setupControllers wires the workload cluster connections and the
// ClusterAutoscaler controller, which records its events in the management
// cluster with recorder and whose engines get their node groups from
// nodeGroups (Options.NodeGroups), into the manager.
func setupControllers(ctx context.Context, mgr ctrl.Manager, opts *commandLine, recorder record.EventRecorder, nodeGroups func(clusterapi.Options) nodegroups.Provider) (*controller.ClusterAutoscalerReconciler, error) {
	// The manager's client reads Secrets live (see managerOptions).
	clusterCache, kubeconfigs, err := controller.SetupClusterCache(ctx, mgr, clustercache.Options{
		Cache: controller.WorkloadCacheOptions(),
		// Connect only to the Clusters this manager serves.
		WatchFilterValue: opts.watchFilterValue,
		Client: clustercache.ClientOptions{
			QPS:       opts.workloadClientQPS,
			Burst:     opts.workloadClientBurst,
			UserAgent: "capi-autoscaler",
		},
	}, crcontroller.Options{MaxConcurrentReconciles: opts.clusterCacheConcurrency})
	if err != nil {
		return nil, fmt.Errorf("setting up the workload cluster cache: %w", err)
	}

	leases, err := clusterLeases(mgr, opts)
	if err != nil {
		return nil, err
	}
	if leases.Share != nil {
		if err := mgr.Add(manager.RunnableFunc(leases.RunShare)); err != nil {
			return nil, fmt.Errorf("sharing the Clusters between replicas: %w", err)
		}
	}
	reconciler := &controller.ClusterAutoscalerReconciler{
		Leases:                 leases,
		Client:                 mgr.GetClient(),
		APIReader:              mgr.GetAPIReader(),
		ClusterCache:           clusterCache,
		WorkloadKubeconfigs:    kubeconfigs,
		Recorder:               recorder,
		Metrics:                autoscaler.NewMetrics(ctrlmetrics.Registry),
		ConditionMetrics:       controller.NewConditionMetrics(ctrlmetrics.Registry),
		NodeGroups:             nodeGroups,
		WorkloadCleanupTimeout: opts.workloadCleanupTimeout,
		WorkloadEventQPS:       opts.workloadEventQPS,
		WorkloadEventBurst:     opts.workloadEventBurst,
		WatchFilterValue:       opts.watchFilterValue,
	}
	if err := reconciler.SetupWithManager(ctx, mgr, crcontroller.Options{MaxConcurrentReconciles: opts.concurrency}); err != nil {
		return nil, fmt.Errorf("setting up the ClusterAutoscaler controller: %w", err)
	}
	return reconciler, nil
}

// clusterLeases are the Leases that fence this manager's engines, one per
// Cluster, held under an identity unique to this process and with the
// timings of leader election.
func clusterLeases(mgr ctrl.Manager, opts *commandLine) (*controller.ClusterLeases, error) {
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the client of the Clusters' Leases: %w", err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming this manager in the Clusters' Leases: %w", err)
	}
	id := string(uuid.NewUUID())
	leases := &controller.ClusterLeases{
		Client:   clientset.CoordinationV1(),
		Identity: hostname + "_" + id,
		Timings: controller.ClusterLeaseTimings{
			LeaseDuration: opts.leaderElection.leaseDuration,
			RenewDeadline: opts.leaderElection.renewDeadline,
			RetryPeriod:   opts.leaderElection.retryPeriod,
		},
	}
	if opts.spreadClusters {
		namespace, err := membershipNamespace(opts.leaderElectionNamespace)
		if err != nil {
			return nil, err
		}
		leases.Share = &controller.ClusterShare{Namespace: namespace, Group: opts.leaderElectionID, Name: opts.leaderElectionID + "-" + id}
	}
	return leases, nil
}

// inClusterNamespace holds the namespace of the manager's pod.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// membershipNamespace is where the replicas that spread the Clusters
// renew their membership Leases: --leader-election-namespace, else the
// pod's namespace, as leader election's.
func membershipNamespace(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	namespace, err := os.ReadFile(inClusterNamespace)
	if err != nil {
		return "", fmt.Errorf("--spread-clusters needs --leader-election-namespace outside a pod: %w", err)
	}
	return strings.TrimSpace(string(namespace)), nil
}

func managerOptions(opts *commandLine) (ctrl.Options, error) {
	if opts.spreadClusters && opts.leaderElect {
		return ctrl.Options{}, errors.New("--spread-clusters and --leader-elect exclude each other: with the first every replica autoscales its share of the Clusters, with the second one replica autoscales them all")
	}
	if opts.spreadClusters {
		if errs := validation.IsValidLabelValue(opts.leaderElectionID); len(errs) > 0 {
			return ctrl.Options{}, fmt.Errorf("--spread-clusters labels the membership Leases with --leader-election-id: %s", strings.Join(errs, "; "))
		}
	}
	// Metrics are served over HTTPS to callers allowed to GET /metrics
	// (with the log level, and pprof with --profiling, next to them), or
	// over plain HTTP with --insecure-diagnostics.
	_, metricsOpts, err := flags.GetManagerOptions(opts.diagnostics)
	if err != nil {
		return ctrl.Options{}, fmt.Errorf("invalid diagnostics flags: %w", err)
	}
	if opts.profilerAddress != "" && !opts.diagnostics.InsecureDiagnostics {
		return ctrl.Options{}, errors.New("--profiler-address serves pprof without authentication and is for development, with --insecure-diagnostics; --profiling serves pprof on the diagnostics endpoint")
	}
	setProfiling(metricsOpts, opts.profiling)
	mgrOpts := ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       *metricsOpts,
		PprofBindAddress:              opts.profilerAddress,
		HealthProbeBindAddress:        opts.healthProbeBindAddress,
		LeaderElection:                opts.leaderElect,
		LeaderElectionID:              opts.leaderElectionID,
		LeaderElectionNamespace:       opts.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &opts.leaderElection.leaseDuration,
		RenewDeadline:                 &opts.leaderElection.renewDeadline,
		RetryPeriod:                   &opts.leaderElection.retryPeriod,
		GracefulShutdownTimeout:       &opts.gracefulShutdownTimeout,
	}
	mgrOpts.Cache.SyncPeriod = &opts.syncPeriod
	mgrOpts.Cache.ByObject = controller.ClusterCacheByObject()
	// Nothing reads who last wrote a field: the managed fields of the
	// cached objects (every MachineDeployment and Machine) are not kept.
	mgrOpts.Cache.DefaultTransform = cache.TransformStripManagedFields()
	if opts.watchNamespace != "" {
		mgrOpts.Cache.DefaultNamespaces = map[string]cache.Config{opts.watchNamespace: {}}
	}
	// Secrets are read only for workload cluster kubeconfigs; do not cache
	// them all. Infrastructure machine templates of any provider are read as
	// unstructured objects: cache them like the Cluster API objects.
	mgrOpts.Client.Cache = &client.CacheOptions{
		DisableFor:   []client.Object{&corev1.Secret{}},
		Unstructured: true,
	}
	return mgrOpts, nil
}

// managerStartBackoff spaces the attempts to create the manager, which
// asks the management cluster's discovery what its caches watch: about a
// minute and a half in all.
var managerStartBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 30 * time.Second}

// newManager creates the manager, trying again while the API server
// answers with errors: a manager started during a hiccup of the API
// server (an upgrade, overload) waits for it instead of exiting, which
// a Deployment would answer with CrashLoopBackOff's growing delays.
func newManager(ctx context.Context, config *rest.Config, opts ctrl.Options, create func(*rest.Config, ctrl.Options) (ctrl.Manager, error)) (ctrl.Manager, error) {
	var mgr ctrl.Manager
	var lastErr error
	err := wait.ExponentialBackoffWithContext(ctx, managerStartBackoff, func(context.Context) (bool, error) {
		mgr, lastErr = create(config, opts)
		if lastErr != nil {
			klog.FromContext(ctx).Error(lastErr, "Creating the manager failed, trying again")
		}
		return lastErr == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", errors.Join(lastErr, err))
	}
	return mgr, nil
}
