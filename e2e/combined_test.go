//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// Features combined as an operator combines them: shadow mode beside the
// Active mode, narrow credentials, credentials refreshed while a
// scale-down is due. Each failed on the autoscaler before issue 45 (commits
// ae44cb8 and 72c8643); `make test-e2e` runs them.
var _ = Describe("Features combined", func() {
	manager := func() *localstack.Process { return suiteManager }

	Context("An Active ClusterAutoscaler with a narrow Secret and a DryRun one without", Label("full"), func() {
		DryRunBesideActiveSpec(ctx, func() DryRunBesideActiveSpecInput {
			return DryRunBesideActiveSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager}
		})
	})
	Context("The workload kubeconfig Secret rewritten every 30 s while a scale-down is due", Label("full"), func() {
		KubeconfigRewritesSpec(ctx, func() KubeconfigRewritesSpecInput {
			return KubeconfigRewritesSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager}
		})
	})
})
