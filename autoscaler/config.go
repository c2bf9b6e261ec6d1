package autoscaler

import (
	"runtime"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// Config is the behaviour of the engine for one cluster. The controller
// derives it from a ClusterAutoscaler; DefaultConfig has the upstream
// cluster-autoscaler defaults, and is the one owner of every default: the
// planners have none of their own, and a test holds the ClusterAutoscaler
// CRD's defaults to these.
type Config struct {
	// DryRun makes the engine plan without acting: it writes nothing to
	// the cluster and publishes the decisions it did not carry out
	// (Status.Decisions). CapacityBuffers and ProvisioningRequests, which
	// it would write to, are left to the autoscaler that acts.
	DryRun bool

	// ScanInterval is the time between loops when nothing triggers one.
	ScanInterval time.Duration
	// TriggerQuietPeriod and TriggerBatchWindow batch triggers, so that a
	// burst of new unschedulable pods costs one loop: a triggered loop
	// starts once no trigger came for TriggerQuietPeriod, and at the latest
	// TriggerBatchWindow after the first trigger.
	TriggerQuietPeriod time.Duration
	TriggerBatchWindow time.Duration
	// MinLoopInterval is the least time between the starts of two loops
	// that triggers start, at most ScanInterval: under pod churn, where
	// triggers keep coming, loops start at most once per MinLoopInterval.
	// A trigger that comes MinLoopInterval after the last triggered loop
	// started waits only for the quiet period.
	MinLoopInterval time.Duration

	// PodPriorityThreshold: pods below it never trigger a scale-up and never
	// block a scale-down.
	PodPriorityThreshold int32
	// NewPodScaleUpDelay is how old an unschedulable pod must be to count.
	NewPodScaleUpDelay time.Duration
	// MaxNodesPerScaleUp caps the nodes one scale-up adds.
	MaxNodesPerScaleUp int
	// MaxPendingPodsPerLoop bounds the pending pods one loop plans for; the
	// others wait for the next loop, those that waited longest first. 0
	// means no bound.
	MaxPendingPodsPerLoop int
	// MaxNodeProvisionTime is how long a requested node may take to
	// register, and how long an instance may stay without a registered node
	// before it is removed; at least nodegroups.MinMaxNodeProvisionTime.
	MaxNodeProvisionTime time.Duration

	Limits ResourceLimits

	// Expanders choose among scale-up options, in order.
	Expanders []string
	// ExpanderPriorities map a priority to node group ID patterns.
	ExpanderPriorities map[int32][]string
	// InstanceTypePrices price the nodes of groups that have no price of
	// their own by instance type; the others cost the default rates'
	// price for their capacity (pricing.Table.NodePrice).
	InstanceTypePrices pricing.Table
	// BalanceSimilarNodeGroups spreads new nodes over similar groups.
	BalanceSimilarNodeGroups bool
	// BalancingIgnoredLabels may differ between similar groups.
	BalancingIgnoredLabels []string
	// PlanningWorkers is how many goroutines a scale-up plan uses when a
	// round has enough work (scaleup.Options.Workers), and a scale-down
	// pass when its candidates are (scaledown.Options.Workers); the plan
	// is the same on any number. Not in the API: the process decides, by default
	// GOMAXPROCS.
	PlanningWorkers int

	ScaleDown ScaleDownConfig
	// Consolidation removes, while scale-down is on, the nodes whose
	// removal saves money while their pods fit elsewhere.
	Consolidation ConsolidationConfig
	Backoff       BackoffConfig
	Health        HealthConfig

	Taints TaintConfig

	// ScheduledMinimums change the minimum size of the groups they select
	// during the windows of their schedules (docs/capacity.md, "Scheduled
	// minimums and sleep"). A window that cannot be read is ignored and
	// reported (Status.ScheduledMinimumProblems), not refused: the rest of
	// the configuration applies.
	ScheduledMinimums []minimums.Spec

	// Upstream is where an upstream cluster-autoscaler keeps what shows
	// it runs in the cluster (checkOtherAutoscalers).
	Upstream UpstreamLocation
}

// UpstreamLocation is where the upstream cluster-autoscaler keeps its
// leader election Lease and its status ConfigMap, as its --namespace,
// --leader-elect-resource-namespace, --leader-elect-resource-name and
// --status-config-map-name flags set them.
type UpstreamLocation struct {
	Namespace       string
	LeaseNamespace  string
	LeaseName       string
	StatusConfigMap string
}

// ResourceLimits bound the whole cluster; zero maxima mean no limit.
type ResourceLimits struct {
	MaxNodesTotal int
	MinCores      int64
	MaxCores      int64
	MinMemory     int64 // bytes
	MaxMemory     int64 // bytes
	// GPUs bound the GPUs of each type: an extended resource name (e.g.
	// nvidia.com/gpu) counts the nodes' capacity of it, the name of a DRA
	// driver (e.g. gpu.nvidia.com) the devices it publishes in the nodes'
	// local ResourceSlices.
	GPUs map[corev1.ResourceName]Range
}

// Range bounds a total.
type Range struct {
	Min, Max int64
}

// ScaleDownConfig configures the removal of underutilized nodes.
type ScaleDownConfig struct {
	Enabled              bool
	DelayAfterAdd        time.Duration
	DelayAfterDelete     time.Duration
	DelayAfterFailure    time.Duration
	UnneededTime         time.Duration
	UnreadyTime          time.Duration
	UtilizationThreshold float64
	// IgnoreDaemonSetsUtilization leaves DaemonSet pods out of utilization.
	IgnoreDaemonSetsUtilization bool
	// SkipNodesWithLocalStorage, SkipNodesWithSystemPods and
	// SkipNodesWithCustomControllerPods keep nodes running pods with local
	// storage, kube-system pods without a PodDisruptionBudget, and pods of
	// controllers other than the built-in workloads.
	SkipNodesWithLocalStorage         bool
	SkipNodesWithSystemPods           bool
	SkipNodesWithCustomControllerPods bool
	// CordonNodeBeforeTerminating cordons nodes being removed.
	CordonNodeBeforeTerminating bool
	// MaxEmptyBulkDelete caps the empty nodes removed at once.
	MaxEmptyBulkDelete int
	// MaxParallelDrains caps the non-empty nodes drained at once.
	MaxParallelDrains int
	// MaxGracefulTermination caps the grace period of evicted pods.
	MaxGracefulTermination time.Duration
	// MaxPodEvictionTime is how long refused evictions are retried.
	MaxPodEvictionTime time.Duration
	// NodeDeletionTimeout is how long a node handed to its group for
	// deletion may stay, while its instance is not being deleted, before
	// it is given back.
	NodeDeletionTimeout time.Duration
}

// ConsolidationConfig configures consolidation (docs/cost.md).
type ConsolidationConfig struct {
	// Policy is scaledown.ConsolidationDisabled, ConsolidationDelete,
	// ConsolidationReplace or ConsolidationBalanced.
	Policy scaledown.ConsolidationPolicy
	// ConsolidateAfter is how long the cluster's nodes and a node's pods
	// must stay the same before the node is considered.
	ConsolidateAfter time.Duration
	// Budget is the most nodes of one group disrupted at once: a number,
	// or a percentage of the group's nodes, rounded up.
	Budget intstr.IntOrString
	// Budgets bound it further, at all times or inside the windows of
	// their schedule: the smallest that applies wins.
	Budgets []scaledown.ScheduledBudget
	// MaxSimulations bounds the removals one loop simulates; it is the
	// engine's, not the API's.
	MaxSimulations int
	// BalancedThreshold is, under scaledown.ConsolidationBalanced, the
	// least share of the cost saved over the share of the pods evicted.
	BalancedThreshold float64
}

// BackoffConfig configures the backoff of groups that failed to scale up.
type BackoffConfig struct {
	Initial    time.Duration
	Max        time.Duration
	ResetAfter time.Duration
}

// HealthConfig says when too many nodes are unready to autoscale: when
// both more than OkTotalUnreadyCount nodes and more than
// MaxTotalUnreadyPercentage percent of the nodes are unready.
type HealthConfig struct {
	OkTotalUnreadyCount       int
	MaxTotalUnreadyPercentage float64
}

// TaintConfig names the taints with a meaning for the autoscaler, on top of
// the upstream prefixes (startup-taint., ignore-taint. and status-taint.
// .cluster-autoscaler.kubernetes.io/) and Cluster API's uninitialized taint.
type TaintConfig struct {
	// StartupTaints are taint keys that a node carries until it has
	// started: it counts as on its way, not as ready capacity. Templates
	// leave them out.
	StartupTaints []string
	// StatusTaints are taint keys that report a node's status without
	// making it unready. Templates leave them out.
	StatusTaints []string
}

func (c TaintConfig) rules() nodefacts.Rules {
	return nodefacts.NewRules(c.StartupTaints, c.StatusTaints)
}

// DefaultConfig returns the upstream cluster-autoscaler defaults.
func DefaultConfig() Config {
	return Config{
		ScanInterval:       10 * time.Second,
		TriggerQuietPeriod: 200 * time.Millisecond,
		TriggerBatchWindow: 500 * time.Millisecond,
		// One loop per second under churn, while a pod that turns
		// unschedulable after a second without a triggered loop starts one
		// after the quiet period, and one that turns unschedulable right
		// after such a loop started still has its scale-up decided within
		// the 2 s target (docs/performance.md, "Under load").
		MinLoopInterval:      time.Second,
		PodPriorityThreshold: -10,
		MaxNodesPerScaleUp:   1000,
		// 10,000 pods of a mix with volumes are planned in 0.6 s, where
		// 50,000 take 8.5 s, for the same 1,000 new nodes
		// (docs/performance.md, "Huge backlogs").
		MaxPendingPodsPerLoop: 10000,
		MaxNodeProvisionTime:  15 * time.Minute,
		// Upstream's default since cluster-autoscaler 1.33 (was random).
		Expanders:       []string{scaleup.ExpanderLeastWaste},
		PlanningWorkers: runtime.GOMAXPROCS(0),
		ScaleDown: ScaleDownConfig{
			Enabled:                true,
			DelayAfterAdd:          10 * time.Minute,
			DelayAfterFailure:      3 * time.Minute,
			UnneededTime:           10 * time.Minute,
			UnreadyTime:            20 * time.Minute,
			UtilizationThreshold:   0.5,
			MaxEmptyBulkDelete:     10,
			MaxGracefulTermination: 10 * time.Minute,
			MaxPodEvictionTime:     2 * time.Minute,
			NodeDeletionTimeout:    5 * time.Minute,
			MaxParallelDrains:      1,

			SkipNodesWithLocalStorage:         true,
			SkipNodesWithSystemPods:           true,
			SkipNodesWithCustomControllerPods: true,
		},
		// Off, so that a switch from upstream changes nothing; once on, as
		// Karpenter's default budget, and scale-down's unneeded time.
		Consolidation: ConsolidationConfig{
			Policy:           scaledown.ConsolidationDisabled,
			ConsolidateAfter: 10 * time.Minute,
			Budget:           intstr.FromString("10%"),
			// A pass over 1,000 nodes stays well under a second
			// (docs/cost.md, "Consolidation").
			MaxSimulations:    100,
			BalancedThreshold: scaledown.DefaultBalancedThreshold,
		},
		Backoff: BackoffConfig{
			Initial:    5 * time.Minute,
			Max:        30 * time.Minute,
			ResetAfter: 3 * time.Hour,
		},
		Health: HealthConfig{
			OkTotalUnreadyCount:       3,
			MaxTotalUnreadyPercentage: 45,
		},
		// Upstream's defaults.
		Upstream: UpstreamLocation{
			Namespace:       UpstreamNamespace,
			LeaseNamespace:  UpstreamNamespace,
			LeaseName:       upstreamLeaseName,
			StatusConfigMap: UpstreamStatusConfigMap,
		},
	}
}

// groupSettings are the cluster-wide values of the settings node groups
// may override.
func (c Config) groupSettings() nodegroups.Settings {
	return nodegroups.Settings{
		ScaleDownUtilizationThreshold: c.ScaleDown.UtilizationThreshold,
		ScaleDownUnneededTime:         c.ScaleDown.UnneededTime,
		ScaleDownUnreadyTime:          c.ScaleDown.UnreadyTime,
		MaxNodeProvisionTime:          c.MaxNodeProvisionTime,
	}
}
