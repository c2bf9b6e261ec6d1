package scaleup

import (
	"fmt"
	"math"
	"math/rand/v2"
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
