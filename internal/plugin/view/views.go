// Package view is what `kubectl capi-autoscaler status`, `explain` and
// `top` show: the state of the autoscaled Clusters (Observe), read from what
// the manager publishes in the management cluster, as a tree, a live frame
// or the explanation of a pod or a node.
package view

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// The view is what `status` and `top` show, and what `status -o json|yaml`
// prints: its field names are the plugin's output format, kept stable
// whatever the ClusterAutoscaler API becomes.

// StatusView is the state of the autoscaled Clusters in scope.
type StatusView struct {
	Clusters []ClusterView `json:"clusters"`
}

// ClusterView is one ClusterAutoscaler and the Cluster it autoscales.
type ClusterView struct {
	Namespace         string `json:"namespace"`
	Cluster           string `json:"cluster"`
	ClusterAutoscaler string `json:"clusterAutoscaler"`
	// Mode is Active or DryRun.
	Mode string `json:"mode,omitempty"`
	// Conditions are Ready, ScalingActive, ClusterHealthy and
	// ConfigurationApplied, in that order; Unknown when not reported yet.
	Conditions []ConditionView `json:"conditions"`

	Nodes      int32           `json:"nodes"`
	ReadyNodes int32           `json:"readyNodes"`
	NodeGroups []NodeGroupView `json:"nodeGroups"`
	// OtherNodes are the nodes of no node group, such as the control plane.
	OtherNodes  []NodeView       `json:"otherNodes,omitempty"`
	Pending     PendingView      `json:"pending"`
	Explanation ExplanationState `json:"explanation"`
	// Problems say what could not be read with the user's credentials, or
	// used.
	Problems []string `json:"problems,omitempty"`

	LastLoopTime      *metav1.Time `json:"lastLoopTime,omitempty"`
	LastScaleUpTime   *metav1.Time `json:"lastScaleUpTime,omitempty"`
	LastScaleDownTime *metav1.Time `json:"lastScaleDownTime,omitempty"`
	// RecentEvents are the latest events of the ClusterAutoscaler and its
	// node groups, newest first.
	RecentEvents []EventView `json:"recentEvents"`
	// DryRunDecisions are the last decisions of a DryRun ClusterAutoscaler,
	// oldest first.
	DryRunDecisions []DryRunDecisionView `json:"dryRunDecisions,omitempty"`
}

// DryRunDecisionView is a decision a DryRun ClusterAutoscaler did not carry
// out.
type DryRunDecisionView struct {
	Time *metav1.Time `json:"time"`
	// Kind is ScaleUp, ScaleDown or Answer.
	Kind string `json:"kind"`
	// ProvisioningRequest is namespace/name of the request an atomic
	// scale-up or an answer was for.
	ProvisioningRequest string `json:"provisioningRequest,omitempty"`
	// Answer is the condition an answer would have set on the request.
	Answer *AnswerView `json:"answer,omitempty"`
	// NodeGroups are the nodes each group would have gained or lost.
	NodeGroups []NodeGroupDeltaView `json:"nodeGroups"`
	// Nodes are those a scale-down would have removed.
	Nodes []string `json:"nodes,omitempty"`
	// Pods counts the pending pods a scale-up was for.
	Pods int32 `json:"pods,omitempty"`
}

// AnswerView is a condition a DryRun ClusterAutoscaler would have set on a
// ProvisioningRequest.
type AnswerView struct {
	ConditionType string                 `json:"conditionType"`
	Status        metav1.ConditionStatus `json:"status"`
	Reason        string                 `json:"reason"`
	Message       string                 `json:"message,omitempty"`
}

// NodeGroupDeltaView is a change of a group's size.
type NodeGroupDeltaView struct {
	ID    string `json:"id"`
	Delta int32  `json:"delta"`
}

// ConditionView is one condition of the ClusterAutoscaler.
type ConditionView struct {
	Type    string                 `json:"type"`
	Status  metav1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
}

