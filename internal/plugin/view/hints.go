package view

import (
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// startupTime is how long a node that is not Ready counts as starting.
var startupTime = duration.HumanDuration(nodefacts.MaxStartupTime)

// keptHints say, for each reason scale-down keeps a node, what the user can
// do about it. A test fails when a reason of the engine has none.
var keptHints = map[scaledown.Reason]string{
	scaledown.ReasonNotAutoscaled: "The node belongs to no node group: annotate its MachineDeployment, MachineSet or MachinePool with " +
		scalable.MaxSizeAnnotation + " (and " + scalable.MinSizeAnnotation + ") to autoscale it.",
	scaledown.ReasonScaleDownDisabledAnnotation: "Remove the node's " + scaledown.ScaleDownDisabledAnnotation + " annotation to let scale-down remove it.",
	scaledown.ReasonNotStarted: "Nothing, unless it never starts: it becomes removable once Ready without startup taints, " +
		"or once still not Ready " + startupTime + " after its creation, when it counts as unready. Its conditions and taints in the workload cluster say what it waits for.",
	scaledown.ReasonAwaitingPendingPods: "Nothing: pending pods were placed on it and wait for the scheduler to bind them. " +
		"If they stay pending, `kubectl describe pod` in the workload cluster says why.",
	scaledown.ReasonCurrentlyBeingDeleted: "Nothing: it is being removed. Its Machine in the management cluster shows how far the deletion is.",
	scaledown.ReasonNodeGroupScaleDownBlocked: "Wait for what the message names to end: a rollout of the node group, or the nodes it was asked for to arrive. " +
		"The node group's conditions and events say how it goes.",
	scaledown.ReasonNotUnderutilized: "Nothing, if its pods need it. It becomes a candidate below the utilization threshold: " +
		"lower its pods' requests, or raise scaleDown.utilizationThreshold of the ClusterAutoscaler or the node group's " +
		scalable.ScaleDownUtilizationThresholdAnnotation + " annotation.",
	scaledown.ReasonNodeGroupMinSizeReached: "The node group is at its min size: lower its " + scalable.MinSizeAnnotation + " annotation to let it shrink.",
	scaledown.ReasonMinimalResourceLimitExceeded: "Removing it would take the Cluster below the minimum cores, memory or GPUs of the ClusterAutoscaler's " +
		"resourceLimits: lower those minimums to let it go.",
	scaledown.ReasonBlockedByPod: "The message names the pod and the rule: give the pod a controller that recreates it, a PodDisruptionBudget that allows a disruption, " +
		"or the annotation " + scaledown.SafeToEvictAnnotation + `: "true" (for local storage, ` + scaledown.SafeToEvictLocalVolumesAnnotation + ").",
	scaledown.ReasonNoPlaceToMovePods: "Some of its pods fit on no other node (requests, affinity, topology spread, host ports): " +
		"it goes once they fit elsewhere. Relax those constraints if the node should go now.",
	scaledown.ReasonNotUnneededLongEnough: "Nothing: it is unneeded and goes once unneeded for the ClusterAutoscaler's scaleDown.unneededTime, " +
		"or the node group's " + scalable.ScaleDownUnneededTimeAnnotation + " annotation; shorten that to remove nodes sooner.",
	scaledown.ReasonNotUnreadyLongEnough: "Nothing: it is unready and unneeded, and goes once so for the ClusterAutoscaler's scaleDown.unreadyTime, " +
		"or the node group's " + scalable.ScaleDownUnreadyTimeAnnotation + " annotation; shorten that to remove unready nodes sooner.",
	scaledown.ReasonScaleDownInCooldown: "Nothing: a recent scale-up, node deletion or failed scale-down pauses removals " +
		"(the ClusterAutoscaler's scaleDown.delayAfterAdd, delayAfterDelete and delayAfterFailure); the message says until when.",
	scaledown.ReasonParallelismLimitReached: "Nothing: as many nodes as allowed are being removed; it goes in a later loop. " +
		"scaleDown.maxDrainParallelism and maxEmptyBulkDelete of the ClusterAutoscaler allow more at once.",
	scaledown.ReasonAwaitingReplacement: "Nothing: consolidation replaces it by cheaper nodes, and drains it once they are Ready; " +
		"if they are not Ready within maxNodeProvisionTime the replacement is abandoned and the node stays. The message says where it stands.",
	scaledown.ReasonReplacementUnderWay: "Nothing: it is a new node of a consolidation that replaces other nodes, which are drained onto it once it is Ready; " +
		"after that it is judged as any node.",
	scaledown.ReasonConsolidationBudget: "Nothing, if the budget is meant: a disruption budget the message names allows no node of its group now " +
		"(the ClusterAutoscaler's consolidation.budget or budgets, or the group's " + scalable.ConsolidationBudgetAnnotation + " annotation); " +
		"consolidation resumes when its window closes, or raise its nodes.",
}
