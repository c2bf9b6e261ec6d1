package simulator

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// OnEach calls work with each of scheds (a scheduler and its Branches) on
// a goroutine of its own, and waits for them all. A panic of work panics
// again on the caller's goroutine, where the engine recovers it, with the
// worker's stack: on its own goroutine it would end the process.
func OnEach(scheds []*Scheduler, work func(sched *Scheduler)) {
	var wg sync.WaitGroup
	var panicked atomic.Pointer[string]
	for _, sched := range scheds {
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					why := fmt.Sprintf("simulation worker: %v\n%s", r, debug.Stack())
					panicked.CompareAndSwap(nil, &why)
				}
			}()
			work(sched)
		})
	}
	wg.Wait()
	if why := panicked.Load(); why != nil {
		panic(*why)
	}
}
