//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"

	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

var _ = Describe("Scale up", Label("ci", "scale-up"), func() {
	ScaleUpSpec(ctx, func() ScaleUpSpecInput {
		return ScaleUpSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Scale down", Label("ci"), func() {
	ScaleDownSpec(ctx, func() ScaleDownSpecInput {
		return ScaleDownSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Scale from zero", Label("ci", "scale-up"), func() {
	ScaleFromZeroSpec(ctx, func() ScaleFromZeroSpecInput {
		return ScaleFromZeroSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Failing template", Label("ci", "scale-up"), func() {
	FailingNodeGroupSpec(ctx, func() FailingNodeGroupSpecInput {
		return FailingNodeGroupSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Kind: scalable.KindMachineDeployment}
	})
})

var _ = Describe("Zone spread", Label("full"), func() {
	ZoneSpreadSpec(ctx, func() ZoneSpreadSpecInput {
		return ZoneSpreadSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Startup taints", Label("ci", "scale-up"), func() {
	StartupTaintsSpec(ctx, func() StartupTaintsSpecInput {
		return StartupTaintsSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("MachinePool scale up and down", Label("ci", "scale-up"), func() {
	MachinePoolScaleSpec(ctx, func() MachinePoolSpecInput {
		return MachinePoolSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Mixed burst", Label("ci", "scale-up"), func() {
	MixedBurstSpec(ctx, func() MixedBurstSpecInput {
		return MixedBurstSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Scheduler agreement", Label("ci", "scale-up"), func() {
	SchedulerAgreementSpec(ctx, agreementInput)
})

var _ = Describe("Zonal StatefulSet", Label("ci", "scale-up"), func() {
	ZonalStatefulSetSpec(ctx, func() ZonalStatefulSetSpecInput {
		return ZonalStatefulSetSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("CSI attach limit", Label("ci", "scale-up"), func() {
	CSIAttachLimitSpec(ctx, func() CSIAttachLimitSpecInput {
		return CSIAttachLimitSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Missing claim", Label("ci", "scale-up"), func() {
	MissingClaimSpec(ctx, func() MissingClaimSpecInput {
		return MissingClaimSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Pending binding", Label("ci"), func() {
	PendingBindingSpec(ctx, func() PendingBindingSpecInput {
		return PendingBindingSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Capacity buffer", Label("ci", "scale-up"), func() {
	CapacityBufferSpec(ctx, func() CapacityBufferSpecInput {
		return CapacityBufferSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Check capacity", Label("ci", "scale-up"), func() {
	CheckCapacitySpec(ctx, func() CheckCapacitySpecInput {
		return CheckCapacitySpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("kubectl capi-autoscaler", Label("ci"), func() {
	KubectlPluginSpec(ctx, func() KubectlPluginSpecInput {
		return KubectlPluginSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("DryRun mode", Label("ci"), func() {
	DryRunSpec(ctx, func() DryRunSpecInput {
		return DryRunSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Atomic scale-up", Label("ci", "scale-up"), func() {
	AtomicScaleUpSpec(ctx, func() AtomicScaleUpSpecInput {
		return AtomicScaleUpSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

// About two minutes (machines take 45 s, then 30 nodes come and go): too
// long for the ci set.
var _ = Describe("Split burst", Label("full"), func() {
	SplitBurstSpec(ctx, func() SplitBurstSpecInput {
		return SplitBurstSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

// About a minute (machines take 20 s, then 17 nodes come and go): too
// long for the ci set.
var _ = Describe("Burst without spread", Label("full"), func() {
	PlainBurstSpec(ctx, func() PlainBurstSpecInput {
		return PlainBurstSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

var _ = Describe("Dynamic Resource Allocation", Label("ci", "scale-up"), func() {
	DRASpec(ctx, func() DRASpecInput {
		return DRASpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

// About four minutes (the windows open at the next whole minute after a
// lead time, and last 100 s): too long for the ci set.
var _ = Describe("Scheduled capacity", Label("full"), func() {
	ScheduledCapacitySpec(ctx, func() ScheduledCapacitySpecInput {
		return ScheduledCapacitySpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})
