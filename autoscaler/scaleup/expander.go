package scaleup

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// expander keeps the options it prefers; more than one on a tie.
type expander interface {
	best(options []*estimate) []*estimate
}

func newExpander(name string, opts Options, priorities []priorityPattern) (expander, error) {
	switch name {
	case ExpanderRandom:
		return randomExpander{rand: opts.Rand}, nil
	case ExpanderMostPods:
		return mostPodsExpander{}, nil
	case ExpanderLeastWaste:
		return leastWasteExpander{}, nil
	case ExpanderPriority:
		return priorityExpander{patterns: priorities}, nil
	case ExpanderPrice:
		return priceExpander{prices: opts.InstanceTypePrices}, nil
	default:
		return nil, fmt.Errorf("unknown expander %q", name)
	}
}

type randomExpander struct{ rand *rand.Rand }

func (e randomExpander) best(options []*estimate) []*estimate {
	if len(options) <= 1 {
		return options
	}
	return []*estimate{options[e.rand.IntN(len(options))]}
}

type mostPodsExpander struct{}

func (mostPodsExpander) best(options []*estimate) []*estimate {
	return keepBest(options, func(option *estimate) float64 { return float64(len(option.pods)) })
}

// leastWasteExpander prefers the option leaving the smallest share of the
// new nodes' cpu and memory idle.
type leastWasteExpander struct{}

func (leastWasteExpander) best(options []*estimate) []*estimate {
	return keepBest(options, func(option *estimate) float64 {
		allocatable, nodes := option.template.Allocatable(), int64(option.nodes)
		idleCPU := 1 - fraction(option.requested.MilliCPU, allocatable.MilliCPU*nodes)
		idleMemory := 1 - fraction(option.requested.Memory, allocatable.Memory*nodes)
		return -(idleCPU + idleMemory)
	})
}

// priorityExpander prefers the node groups with the highest configured
// priority; groups no pattern matches come last.
type priorityExpander struct{ patterns []priorityPattern }

func (e priorityExpander) best(options []*estimate) []*estimate {
	return keepBest(options, func(option *estimate) float64 {
		priority := math.Inf(-1)
		for _, pattern := range e.patterns {
			if pattern.re.MatchString(option.group.ID()) {
				priority = math.Max(priority, float64(pattern.priority))
			}
		}
		return priority
	})
}

// priceExpander prefers the option whose new nodes cost least for what
// the pods they help are worth, as upstream's price expander weighs the
// price of an option's nodes against the price of its pods: a node costs
// its group's price (pricing.Table.NodePrice), pods are worth their
// requests at the default rates. Pods that request nothing are worth
// nothing: the options that help only those tie, after all others.
type priceExpander struct{ prices pricing.Table }

func (e priceExpander) best(options []*estimate) []*estimate {
	return keepBest(options, func(option *estimate) float64 {
		worth := podWorth(option.requested)
		if worth == 0 {
			return math.Inf(-1)
		}
		// Whole millionths divide into the same float when the ratios are
		// equal, so that options that cost the same per worth tie.
		return -float64(e.cost(option)) / float64(worth)
	})
}

// cost is what the option's new nodes cost per hour, each at the price of
// its group: balanced over similar groups, those may differ.
func (e priceExpander) cost(option *estimate) pricing.Price {
	var cost pricing.Price
	for _, increase := range option.increases {
		member := option.opts.members[slices.IndexFunc(option.opts.members, func(c *candidate) bool { return c.group == increase.Group })]
		cost += pricing.Price(increase.Delta) * e.prices.NodePrice(increase.Group.Options().Price, member.template.Node()).PerHour
	}
	return cost
}

// podWorth is what pods that request requested are worth per hour at the
// default rates.
func podWorth(requested snapshot.Resources) pricing.Price {
	gpu := nodefacts.GPUResource(func(name corev1.ResourceName) int64 { return requested.Scalar[name] })
	return pricing.Resources{MilliCPU: requested.MilliCPU, MemoryBytes: requested.Memory, GPUs: requested.Scalar[gpu]}.AtDefaultRates()
}

// keepBest keeps the options with the highest score, in order.
func keepBest(options []*estimate, score func(*estimate) float64) []*estimate {
	var best []*estimate
	bestScore := math.Inf(-1)
	for _, option := range options {
		switch s := score(option); {
		case s > bestScore || best == nil:
			best, bestScore = []*estimate{option}, s
		case s == bestScore:
			best = append(best, option)
		}
	}
	return best
}
