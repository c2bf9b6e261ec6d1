package scaledown

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

// Options configure scale-down planning. Start from DefaultOptions.
type Options struct {
	// UtilizationThreshold: a node whose utilization is below it is a
	// candidate for removal. Node groups may override it.
	UtilizationThreshold float64
	// UnneededTime is how long a ready node must stay unneeded before it
	// is removed; UnreadyTime the same for an unready node. Node groups
	// may override both.
	UnneededTime time.Duration
	UnreadyTime  time.Duration
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
	// GPUResources are the resources that make a node a GPU node; GPU
	// nodes are judged on the utilization of their GPUs only.
	GPUResources []corev1.ResourceName
	// MaxEmptyBulkDelete caps the empty nodes removed at once.
	MaxEmptyBulkDelete int
	// MaxParallelDrains caps the non-empty nodes drained at once.
	MaxParallelDrains int
	// Minimums are the cluster-wide totals that removals must leave.
	Minimums ClusterMinimums
	// NodeRules tell ready, starting and unready nodes apart.
	NodeRules nodefacts.Rules
	// Clock tells how long nodes have been unneeded.
	Clock clock.PassiveClock
}

// ClusterMinimums bound the totals of the cluster from below. They count
// every node, control plane included, by capacity. Zero means no minimum.
type ClusterMinimums struct {
	Cores       int64
	MemoryBytes int64
}

// DefaultOptions are the upstream cluster-autoscaler defaults.
func DefaultOptions() Options {
	return Options{
		UtilizationThreshold: 0.5,
		UnneededTime:         10 * time.Minute,
		UnreadyTime:          20 * time.Minute,
		DelayAfterAdd:        10 * time.Minute,
		DelayAfterFailure:    3 * time.Minute,
		PriorityCutoff:       -10,
		GPUResources:         []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915"},
		MaxEmptyBulkDelete:   10,
		MaxParallelDrains:    1,
		Clock:                clock.RealClock{},
	}
}

func (o Options) validate() error {
	switch {
	case o.Clock == nil:
		return fmt.Errorf("a clock is required")
	case o.UtilizationThreshold < 0 || o.UtilizationThreshold > 1:
		return fmt.Errorf("utilizationThreshold must be within [0, 1], got %v", o.UtilizationThreshold)
	case o.MaxEmptyBulkDelete < 1:
		return fmt.Errorf("maxEmptyBulkDelete must be at least 1, got %d", o.MaxEmptyBulkDelete)
	case o.MaxParallelDrains < 1:
		return fmt.Errorf("maxParallelDrains must be at least 1, got %d", o.MaxParallelDrains)
	case o.UnneededTime < 0 || o.UnreadyTime < 0 || o.DelayAfterAdd < 0 || o.DelayAfterDelete < 0 || o.DelayAfterFailure < 0:
		return fmt.Errorf("durations must not be negative")
	}
	return nil
}
