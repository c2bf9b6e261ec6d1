package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The manager publishes what the last loop of a ClusterAutoscaler's engine
// decided, and why, in a ConfigMap of the ClusterAutoscaler's namespace
// named after it with ExplanationConfigMapSuffix, owned by it, under
// ExplanationDataKey, as an Explanation in JSON. `kubectl capi-autoscaler
// explain` reads it with the user's own credentials.
const (
	ExplanationConfigMapSuffix = "-explanation"
	ExplanationDataKey         = "explanation.json"
	// ExplanationLabel, on the ConfigMap, names its ClusterAutoscaler.
	ExplanationLabel = "autoscaling.cluster.x-k8s.io/explanation-of"
)

// ExplanationConfigMapName is the name of the ConfigMap that holds the
// Explanation of the ClusterAutoscaler named caName.
func ExplanationConfigMapName(caName string) string {
	return caName + ExplanationConfigMapSuffix
}

// Explanation is what one loop of a ClusterAutoscaler's engine decided for
// the pending pods and the nodes of its Cluster, and why.
type Explanation struct {
	// LoopTime is when the loop ran.
	// +required
	LoopTime metav1.Time `json:"loopTime"`

	// DryRun is set when the loop ran in DryRun mode: the outcomes say
	// what it would have done, and it did none of it.
	// +optional
	DryRun bool `json:"dryRun,omitempty"`

	// PendingPods are the pods the loop found pending, in groups of pods
	// that got the same outcome for the same reasons.
	// +optional
	PendingPods []PendingPodsExplanation `json:"pendingPods,omitempty"`

	// Nodes say, for each node of the Cluster, whether scale-down removes
	// it, and why or why not.
	// +optional
	Nodes []NodeExplanation `json:"nodes,omitempty"`

	// OmittedPods and OmittedNodes count the pods and nodes left out to keep
	// the ConfigMap within its size: nodes whose utilization is above the
	// threshold go first, then the names of pods in the largest groups.
	// +optional
	OmittedPods int32 `json:"omittedPods,omitempty"`
	// +optional
	OmittedNodes int32 `json:"omittedNodes,omitempty"`
}

// PendingPodsOutcome is what a loop did for pending pods.
type PendingPodsOutcome string

const (
	// PendingPodsTriggeredScaleUp: the loop grew NodeGroup for the pods.
	PendingPodsTriggeredScaleUp PendingPodsOutcome = "TriggeredScaleUp"
	// PendingPodsWaitForNode: the pods fit on Node, a node that exists or
	// is on its way, so they need no scale-up.
	PendingPodsWaitForNode PendingPodsOutcome = "WaitForNode"
	// PendingPodsNotTriggerScaleUp: no node group can help the pods;
	// NodeGroupReasons say why.
	PendingPodsNotTriggerScaleUp PendingPodsOutcome = "NotTriggerScaleUp"
)

// PendingPodsExplanation is the outcome of a group of pending pods.
type PendingPodsExplanation struct {
	// Pods are the pods of the group, as namespace/name; a large group
	// lists only some of them.
	// +required
	Pods []string `json:"pods"`

	// Count is how many pods the group has.
	// +required
	Count int32 `json:"count"`

	// Outcome is what the loop did for them.
	// +required
	Outcome PendingPodsOutcome `json:"outcome"`

	// NodeGroup is the node group grown for them (TriggeredScaleUp), or the
	// node group of the node they wait for (WaitForNode).
	// +optional
	NodeGroup string `json:"nodeGroup,omitempty"`

	// Node is the node they wait for (WaitForNode): a node on its way is
	// named after its Machine until it registers.
	// +optional
	Node string `json:"node,omitempty"`

	// NodeGroupReasons say, for each node group, why it cannot help
	// (NotTriggerScaleUp).
	// +optional
	NodeGroupReasons []NodeGroupReasons `json:"nodeGroupReasons,omitempty"`
}

// NodeGroupReasons are the reasons a node group cannot help pods.
type NodeGroupReasons struct {
	// NodeGroup is the node group, e.g. MachineDeployment/default/md-0.
	// +required
	NodeGroup string `json:"nodeGroup"`
	// Reasons say why, e.g. "max node group size reached".
	// +required
	Reasons []string `json:"reasons"`
}

// NodeScaleDown is where a node stands with scale-down.
type NodeScaleDown string

const (
	// NodeRemoving: the loop chose the node for removal.
	NodeRemoving NodeScaleDown = "Removing"
	// NodeKept: the node stays; Reason and Message say why, and for an
	// unneeded node, until when.
	NodeKept NodeScaleDown = "Kept"
)

// ConsolidationReason is the Reason of a node that consolidation removes;
// its Message names the nodes removed together and what that saves.
const ConsolidationReason = "Consolidation"

// NodeExplanation says whether scale-down removes a node, and why.
type NodeExplanation struct {
	// Name is the Node's name.
	// +required
	Name string `json:"name"`

	// NodeGroup is the node group of the node, if any.
	// +optional
	NodeGroup string `json:"nodeGroup,omitempty"`

	// ScaleDown is where the node stands with scale-down.
	// +required
	ScaleDown NodeScaleDown `json:"scaleDown"`

	// UtilizationPercent is the node's utilization as scale-down measures
	// it, in percent: the larger of its CPU and memory requests over what
	// is allocatable. Unset for nodes scale-down does not measure, such as
	// nodes of no node group.
	// +optional
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`

	// Reason is why the node is kept, in one CamelCase word (e.g.
	// NotUnderutilized, BlockedByPod, NotUnneededLongEnough), or
	// ConsolidationReason for a node consolidation removes.
	// +optional
	Reason string `json:"reason,omitempty"`

	// Message says it in words: the blocking pod, the utilization against
	// the threshold, when the node becomes removable.
	// +optional
	Message string `json:"message,omitempty"`

	// UnneededSince is when the node was first found unneeded: its pods fit
	// elsewhere and its utilization is below the threshold.
	// +optional
	UnneededSince *metav1.Time `json:"unneededSince,omitempty"`
}
