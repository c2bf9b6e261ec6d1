// Command manager runs capi-autoscaler: one controller-runtime manager in a
// Cluster API management cluster that autoscales every workload cluster with
// a ClusterAutoscaler object.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
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
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

var scheme = runtime.NewScheme()

// nodeGroups builds the node groups of each engine: Cluster API's when nil,
// in every build but the end-to-end suite's (faults_e2efaults.go).
var nodeGroups func(clusterapi.Options) nodegroups.Provider

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(clusterv1.AddToScheme(scheme))
	utilruntime.Must(autoscalingv1alpha1.AddToScheme(scheme))
	// Read in workload clusters, through the ClusterCache, which uses the
	// manager's scheme.
	utilruntime.Must(capacitybufferv1beta1.AddToScheme(scheme))
	utilruntime.Must(provisioningv1.AddToScheme(scheme))
}

// options are the manager's command-line flags.
type options struct {
	// diagnostics are Cluster API's flags for the metrics endpoint:
	// --diagnostics-address, --insecure-diagnostics, --tls-min-version and
	// --tls-cipher-suites.
	diagnostics             flags.ManagerOptions
	profiling               bool
	profilerAddress         string
	healthProbeBindAddress  string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	leaderElection          leaderElectionTimings
	gracefulShutdownTimeout time.Duration
	watchNamespace          string
	watchFilterValue        string
	syncPeriod              time.Duration
	concurrency             int
	clusterCacheConcurrency int
	workloadClientQPS       float32
	workloadClientBurst     int
	workloadEventQPS        float32
	workloadEventBurst      int
	workloadCleanupTimeout  time.Duration
	goMemoryLimitPercent    int
	logging                 *logsv1.LoggingConfiguration
}

