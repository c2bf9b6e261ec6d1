//go:build e2e

package e2e

import (
	"flag"
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

var (
	soakSeed     = flag.Uint64("e2e.soak.seed", 0, "Seed of the soak (label soak); a time-based one, printed, when 0")
	soakDuration = flag.Duration("e2e.soak.duration", 10*time.Minute, "How long the soak (label soak) applies operations")
)

// ciSoakSeed is the seed of the short soak make test runs: a second
// manager beside the suite's, a scale-up, the workload API server
// refused, faults, then an atomic ProvisioningRequest.
const ciSoakSeed = 39

// The seeded soak (issue 46): operations, features and faults interleaved
// from a seed, invariants checked over the whole history. It kills and
// restarts the suite's manager, hence Serial. `make soak` runs the long
// one; `make test` runs a short one of a fixed seed.
var _ = Describe("Soak", Serial, func() {
	input := func(seed func() uint64, duration time.Duration, minWait, maxWait, maxFor time.Duration) func() SoakSpecInput {
		return func() SoakSpecInput {
			return SoakSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig,
				Manager: func() *localstack.Process { return suiteManager }, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
				Seed:      seed(), Duration: duration, MinWait: minWait, MaxWait: maxWait, MaxFor: maxFor,
			}
		}
	}

	Context("seeded, for -e2e.soak.duration", Label("soak"), func() {
		SoakSpec(ctx, input(func() uint64 {
			if *soakSeed != 0 {
				return *soakSeed
			}
			return uint64(time.Now().UnixNano())
		}, *soakDuration, 2*time.Second, 10*time.Second, 40*time.Second))
	})
	Context("a short run of a fixed seed", Label("ci"), func() {
		SoakSpec(ctx, input(func() uint64 { return ciSoakSeed }, 15*time.Second, time.Second, 3*time.Second, 8*time.Second))
	})
})

// What the soak found, each with the seeds that found it.
var _ = Describe("Soak regressions", Serial, func() {
	Context("a manager started while every request fails", Label("ci"), func() {
		ManagerStartDuringFaultsSpec(ctx, func() ManagerStartDuringFaultsSpecInput {
			return ManagerStartDuringFaultsSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
			}
		})
	})
	// The workload API server unreachable as a loop's deadline passed: a
	// node read cut by it was taken for done, and the engine panicked on
	// the node it had not read (also seeds 7120601 and 7120602, half an
	// hour and ten minutes in). It depends on timing: on the code before,
	// one run of three such seeds failed.
	Context("seed 322: the workload API server unreachable beside a DryRun ClusterAutoscaler and a second manager", Label("full"), func() {
		SoakSpec(ctx, func() SoakSpecInput {
			return SoakSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig,
				Manager: func() *localstack.Process { return suiteManager }, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
				Seed:      322, Duration: 90 * time.Second, MinWait: 2 * time.Second, MaxWait: 10 * time.Second, MaxFor: 40 * time.Second,
			}
		})
	})
})
