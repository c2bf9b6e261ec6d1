package manager

import (
	"flag"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	logsv1 "k8s.io/component-base/logs/api/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/flags"

	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// commandLine holds the manager's command-line flags.
type commandLine struct {
	// diagnostics are Cluster API's flags for the metrics endpoint:
	// --diagnostics-address, --insecure-diagnostics, --tls-min-version and
	// --tls-cipher-suites.
	diagnostics             flags.ManagerOptions
	profiling               bool
	profilerAddress         string
	healthProbeBindAddress  string
	leaderElect             bool
	spreadClusters          bool
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

func (o *commandLine) addFlags(fs *pflag.FlagSet) {
	flags.AddManagerOptions(fs, &o.diagnostics)
	fs.BoolVar(&o.profiling, "profiling", false,
		"Serve pprof profiles under /debug/pprof/ on the diagnostics endpoint, to callers allowed to get that path (to anyone with --insecure-diagnostics).")
	fs.StringVar(&o.profilerAddress, "profiler-address", "",
		"For development, with --insecure-diagnostics only: the address pprof profiles are served on over plain HTTP without authentication (e.g. localhost:6060, as Cluster API's tilt-prepare adds in debug mode); off when empty.")
	fs.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", ":8081",
		"The address the /healthz and /readyz endpoints bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader on a Lease so that only one replica autoscales at a time.")
	fs.BoolVar(&o.spreadClusters, "spread-clusters", false,
		"Instead of --leader-elect: every replica autoscales, the Clusters spread evenly over the live replicas by their Leases (each takes at most ceil(Clusters / replicas)); those of a replica that dies are taken over within the Lease duration. The replicas of one --leader-election-id share the Clusters, each renewing a membership Lease in --leader-election-namespace.")
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

// Flags returns the flags Main parses, bound to defaults only.
// hack/docsgen writes the flags reference from it.
func Flags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
	(&commandLine{logging: logsv1.NewLoggingConfiguration()}).bind(fs)
	return fs
}

// bind adds the manager's flags to fs: its own, Cluster API's diagnostics
// and logging flags, and those of the Go flag set (controller-runtime's
// --kubeconfig).
func (o *commandLine) bind(fs *pflag.FlagSet) {
	o.addFlags(fs)
	fs.AddGoFlagSet(flag.CommandLine)
}

// leaderElectionTimings are the Lease timings, Cluster API's flags and
// client-go's defaults.
type leaderElectionTimings struct {
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
}