func (o *options) addFlags(fs *pflag.FlagSet) {
	flags.AddManagerOptions(fs, &o.diagnostics)
	fs.BoolVar(&o.profiling, "profiling", false,
		"Serve pprof profiles under /debug/pprof/ on the diagnostics endpoint, to callers allowed to get that path (to anyone with --insecure-diagnostics).")
	fs.StringVar(&o.profilerAddress, "profiler-address", "",
		"For development, with --insecure-diagnostics only: the address pprof profiles are served on over plain HTTP without authentication (e.g. localhost:6060, as Cluster API's tilt-prepare adds in debug mode); off when empty.")
	fs.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", ":8081",
		"The address the /healthz and /readyz endpoints bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader on a Lease so that only one replica autoscales at a time.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "capi-autoscaler-leader",
		"The name of the Lease used for leader election.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "",
		"The namespace of the leader election Lease; defaults to the manager's namespace.")
	fs.DurationVar(&o.leaderElection.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a replica waits, after the leader's last renewal, before it takes the Lease over: the longest failover after a crash.")
	fs.DurationVar(&o.leaderElection.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps retrying to renew the Lease before it stops leading (and exits).")
	fs.DurationVar(&o.leaderElection.retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often replicas try to acquire or renew the Lease.")
	fs.DurationVar(&o.gracefulShutdownTimeout, "graceful-shutdown-timeout", 30*time.Second,
		"How long running loops get to finish on shutdown.")
	fs.StringVar(&o.watchNamespace, "namespace", "",
		"Only serve ClusterAutoscalers in this namespace; all namespaces when empty.")
	fs.StringVar(&o.watchFilterValue, "watch-filter", "",
		fmt.Sprintf("Only serve ClusterAutoscalers and Clusters whose %s label has this value; all when empty.", clusterv1.WatchLabel))
	fs.DurationVar(&o.syncPeriod, "sync-period", 10*time.Minute,
		"The minimum interval at which every watched object is reconciled again.")
	fs.IntVar(&o.concurrency, "clusterautoscaler-concurrency", 10,
		"How many ClusterAutoscalers are reconciled at once (each engine runs on its own regardless).")
	fs.IntVar(&o.clusterCacheConcurrency, "clustercache-concurrency", 100,
		"How many Clusters the workload cluster connection cache reconciles at once.")
	fs.Float32Var(&o.workloadClientQPS, "workload-client-qps", 20,
		"Queries per second to the API server of each workload cluster.")
	fs.IntVar(&o.workloadClientBurst, "workload-client-burst", 30,
		"Burst of queries to the API server of each workload cluster.")
	fs.Float32Var(&o.workloadEventQPS, "workload-event-qps", controller.DefaultWorkloadEventQPS,
		"Events per second recorded in each workload cluster, apart from --workload-client-qps: a storm of events does not hold up the autoscaler's writes, nor these the events.")
	fs.IntVar(&o.workloadEventBurst, "workload-event-burst", controller.DefaultWorkloadEventBurst,
		"Burst of events recorded in each workload cluster, apart from --workload-client-burst.")
	fs.DurationVar(&o.workloadCleanupTimeout, "workload-cleanup-timeout", controller.DefaultWorkloadCleanupTimeout,
		"How long deleting a ClusterAutoscaler waits for an unreachable workload cluster to remove scale-down taints before leaving them.")
	fs.IntVar(&o.goMemoryLimitPercent, "go-memory-limit-percent", defaultGoMemoryLimitPercent,
		fmt.Sprintf("The Go runtime's soft memory limit, as a percentage of the container's memory limit, which the %s environment variable holds in bytes (from the downward API): the garbage collector works harder as the heap nears it. Ignored when GOMEMLIMIT is set or %s is not; 0 sets none.", memoryLimitEnv, memoryLimitEnv))
	logsv1.AddFlags(o.logging, fs)
}

func main() {
	// os.Exit skips deferred calls: exit only after runMain has returned
	// and its deferred flush of the logs has run.
	os.Exit(runMain())
}

// runMain parses the flags, sets up logging and runs the manager. It
// returns the exit code of the process.
func runMain() int {
	opts := &options{logging: logsv1.NewLoggingConfiguration()}
	fs := pflag.CommandLine
	opts.addFlags(fs)
	// controller-runtime registers --kubeconfig on the Go flag set.
	fs.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()

	if err := logsv1.ValidateAndApply(opts.logging, nil); err != nil {
		fmt.Fprintf(os.Stderr, "Invalid logging flags: %v\n", err)
		return 1
	}
	ctrl.SetLogger(klog.Background())
	defer logs.FlushLogs()

	if err := run(opts); err != nil {
		klog.Background().Error(err, "Manager stopped with an error")
		return 1
	}
	return 0
}

// leaderElectionTimings are the Lease timings, Cluster API's flags and
// client-go's defaults.
type leaderElectionTimings struct {
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
}

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// The manager's heap is mostly its caches of the workload clusters, which
// live long, while its loops allocate little: Go's default of 100 lets the
// heap, and so the RSS, reach twice what is live for little saved GC work.
const defaultGCPercent = 50

func run(opts *options) error {
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
	mgr, err := ctrl.NewManager(restConfig, mgrOpts)
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	reconciler, err := setupControllers(ctx, mgr, opts)
	if err != nil {
		return err
	}
	if err := setupChecks(mgr, reconciler); err != nil {
		return err
	}

	log.Info("Starting manager", "leaderElection", opts.leaderElect)
	return mgr.Start(ctx)
}

// setupControllers wires the workload cluster connections and the
// ClusterAutoscaler controller into the manager.
func setupControllers(ctx context.Context, mgr ctrl.Manager, opts *options) (*controller.ClusterAutoscalerReconciler, error) {
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
	reconciler := &controller.ClusterAutoscalerReconciler{
		Leases:                 leases,
		Client:                 mgr.GetClient(),
		APIReader:              mgr.GetAPIReader(),
		ClusterCache:           clusterCache,
		WorkloadKubeconfigs:    kubeconfigs,
		Recorder:               mgr.GetEventRecorder(autoscalingv1alpha1.EventSource),
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
func clusterLeases(mgr ctrl.Manager, opts *options) (*controller.ClusterLeases, error) {
	clientset, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating the client of the Clusters' Leases: %w", err)
	}
	hostname, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("naming this manager in the Clusters' Leases: %w", err)
	}
	return &controller.ClusterLeases{
		Client:   clientset.CoordinationV1(),
		Identity: hostname + "_" + string(uuid.NewUUID()),
		Timings: controller.ClusterLeaseTimings{
			LeaseDuration: opts.leaderElection.leaseDuration,
			RenewDeadline: opts.leaderElection.renewDeadline,
			RetryPeriod:   opts.leaderElection.retryPeriod,
		},
	}, nil
}

// setupChecks serves the probes: /healthz fails while engines run and the
// loops of all of them are overdue (CheckEnginesProgress), /readyz until
// the caches of the management cluster have synced.
func setupChecks(mgr ctrl.Manager, reconciler *controller.ClusterAutoscalerReconciler) error {
	if err := mgr.AddHealthzCheck("engines", reconciler.CheckEnginesProgress); err != nil {
		return fmt.Errorf("adding the liveness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("caches", cachesSynced(mgr.GetCache())); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	return nil
}

// cacheSyncCheckTimeout bounds a readiness check within the probe's
// default timeout of one second; a synced cache answers at once.
const cacheSyncCheckTimeout = 500 * time.Millisecond

// cachesSynced is ready once the caches of the management cluster have
// started and synced: every replica has them, the leader and those waiting
// for the Lease, so that a rollout replaces a replica only by one that can
// take over at once. The caches of workload clusters are left out: one
// unreachable cluster is that ClusterAutoscaler's condition, not the
// manager's.
func cachesSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), cacheSyncCheckTimeout)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the caches of the management cluster have not synced")
		}
		return nil
	}
}