// NodeGroupView is one node group: its row of the status, and its nodes from
// the explanation of the last loop.
type NodeGroupView struct {
	// ID is Kind/namespace/name; Kind and Name repeat its parts.
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Name string `json:"name"`
	// MinSize and MaxSize are unset when the group is not autoscaled, e.g.
	// for a bad annotation (Problem says so).
	MinSize       *int32       `json:"minSize,omitempty"`
	MaxSize       *int32       `json:"maxSize,omitempty"`
	TargetSize    int32        `json:"targetSize"`
	Registered    int32        `json:"registered"`
	Ready         int32        `json:"ready"`
	Upcoming      int32        `json:"upcoming"`
	BackoffUntil  *metav1.Time `json:"backoffUntil,omitempty"`
	BackoffReason string       `json:"backoffReason,omitempty"`
	Problem       string       `json:"problem,omitempty"`
	// Price is what the autoscaler believes a node of the group costs per
	// hour, and PriceSource where that comes from (NodeGroup: the price
	// annotation, InstanceType: spec.instanceTypePrices, or Default);
	// unset while it knows no price.
	Price       string `json:"price,omitempty"`
	PriceSource string `json:"priceSource,omitempty"`
	// ScheduledMinimum is, for a group that spec.scheduledMinimums
	// select, its annotated minimum and the windows in effect and next.
	ScheduledMinimum *ScheduledMinimumView `json:"scheduledMinimum,omitempty"`
	Nodes            []NodeView            `json:"nodes,omitempty"`
}

// ScheduledMinimumView is where a group stands in its scheduled minimums:
// the minimum of its annotation, the windows that set its minimum now,
// and the next to.
type ScheduledMinimumView struct {
	AnnotatedMinSize int32                 `json:"annotatedMinSize"`
	Active           []ScheduledWindowView `json:"active,omitempty"`
	Next             *ScheduledWindowView  `json:"next,omitempty"`
}

// ScheduledWindowView is a window of a scheduled minimum.
type ScheduledWindowView struct {
	Name    string      `json:"name"`
	MinSize int32       `json:"minSize"`
	Opens   metav1.Time `json:"opens"`
	Closes  metav1.Time `json:"closes"`
}

// NodeView is where one node stands with scale-down.
type NodeView struct {
	Name string `json:"name"`
	// UtilizationPercent is unset for nodes scale-down does not measure.
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`
	// ScaleDown is Removing or Kept; Reason says why a node is kept.
	ScaleDown     string       `json:"scaleDown"`
	Reason        string       `json:"reason,omitempty"`
	UnneededSince *metav1.Time `json:"unneededSince,omitempty"`
}

// PendingView is what waits for room, and why no scale-up makes it.
type PendingView struct {
	UnschedulablePods        int32                `json:"unschedulablePods"`
	PodsLeftForNextLoop      int32                `json:"podsLeftForNextLoop,omitempty"`
	NotTriggerScaleUpReasons []ReasonCountView    `json:"notTriggerScaleUpReasons,omitempty"`
	CapacityBuffers          []CapacityBufferView `json:"capacityBuffers,omitempty"`
}

// ReasonCountView counts the pending pods that share a reason.
type ReasonCountView struct {
	Reason string `json:"reason"`
	Pods   int32  `json:"pods"`
}

// CapacityBufferView is where the room of one CapacityBuffer is.
type CapacityBufferView struct {
	// Name is the buffer's namespace/name in the workload cluster.
	Name        string `json:"name"`
	Replicas    int32  `json:"replicas"`
	Held        int32  `json:"held"`
	Upcoming    int32  `json:"upcoming"`
	Unplaceable int32  `json:"unplaceable"`
	Message     string `json:"message,omitempty"`
}

// ExplanationState says which loop the nodes come from. LoopTime is unset
// while the manager has published no explanation, or when it cannot be read
// (Problems say why).
type ExplanationState struct {
	LoopTime *metav1.Time `json:"loopTime,omitempty"`
	// OmittedNodes were left out of the explanation to keep it small: the
	// nodes above the utilization threshold go first.
	OmittedNodes int32 `json:"omittedNodes,omitempty"`
}

// EventView is one event of the ClusterAutoscaler or of a node group.
type EventView struct {
	Time metav1.Time `json:"time"`
	Type string      `json:"type"`
	// Object is Kind/name of the object the event is about.
	Object  string `json:"object"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Count is how often it happened, when more than once.
	Count int32 `json:"count,omitempty"`
}

// paintCondition is a condition in brief: ✓ True, ✗ False, ? Unknown; all four
// are good when True.
func paintCondition(p cli.Palette, c ConditionView) string {
	switch c.Status {
	case metav1.ConditionTrue:
		return p.Green("✓") + " " + c.Type
	case metav1.ConditionFalse:
		return p.Red("✗ " + c.Type)
	}
	return p.Yellow("? " + c.Type)
}

// failing says whether a condition needs the user's attention.
func failing(c ConditionView) bool {
	return c.Status != metav1.ConditionTrue
}
