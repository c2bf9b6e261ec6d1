//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The high availability and unreachable workload cluster scenarios; both
// take a component away from every spec: they run serially.
// Each takes over the minute a ci spec may take: `make test-e2e` runs them
// all (label full); `make test` runs one, in the SeparateWorkload topology.
var _ = Describe("High availability", Serial, func() {
	// They stop the suite's manager for two replicas of their own.
	Context("the leader is killed before it scales up", Label("full"), func() {
		HASpec(ctx, func() HASpecInput {
			return HASpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
				KillAt:    KillBeforeScaleUp,
			}
		})
	})
	Context("the leader is killed after it scaled up, before the nodes register", Label("full"), func() {
		HASpec(ctx, func() HASpecInput {
			return HASpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
				KillAt:    KillAfterScaleUp,
			}
		})
	})
})

var _ = Describe("Workload cluster unreachable", Serial, func() {
	manager := func() *localstack.Process { return suiteManager }

	Context("during a scale-up, for 30s", Label("full"), func() {
		WorkloadUnreachableSpec(ctx, func() WorkloadUnreachableSpecInput {
			return WorkloadUnreachableSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, During: DuringScaleUp, Outage: 30 * time.Second}
		})
	})
	// `make test` runs this one in the SeparateWorkload topology.
	Context("during a scale-down, for 30s", Label("full", "ci-separate"), func() {
		WorkloadUnreachableSpec(ctx, func() WorkloadUnreachableSpecInput {
			return WorkloadUnreachableSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, During: DuringScaleDown, Outage: 30 * time.Second}
		})
	})
	// Beyond five failed health probes, the manager's ClusterCache
	// disconnects, and connects again once the API server is back.
	Context("during a scale-up, for 90s: disconnected and connected again", Label("full"), func() {
		WorkloadUnreachableSpec(ctx, func() WorkloadUnreachableSpecInput {
			return WorkloadUnreachableSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, During: DuringScaleUp, Outage: 90 * time.Second}
		})
	})
	Context("during a scale-down, for 90s: disconnected and connected again", Label("full"), func() {
		WorkloadUnreachableSpec(ctx, func() WorkloadUnreachableSpecInput {
			return WorkloadUnreachableSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: manager, During: DuringScaleDown, Outage: 90 * time.Second}
		})
	})
})
