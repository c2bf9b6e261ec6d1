// The predicates: kube-scheduler's filters that matter for autoscaling,
// checked for a pod group on one node, the inter-pod ones against the pod
// counts states of the group (see podcounts.go).

package simulator

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// groupState is what the predicates need for a pod group: the states of
// its terms and of its labels, and how its pods match their own terms.
type groupState struct {
	terms, labels *podState
	self          *selfTerms
	// volumes is nil for groups without claims.
	volumes *podVolumes
	// claims is nil for groups without resource claims.
	claims *podClaims
}

// check runs the predicates in kube-scheduler's filter order for a pod of
// group and appends the reasons of the first that fails to reasons; nil
// when the pod fits. lasting tells whether the failure stays as more pods
// are placed: only topology spread and pod affinity can turn in the pod's
// favour.
func (gs groupState) check(logger klog.Logger, group *PodGroup, nodeInfo *snapshot.NodeInfo, reasons []string) (unfit []string, lasting bool) {
	pod := group.info.Pod
	node := nodeInfo.Node()
	if node.Spec.Unschedulable && !toleratesUnschedulable(logger, pod.Spec.Tolerations) {
		return append(reasons, ReasonUnschedulable), true
	}
	if pod.NodeName != "" && pod.NodeName != node.Name {
		return append(reasons, ReasonNodeName), true
	}
	if taint, untolerated := findUntoleratedTaint(logger, node, pod.Spec.Tolerations); untolerated {
		return append(reasons, ReasonUntoleratedTaint(taint)), true
	}
	if match, err := group.nodeAffinity.Match(node); err != nil || !match {
		return append(reasons, ReasonNodeAffinity), true
	}
	if hostPortsConflict(group.info.HostPorts, nodeInfo.HostPorts()) {
		return append(reasons, ReasonHostPorts), true
	}
	if unfit := insufficientResources(group.info.Requests, nodeInfo, reasons); len(unfit) > 0 {
		return unfit, true
	}
	if gs.volumes != nil {
		if reason := gs.volumes.check(nodeInfo); reason != "" {
			return append(reasons, reason), true
		}
	}
	if gs.claims != nil {
		if reason := gs.claims.check(nodeInfo); reason != "" {
			return append(reasons, reason), true
		}
	}
	if reason := gs.terms.checkSpread(node, gs.self); reason != "" {
		return append(reasons, reason), false
	}
	if gs.labels.keptAway(node) {
		return append(reasons, ReasonExistingAntiAffinity), true
	}
	if reason := gs.terms.checkInterPodAffinity(node, gs.self); reason != "" {
		return append(reasons, reason), reason != ReasonPodAffinity
	}
	return nil, false
}

func toleratesUnschedulable(logger klog.Logger, tolerations []corev1.Toleration) bool {
	taint := corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}
	return corev1helpers.TolerationsTolerateTaint(logger, tolerations, &taint, false)
}

func findUntoleratedTaint(logger klog.Logger, node *corev1.Node, tolerations []corev1.Toleration) (corev1.Taint, bool) {
	if len(node.Spec.Taints) == 0 {
		return corev1.Taint{}, false
	}
	return corev1helpers.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, tolerations, schedulingTaint, false)
}

func schedulingTaint(taint *corev1.Taint) bool {
	return taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute
}

func hostPortsConflict(wanted, used []snapshot.HostPort) bool {
	for _, port := range wanted {
		for _, other := range used {
			if port.ConflictsWith(other) {
				return true
			}
		}
	}
	return false
}

// insufficientResources follows kube-scheduler's NodeResourcesFit: the pod
// count always counts, a resource only when the pod requests it.
func insufficientResources(request snapshot.Resources, nodeInfo *snapshot.NodeInfo, reasons []string) []string {
	allocatable, requested := nodeInfo.Allocatable(), nodeInfo.Requested()
	if requested.Pods+1 > allocatable.Pods {
		reasons = append(reasons, ReasonTooManyPods)
	}
	if request.MilliCPU > 0 && request.MilliCPU > allocatable.MilliCPU-requested.MilliCPU {
		reasons = append(reasons, ReasonInsufficient(corev1.ResourceCPU))
	}
	if request.Memory > 0 && request.Memory > allocatable.Memory-requested.Memory {
		reasons = append(reasons, ReasonInsufficient(corev1.ResourceMemory))
	}
	if request.EphemeralStorage > 0 && request.EphemeralStorage > allocatable.EphemeralStorage-requested.EphemeralStorage {
		reasons = append(reasons, ReasonInsufficient(corev1.ResourceEphemeralStorage))
	}
	if len(request.Scalar) == 0 {
		return reasons
	}
	scalarStart := len(reasons)
	for name, quantity := range request.Scalar {
		if quantity > 0 && quantity > allocatable.Scalar[name]-requested.Scalar[name] {
			reasons = append(reasons, ReasonInsufficient(name))
		}
	}
	slices.Sort(reasons[scalarStart:])
	return reasons
}

func (st *podState) checkSpread(node *corev1.Node, self *selfTerms) string {
	for i := range st.spread {
		constraint := &st.spread[i]
		value, ok := node.Labels[constraint.topologyKey]
		if !ok {
			return ReasonTopologySpreadNoLabel
		}
		if constraint.domains.counts[value]+self.spread[i]-constraint.domains.minimum(constraint.minDomains) > constraint.maxSkew {
			return ReasonTopologySpread
		}
	}
	return ""
}

// keptAway tells whether placed pods' anti-affinity keeps the group off
// node.
func (st *podState) keptAway(node *corev1.Node) bool {
	for key, counts := range st.existingAntiAffinity {
		if value, ok := node.Labels[key]; ok && counts[value] > 0 {
			return true
		}
	}
	return false
}

func (st *podState) checkInterPodAffinity(node *corev1.Node, self *selfTerms) string {
	info := st.info
	if len(info.RequiredAffinityTerms) > 0 {
		podsExist := true
		for i := range info.RequiredAffinityTerms {
			key := info.RequiredAffinityTerms[i].TopologyKey
			value, ok := node.Labels[key]
			if !ok {
				return ReasonPodAffinity
			}
			if st.affinityCounts[topologyPair{key: key, value: value}] <= 0 {
				podsExist = false
			}
		}
		// The first pod of a set with affinity to itself may go anywhere,
		// or no such set could ever start.
		if !podsExist && (len(st.affinityCounts) > 0 || !self.affine) {
			return ReasonPodAffinity
		}
	}
	for i := range info.RequiredAntiAffinityTerms {
		key := info.RequiredAntiAffinityTerms[i].TopologyKey
		if value, ok := node.Labels[key]; ok && st.antiAffinityCounts[topologyPair{key: key, value: value}] > 0 {
			return ReasonPodAntiAffinity
		}
	}
	return ""
}
