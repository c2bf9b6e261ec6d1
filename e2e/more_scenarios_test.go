//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// The scenarios beyond the core ones: too slow for CI's `make test`, they
// run with -ginkgo.label-filter=full.
var _ = Describe("Autoscaling scenarios", Label("full"), func() {
	Context("Balancing", func() {
		BalancingSpec(ctx, func() BalancingSpecInput {
			return BalancingSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Price expander", func() {
		PriceExpanderSpec(ctx, func() PriceExpanderSpecInput {
			return PriceExpanderSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Limits", func() {
		LimitsSpec(ctx, func() LimitsSpecInput { return LimitsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig} })
	})
	Context("Priority cutoff", func() {
		PriorityCutoffSpec(ctx, func() PriorityCutoffSpecInput {
			return PriorityCutoffSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("MachinePool from zero", func() {
		MachinePoolFromZeroSpec(ctx, func() MachinePoolSpecInput {
			return MachinePoolSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Failing MachinePool", func() {
		FailingNodeGroupSpec(ctx, func() FailingNodeGroupSpecInput {
			return FailingNodeGroupSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Kind: scalable.KindMachinePool}
		})
	})
	Context("Bad input", func() {
		BadInputSpec(ctx, func() BadInputSpecInput {
			return BadInputSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Dead node", func() {
		DeadNodeSpec(ctx, func() DeadNodeSpecInput {
			return DeadNodeSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Kubeconfig rotation", func() {
		KubeconfigRotationSpec(ctx, func() KubeconfigRotationSpecInput {
			return KubeconfigRotationSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Two clusters", func() {
		TwoClustersSpec(ctx, func() TwoClustersSpecInput {
			return TwoClustersSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Duplicate ClusterAutoscaler", func() {
		DuplicateClusterAutoscalerSpec(ctx, func() DuplicateClusterAutoscalerSpecInput {
			return DuplicateClusterAutoscalerSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	// It kills and restarts the suite's manager.
	Context("Restart", Serial, func() {
		RestartSpec(ctx, func() RestartSpecInput {
			return RestartSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
			}
		})
	})
})
