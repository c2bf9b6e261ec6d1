package scaleup

import (
	"sync/atomic"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
)

// DefaultMinParallelWork is a MinParallelWork that keeps small clusters on
// one goroutine: a round of 20 groups and 500 pending pods takes about
// 50 ms on one, and two workers gain a fifth of it (BenchmarkKarpenterMix);
// below, what they gain shrinks towards the cost of the branches.
const DefaultMinParallelWork = 10000

// workers are the schedulers a round's probes and estimates run on: sched
// alone, or, when there is enough work (Options.MinParallelWork) for more
// than one worker, one branch of it per worker (simulator.Branches).
// candidates is how many groups the round estimates.
func (s *ScaleUp) workers(sched *simulator.Scheduler, candidates int, podGroups []*simulator.PodGroup) []*simulator.Scheduler {
	n := min(s.opts.Workers, candidates)
	if n <= 1 || candidates*podsOf(podGroups) < s.opts.MinParallelWork {
		return []*simulator.Scheduler{sched}
	}
	return sched.Branches(n, podGroups)
}

// podsOf counts the pods of podGroups.
func podsOf(podGroups []*simulator.PodGroup) int {
	pods := 0
	for _, podGroup := range podGroups {
		pods += len(podGroup.Pods)
	}
	return pods
}

// forEach calls do for every i below n, with one of scheds: with one, in
// order; with more, on a goroutine per scheduler, each taking the next i
// until none is left. do keeps its result by i, so that the results are
// in order whichever goroutine had which. A panic of do panics on the
// caller's goroutine, where the engine recovers it, with the worker's
// stack: on its own goroutine it would end the process.
func forEach(scheds []*simulator.Scheduler, n int, do func(sched *simulator.Scheduler, i int)) {
	if len(scheds) == 1 {
		for i := range n {
			do(scheds[0], i)
		}
		return
	}
	var next atomic.Int64
	simulator.OnEach(scheds, func(sched *simulator.Scheduler) {
		for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
			do(sched, i)
		}
	})
}
