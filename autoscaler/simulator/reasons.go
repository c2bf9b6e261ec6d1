package simulator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Reasons a pod does not fit a node, worded like kube-scheduler's, because
// users see them in events and status next to the scheduler's own.
const (
	ReasonNodeName               = "node(s) didn't match the requested node name"
	ReasonUnschedulable          = "node(s) were unschedulable"
	ReasonNodeAffinity           = "node(s) didn't match Pod's node affinity/selector"
	ReasonHostPorts              = "node(s) didn't have free ports for the requested pod ports"
	ReasonTooManyPods            = "Too many pods"
	ReasonPodAffinity            = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinity        = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiAffinity   = "node(s) didn't satisfy existing pods anti-affinity rules"
	ReasonTopologySpread         = "node(s) didn't match pod topology spread constraints"
	ReasonTopologySpreadNoLabel  = "node(s) didn't match pod topology spread constraints (missing required label)"
	reasonInsufficientPrefix     = "Insufficient "
	reasonUntoleratedTaintFormat = "node(s) had untolerated taint {%s: %s}"
)

// ReasonInsufficient is the reason for a resource the node lacks, e.g.
// "Insufficient cpu".
func ReasonInsufficient(resource corev1.ResourceName) string {
	// The common ones are constants: this runs for every node a pod does
	// not fit.
	switch resource {
	case corev1.ResourceCPU:
		return reasonInsufficientCPU
	case corev1.ResourceMemory:
		return reasonInsufficientMemory
	case corev1.ResourceEphemeralStorage:
		return reasonInsufficientEphemeralStorage
	}
	return reasonInsufficientPrefix + string(resource)
}

const (
	reasonInsufficientCPU              = reasonInsufficientPrefix + string(corev1.ResourceCPU)
	reasonInsufficientMemory           = reasonInsufficientPrefix + string(corev1.ResourceMemory)
	reasonInsufficientEphemeralStorage = reasonInsufficientPrefix + string(corev1.ResourceEphemeralStorage)
)

// ReasonUntoleratedTaint is the reason for a taint the pod does not
// tolerate, e.g. "node(s) had untolerated taint {dedicated: gpu}".
func ReasonUntoleratedTaint(taint corev1.Taint) string {
	return fmt.Sprintf(reasonUntoleratedTaintFormat, taint.Key, taint.Value)
}

// Unschedulable is a pod that fits none of the nodes it was tried on.
type Unschedulable struct {
	Pod *corev1.Pod
	// Nodes is how many nodes were tried.
	Nodes int
	// Reasons counts the tried nodes per reason; a node lacking several
	// resources counts once for each.
	Reasons map[string]int
}

// Message summarises the reasons the way kube-scheduler does, e.g.
// "0/5 nodes are available: 3 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: gpu}."
func (u Unschedulable) Message() string {
	return fmt.Sprintf("0/%d nodes are available: %s.", u.Nodes, SummarizeReasons(u.Reasons))
}

// SummarizeReasons renders counted reasons most frequent first, then in
// alphabetical order: "3 Insufficient cpu, 1 Too many pods".
func SummarizeReasons(reasons map[string]int) string {
	keys := slices.Collect(maps.Keys(reasons))
	slices.SortFunc(keys, func(a, b string) int {
		if reasons[a] != reasons[b] {
			return reasons[b] - reasons[a]
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, key := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", reasons[key], key))
	}
	return strings.Join(parts, ", ")
}