func managerOptions(opts *options) (ctrl.Options, error) {
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

// pprofHandlers serve the pprof endpoints, as net/http/pprof registers them.
var pprofHandlers = map[string]http.Handler{
	"/debug/pprof/":        http.HandlerFunc(pprof.Index),
	"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
	"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
	"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
	"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
}

// setProfiling serves pprof on the diagnostics endpoint when profiling is
// on, and only then: Cluster API's options serve it whenever the endpoint
// is secure, and never when it is not.
func setProfiling(metricsOpts *metricsserver.Options, profiling bool) {
	for path := range metricsOpts.ExtraHandlers {
		if strings.HasPrefix(path, "/debug/pprof/") {
			delete(metricsOpts.ExtraHandlers, path)
		}
	}
	if !profiling {
		return
	}
	if metricsOpts.ExtraHandlers == nil {
		metricsOpts.ExtraHandlers = map[string]http.Handler{}
	}
	maps.Copy(metricsOpts.ExtraHandlers, pprofHandlers)
}

const (
	// memoryLimitEnv holds the container's memory limit in bytes; the
	// manifest sets it from the downward API (limits.memory).
	memoryLimitEnv = "MEMORY_LIMIT"

	// defaultGoMemoryLimitPercent leaves a tenth of the container's limit
	// outside the Go heap's target: the pages of the binary (about 43 MiB)
	// and the runtime's own memory count toward the limit but not toward
	// GOMEMLIMIT, so a soft limit equal to the container's would let the
	// process reach it before the collector works hard.
	defaultGoMemoryLimitPercent = 90
)

// goMemoryLimit is the Go runtime's soft memory limit to set, in bytes:
// percent of the container's memory limit, read with lookupEnv. It is 0,
// to set none, when GOMEMLIMIT is set (the runtime applied it already),
// the container's limit is unknown, or percent is 0.
func goMemoryLimit(percent int, lookupEnv func(string) (string, bool)) (int64, error) {
	if percent < 0 || percent > 100 {
		return 0, fmt.Errorf("--go-memory-limit-percent must be between 0 and 100, not %d", percent)
	}
	if _, set := lookupEnv("GOMEMLIMIT"); set || percent == 0 {
		return 0, nil
	}
	value, set := lookupEnv(memoryLimitEnv)
	if !set || value == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q is not the container's memory limit in bytes, as the downward API's limits.memory gives it", memoryLimitEnv, value)
	}
	return limit / 100 * int64(percent), nil
}
