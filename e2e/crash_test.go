//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The crash scenarios: the manager killed at every step of scale-up and
// scale-down. They kill and restart the suite's manager, hence Serial.
// `make test` runs the short one (label ci); `make test-e2e` runs them all.
var _ = Describe("Crash at every step", Serial, func() {
	input := func(cycles int, points ...CrashPoint) func() CrashSpecInput {
		return func() CrashSpecInput {
			return CrashSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
				Points:    points,
				Cycles:    cycles,
			}
		}
	}

	// Between the mark and the replicas written, where a kill could delete
	// the wrong Machine: one cycle, under the minute a ci spec may take.
	Context("one kill after the mark", Label("ci"), func() {
		CrashSpec(ctx, input(1, CrashAfterMark))
	})
	Context("one kill at each point", Label("full"), func() {
		CrashSpec(ctx, input(len(CrashPoints)))
	})
	Context("fifty kills, ten at each point, first and second drains alike", Label("full"), func() {
		CrashSpec(ctx, input(50))
	})
})
