//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The operations Cluster API clusters live through while the autoscaler
// acts: rollouts, pauses, another autoscaler, operators' marks, deleted
// Nodes, other writers of the replicas. Each failed on the autoscaler
// before it re-read its node groups before every destructive step and
// owned only what it placed (commit 34c9462); `make test` runs the ci
// ones, `make test-e2e` all.
var _ = Describe("Operations", func() {
	Context("Rollout during a drain", Label("full"), func() {
		RolloutDuringDrainSpec(ctx, func() RolloutDuringDrainSpecInput {
			return RolloutDuringDrainSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Cluster paused in the middle of a drain", Label("ci"), func() {
		PausedDrainSpec(ctx, func() PausedDrainSpecInput {
			return PausedDrainSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Another autoscaler's taint present", Label("ci"), func() {
		ForeignTaintSpec(ctx, func() ForeignTaintSpecInput {
			return ForeignTaintSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	// It kills and restarts the suite's manager.
	Context("An operator's marked Machine survives a manager restart", Serial, Label("ci"), func() {
		OperatorMarkSpec(ctx, func() OperatorMarkSpecInput {
			return OperatorMarkSpecInput{
				Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Manager: suiteManager, ManagerArgs: suiteManagerArgs,
				Restarted: func(p *localstack.Process) { suiteManager = p },
			}
		})
	})
	Context("A MachineHealthCheck remediating a Machine of the group during a scale-down", Label("full"), func() {
		RemediationDuringScaleDownSpec(ctx, func() RemediationDuringScaleDownSpecInput {
			return RemediationDuringScaleDownSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("kubectl delete node on an old Machine", Label("full"), func() {
		DeletedNodeSpec(ctx, func() DeletedNodeSpecInput {
			return DeletedNodeSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
	Context("Replicas written back by another client right after a scale-down", Label("ci"), func() {
		ReplicasWrittenBackSpec(ctx, func() ReplicasWrittenBackSpecInput {
			return ReplicasWrittenBackSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
		})
	})
})
