//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// Features combined as operators combine them (issue 45): two managers on
// one Cluster, and an atomic ProvisioningRequest rolled back beside a
// regular scale-up. Each failed on the code before its fix; they take
// minutes, so `make test-e2e` runs them (label full).
var _ = Describe("Two managers on one Cluster", Serial, func() {
	// It kills and restarts the suite's manager.
	Context("an unfiltered and a --watch-filter manager, the holder killed during a drain", Label("full"), func() {
		TwoManagersSpec(ctx, func() TwoManagersSpecInput {
			return TwoManagersSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
			}
		})
	})
})

var _ = Describe("Atomic rollback beside a regular scale-up", func() {
	Context("Machines created together, the request rolled back", Label("full"), func() {
		AtomicRollbackBesideScaleUpSpec(ctx, func() AtomicRollbackBesideScaleUpSpecInput {
			return AtomicRollbackBesideScaleUpSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
})
