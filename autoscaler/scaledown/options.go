package scaledown

import (
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Options configure scale-down planning. They have no defaults of their
// own: the engine's configuration owns them and hands them to every Plan,
// so that a change of configuration keeps what the Planner remembers.
type Options struct {
	// Groups are the cluster-wide utilization threshold and unneeded and
	// unready times; Groups.For(group) are those of one node group, with
	// its overrides. A node whose utilization is below the threshold is a
	// candidate for removal; a ready node must stay unneeded for the
	// unneeded time, an unready one for the unready time.
	Groups nodegroups.Settings
	// DelayAfterAdd, DelayAfterDelete and DelayAfterFailure pause
	// scale-down after a scale-up, a node deletion and a failed deletion.
	DelayAfterAdd     time.Duration
	DelayAfterDelete  time.Duration
	DelayAfterFailure time.Duration
	// PriorityCutoff: pods with a lower priority never block a removal and
	// need no place to move to; they are evicted with the node.
	PriorityCutoff int32
	// IgnoreDaemonSetsUtilization and IgnoreMirrorPodsUtilization leave
	// those pods out of the utilization.
	IgnoreDaemonSetsUtilization bool
	IgnoreMirrorPodsUtilization bool
	// SkipNodesWithLocalStorage keeps nodes running pods with local
	// storage (emptyDir, hostPath) they do not declare safe to lose.
	SkipNodesWithLocalStorage bool
	// SkipNodesWithSystemPods keeps nodes running kube-system pods, other
	// than DaemonSet and mirror pods, that no PodDisruptionBudget covers.
	SkipNodesWithSystemPods bool
	// SkipNodesWithCustomControllerPods keeps nodes running pods whose
	// controller is not a built-in workload (ReplicaSet, StatefulSet, Job,
	// ReplicationController): the autoscaler cannot tell that such a
	// controller recreates them.
	SkipNodesWithCustomControllerPods bool
	// MaxEmptyBulkDelete caps the empty nodes removed at once.
	MaxEmptyBulkDelete int
	// MaxParallelDrains caps the non-empty nodes drained at once.
	MaxParallelDrains int
	// Minimums are the cluster-wide totals that removals must leave.
	Minimums ClusterMinimums
	// NodeRules tell ready, starting and unready nodes apart.
	NodeRules nodefacts.Rules
	// Consolidation removes, on top of the unneeded nodes, those whose
	// removal saves money while their pods fit elsewhere.
	Consolidation ConsolidationOptions
	// Workers is how many goroutines a pass tries the candidates on, each
	// on a branch of the simulator, when there is enough work; the plan is
	// the same as on one. 0 or 1 plans on the caller's goroutine alone.
	Workers int
	// MinParallelWork is the least work, candidates left times nodes, for
	// which a pass uses Workers (DefaultMinParallelWork).
	MinParallelWork int
}

// ClusterMinimums bound the totals of the cluster from below. They count
// every node, control plane included, as the limits count it
// (snapshot.NodeInfo.LimitCapacity). Zero means no minimum.
type ClusterMinimums struct {
	Cores       int64
	MemoryBytes int64
	// GPUs are the least GPUs of each type, the way scale-up counts them
	// against their maximum: an extended resource name (e.g.
	// nvidia.com/gpu) counts the nodes' capacity of it, a DRA driver name
	// (e.g. gpu.nvidia.com) the devices it publishes on the nodes.
	GPUs map[corev1.ResourceName]int64
}

// Violated says how removing a node that counts capacity (its
// snapshot.NodeInfo.LimitCapacity) from a cluster with the given totals
// would take it below a minimum, or "" when it would not. The planner asks
// before choosing a node, the actuator again before each step of its
// removal.
func (m ClusterMinimums) Violated(totals, capacity snapshot.Resources) string {
	if m.Cores > 0 && totals.MilliCPU-capacity.MilliCPU < m.Cores*1000 {
		return fmt.Sprintf("the cluster would have fewer than the minimum %d cores", m.Cores)
	}
	if m.MemoryBytes > 0 && totals.Memory-capacity.Memory < m.MemoryBytes {
		return fmt.Sprintf("the cluster would have less than the minimum %d bytes of memory", m.MemoryBytes)
	}
	for _, gpu := range slices.Sorted(maps.Keys(m.GPUs)) {
		minimum, onNode := m.GPUs[gpu], capacity.Scalar[gpu]
		if minimum > 0 && onNode > 0 && totals.Scalar[gpu]-onNode < minimum {
			return fmt.Sprintf("the cluster would have fewer than the minimum %d %s", minimum, gpu)
		}
	}
	return ""
}

// Validate tells whether a Planner can work with the options.
func (o Options) Validate() error {
	switch {
	case o.Groups.ScaleDownUtilizationThreshold < 0 || o.Groups.ScaleDownUtilizationThreshold > 1:
		return fmt.Errorf("utilizationThreshold must be within [0, 1], got %v", o.Groups.ScaleDownUtilizationThreshold)
	case o.MaxEmptyBulkDelete < 1:
		return fmt.Errorf("maxEmptyBulkDelete must be at least 1, got %d", o.MaxEmptyBulkDelete)
	case o.MaxParallelDrains < 1:
		return fmt.Errorf("maxParallelDrains must be at least 1, got %d", o.MaxParallelDrains)
	case o.Groups.ScaleDownUnneededTime < 0 || o.Groups.ScaleDownUnreadyTime < 0 || o.DelayAfterAdd < 0 || o.DelayAfterDelete < 0 || o.DelayAfterFailure < 0:
		return fmt.Errorf("durations must not be negative")
	}
	return o.Consolidation.validate()
}
