package scaleup

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
)

// TestAWorkersPanicIsTheCallers: the engine recovers the panics of its
// loop, on its goroutine; a worker's panic on its own would end the
// process.
func TestAWorkersPanicIsTheCallers(t *testing.T) {
	g := NewWithT(t)
	done := make([]bool, 8)
	g.Expect(func() {
		forEach(make([]*simulator.Scheduler, 2), len(done), func(_ *simulator.Scheduler, i int) {
			done[i] = true
			if i == 5 {
				panic("no room")
			}
		})
	}).To(PanicWith(ContainSubstring("simulation worker: no room")))
	g.Expect(done).To(HaveEach(true), "the other workers finish")
}
