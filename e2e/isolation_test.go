//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// A failure in one cluster stays in it. The spec runs a manager of its own,
// built with faults, in place of the suite's: run serially.
var _ = Describe("Isolation", Serial, Label("full"), func() {
	Context("a node group that panics in every loop", func() {
		IsolationSpec(ctx, func() IsolationSpecInput {
			return IsolationSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, RepoRoot: *repoRoot, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
			}
		})
	})
})
