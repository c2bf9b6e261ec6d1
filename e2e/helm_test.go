//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The manager as the Helm chart installs it, with only the RBAC the chart
// grants. The spec runs the chart's manager in place of the suite's: run
// serially.
var _ = Describe("Helm chart", Serial, Label("ci"), func() {
	HelmChartSpec(ctx, func() HelmChartSpecInput {
		return HelmChartSpecInput{
			Stack: stack, WorkloadKubeconfig: workloadKubeconfig, RepoRoot: *repoRoot, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
			Restarted: func(p *localstack.Process) { suiteManager = p },
		}
	})
})
