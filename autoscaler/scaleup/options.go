package scaleup

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// Options configure scale-up. They have no defaults of their own: the
// engine's configuration owns them.
type Options struct {
	// PriorityCutoff: pods with a lower priority never trigger a scale-up.
	PriorityCutoff int32
	// NewPodScaleUpDelay is how old an unschedulable pod must be to count.
	NewPodScaleUpDelay time.Duration
	// MaxNodesPerScaleUp caps the nodes one scale-up adds; 0 means no cap.
	MaxNodesPerScaleUp int
	// MaxPendingPodsPerLoop bounds the pending pods one plan takes on, so
	// that a huge backlog cannot make a loop outlast its timeout: the pods
	// beyond it wait for the next loop (Plan.Deferred). Pods the last plan
	// nominated do not count. 0 means no bound.
	MaxPendingPodsPerLoop int
	// Limits bound the whole cluster.
	Limits ResourceLimits
	// Expanders choose among the options, in order, each passing its ties
	// to the next: ExpanderRandom, ExpanderMostPods, ExpanderLeastWaste,
	// ExpanderPriority, ExpanderPrice. Ties left at the end go to the
	// first group by ID.
	Expanders []string
	// Priorities configure ExpanderPriority: a node group gets the highest
	// priority whose regular expressions (unanchored, as upstream) match its ID.
	Priorities map[int32][]string
	// InstanceTypePrices price, for ExpanderPrice, the nodes of the groups
	// that have no price of their own, by instance type.
	InstanceTypePrices pricing.Table
	// BalanceSimilarNodeGroups spreads new nodes over similar node groups.
	BalanceSimilarNodeGroups bool
	// BalancingIgnoredLabels may differ between similar node groups, in
	// addition to the hostname and zone labels.
	BalancingIgnoredLabels []string
	// NodeRules turn real nodes into the templates of their groups.
	NodeRules nodefacts.Rules
	// Clock tells the age of pods.
	Clock clock.PassiveClock
	// Rand drives ExpanderRandom; nil seeds one from the clock.
	Rand *rand.Rand
	// Workers is how many goroutines a round of planning probes and
	// estimates the node groups on, each on a branch of the simulator,
	// when there is enough work; the plan is the same as on one. 0 or 1
	// plans on the caller's goroutine alone.
	Workers int
	// MinParallelWork is the least work, node groups estimated times
	// pending pods, for which a round uses Workers: below it, the branches
	// cost more than they save (DefaultMinParallelWork).
	MinParallelWork int
}

// Expander names.
const (
	ExpanderRandom     = "random"
	ExpanderMostPods   = "most-pods"
	ExpanderLeastWaste = "least-waste"
	ExpanderPriority   = "priority"
	ExpanderPrice      = "price"
)

// ResourceLimits bound the totals of the cluster. Totals count every node,
// control plane and nodes outside node groups included, and the nodes on
// their way. A zero Max of nodes, cores or memory means no limit; a GPU
// resource that is listed is always bounded.
type ResourceLimits struct {
	MaxNodesTotal int
	Cores         Range
	// MemoryBytes bounds memory in bytes.
	MemoryBytes Range
	// GPUs bound the GPUs of each type: an extended resource name, e.g.
	// nvidia.com/gpu, counts the nodes' capacity of it; the name of a DRA
	// driver, e.g. gpu.nvidia.com, the devices it publishes in the nodes'
	// local ResourceSlices (snapshot.NodeInfo.LimitCapacity).
	GPUs map[corev1.ResourceName]Range
}

// Range bounds a total. Min is for scale-down.
type Range struct {
	Min, Max int64
}

func (o Options) validate() error {
	if o.Clock == nil {
		return fmt.Errorf("a clock is required")
	}
	if o.MaxNodesPerScaleUp < 0 {
		return fmt.Errorf("maxNodesPerScaleUp must not be negative, got %d", o.MaxNodesPerScaleUp)
	}
	if o.Workers < 0 {
		return fmt.Errorf("workers must not be negative, got %d", o.Workers)
	}
	if o.MaxPendingPodsPerLoop < 0 {
		return fmt.Errorf("maxPendingPodsPerLoop must not be negative, got %d", o.MaxPendingPodsPerLoop)
	}
	return nil
}

// compilePriorities turns the configured patterns into matchers.
func compilePriorities(priorities map[int32][]string) ([]priorityPattern, error) {
	var compiled []priorityPattern
	for priority, patterns := range priorities {
		for _, pattern := range patterns {
			re, err := regexp.Compile(pattern)
			if err != nil {
				return nil, fmt.Errorf("priority %d: invalid node group pattern %q: %w", priority, pattern, err)
			}
			compiled = append(compiled, priorityPattern{priority: priority, re: re})
		}
	}
	return compiled, nil
}

type priorityPattern struct {
	priority int32
	re       *regexp.Regexp
}
