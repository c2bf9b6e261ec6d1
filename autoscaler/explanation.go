package autoscaler

import (
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Explanation is what a loop decided for the pending pods and the nodes of
// the cluster, and why, for users who ask (kubectl capi-autoscaler
// explain). Its slices are the loop's: read only.
type Explanation struct {
	// PendingPods are the pending pods, in groups with one outcome.
	PendingPods []PendingPods
	// Nodes are the scale-down decisions, one per node, by name; nil when
	// the loop planned no scale-down.
	Nodes []NodeDecision
}

// PendingOutcome is what a loop did for pending pods.
type PendingOutcome int

const (
	// TriggeredScaleUp: NodeGroup was grown for the pods.
	TriggeredScaleUp PendingOutcome = iota
	// WaitForNode: the pods fit on Node, which exists or is on its way.
	WaitForNode
	// NotTriggerScaleUp: no node group can help the pods; Reasons say why.
	NotTriggerScaleUp
)

// PendingPods are pending pods that got one outcome.
type PendingPods struct {
	Outcome PendingOutcome
	Pods    []*corev1.Pod
	// NodeGroup is the group grown for the pods, or the group of the node
	// they wait for when it has one.
	NodeGroup string
	// Node is the node the pods wait for.
	Node string
	// Reasons say, by node group ID, why the group cannot help.
	Reasons map[string][]string
}

// NodeDecision says whether scale-down removes a node, and why.
type NodeDecision struct {
	Name      string
	NodeGroup string
	// Removing is set when the loop chose the node for removal; Kept says
	// why it stays otherwise.
	Removing bool
	Kept     scaledown.Decision
	// Consolidation is, for a node consolidation removes or replaces, its
	// message: the nodes removed together, what that saves, and where a
	// replacement stands.
	Consolidation string
	// UnneededSince is when the node was first found unneeded, or zero.
	UnneededSince time.Time
	// Utilization is what the node was judged on, when Measured.
	Utilization float64
	Measured    bool
}

// explainPendingPods groups the pods of a scale-up plan by outcome: those
// helped by the groups that grew (increased, by group ID), those that wait
// for a node, and those no group can help, which share their reasons.
// Buffer and request pods are left out: no user asks about them.
func explainPendingPods(plan *scaleup.Plan, increased map[string]int) []PendingPods {
	nominated := make(map[types.UID]scaleup.Nomination, len(plan.Nominations))
	for _, nomination := range plan.Nominations {
		nominated[nomination.Pod] = nomination
	}
	var explained []PendingPods
	// groupOf returns the group of pods with key, added as add makes it
	// when it is new.
	indexes := map[any]int{}
	groupOf := func(key any, add func() PendingPods) *PendingPods {
		i, found := indexes[key]
		if !found {
			i = len(explained)
			indexes[key] = i
			explained = append(explained, add())
		}
		return &explained[i]
	}

	type helpedBy struct{ group string }
	for _, pod := range withoutBufferPods(plan.Helped) {
		group := nominated[pod.UID].Group
		if increased[group] == 0 {
			// Its group could not be grown: the pod is pending as before.
			continue
		}
		pods := groupOf(helpedBy{group}, func() PendingPods { return PendingPods{Outcome: TriggeredScaleUp, NodeGroup: group} })
		pods.Pods = append(pods.Pods, pod)
	}
	type waitingFor struct{ node string }
	for _, placement := range placementsOfRealPods(plan.Absorbed) {
		pods := groupOf(waitingFor{placement.NodeName}, func() PendingPods {
			return PendingPods{Outcome: WaitForNode, Node: placement.NodeName, NodeGroup: nominated[placement.Pod.UID].Group}
		})
		pods.Pods = append(pods.Pods, placement.Pod)
	}
	// Pods of one equivalence group share their reasons' map.
	type rejectedFor struct{ reasons uintptr }
	for _, rejected := range realNoScaleUp(plan.NoScaleUp) {
		pods := groupOf(rejectedFor{reflect.ValueOf(rejected.Reasons).Pointer()}, func() PendingPods {
			return PendingPods{Outcome: NotTriggerScaleUp, Reasons: rejected.Reasons}
		})
		pods.Pods = append(pods.Pods, rejected.Pod)
	}
	return explained
}

// explainNodes lists the decision of a scale-down plan for each node of
// snap, by name.
func explainNodes(plan *scaledown.Plan, snap *snapshot.Snapshot) []NodeDecision {
	unneededSince := make(map[string]time.Time, len(plan.Unneeded))
	for _, unneeded := range plan.Unneeded {
		unneededSince[unneeded.Node.Name] = unneeded.Since
	}
	decision := func(name string) NodeDecision {
		d := NodeDecision{Name: name, UnneededSince: unneededSince[name]}
		d.Utilization, d.Measured = plan.Utilization[name]
		if group := snap.NodeGroupOf(name); group != nil {
			d.NodeGroup = group.ID()
		}
		return d
	}
	decisions := make([]NodeDecision, 0, len(plan.Kept)+len(plan.Empty)+len(plan.Drain))
	for name, kept := range plan.Kept {
		d := decision(name)
		d.Kept = kept
		decisions = append(decisions, d)
	}
	for _, removal := range slices.Concat(plan.Empty, plan.Drain) {
		d := decision(removal.Node.Name)
		d.Removing = true
		decisions = append(decisions, d)
	}
	consolidated := map[string]string{}
	if consolidation := plan.Consolidation; consolidation != nil {
		for _, removal := range consolidation.Removals {
			consolidated[removal.Node.Name] = consolidation.Message()
		}
	}
	if replacing := plan.Replacing; replacing != nil {
		for _, removal := range replacing.Replacing.Consolidation.Removals {
			consolidated[removal.Node.Name] = replacing.Message()
		}
	}
	for i := range decisions {
		decisions[i].Consolidation = consolidated[decisions[i].Name]
	}
	slices.SortFunc(decisions, func(a, b NodeDecision) int { return strings.Compare(a.Name, b.Name) })
	return decisions
}
