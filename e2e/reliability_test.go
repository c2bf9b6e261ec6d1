//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The reliability scenarios: the autoscaler under failing API servers.
// Each takes over the minute a ci spec may take: `make test-e2e` runs them
// (label full), `make test` none.
var _ = Describe("Faults", func() {
	manager := func() *localstack.Process { return suiteManager }

	Context("30% of requests fail, one cycle", Label("full"), func() {
		FaultsSpec(ctx, func() FaultsSpecInput {
			return FaultsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, Faults: faultproxy.Faults{Rate: 0.3}}
		})
	})
	Context("10% of requests fail, three cycles", Label("full"), func() {
		FaultsSpec(ctx, func() FaultsSpecInput {
			return FaultsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, Faults: faultproxy.Faults{Rate: 0.1}, Cycles: 3}
		})
	})
	Context("30% of requests fail, three cycles", Label("full"), func() {
		FaultsSpec(ctx, func() FaultsSpecInput {
			return FaultsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, Faults: faultproxy.Faults{Rate: 0.3}, Cycles: 3}
		})
	})
	Context("every request fails for 60s during a scale-up, 10% otherwise", Label("full"), func() {
		FaultsSpec(ctx, func() FaultsSpecInput {
			return FaultsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, Faults: faultproxy.Faults{Rate: 0.1}, Outage: 60 * time.Second}
		})
	})
})
