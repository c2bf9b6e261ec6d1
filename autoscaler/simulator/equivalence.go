package simulator

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// PodGroup is a set of pods that the scheduler cannot tell apart: same
// controller and same scheduling-relevant spec. What is true of one on a
// node is true of all, so 10,000 replicas cost about as much as one.
type PodGroup struct {
	Pods []*corev1.Pod
	// info is parsed from first, the first of Pods, and shared by all.
	info         *snapshot.PodInfo
	first        *corev1.Pod
	nodeAffinity nodeaffinity.RequiredNodeAffinity
	// self is how the pods match their own terms, and volumes what their
	// claims need, known once the scheduler first looks at the group.
	self    *selfTerms
	volumes *podVolumes
	// claims are the pod's resource claims, for groups of one pod with
	// claims (see sameSchedulingSpec).
	claims *podClaims
	// interPod is true when whether a pod fits depends on where other pods
	// are beyond the node's own resources: pod affinity or topology spread.
	// Placing pods can make such a group fit a node it did not fit before.
	interPod bool
	// scanKeyValue is the group's key in Scans, once scanKeyKnown.
	scanKeyValue string
	scanKeyKnown bool
}

// NewPodGroup returns a group of one pod.
func NewPodGroup(pod *corev1.Pod) *PodGroup {
	return newPodGroup(pod, snapshot.NewPodInfo(pod))
}

func newPodGroup(pod *corev1.Pod, info *snapshot.PodInfo) *PodGroup {
	return &PodGroup{
		Pods:         []*corev1.Pod{pod},
		info:         info,
		first:        pod,
		nodeAffinity: nodeaffinity.GetRequiredNodeAffinity(pod),
		interPod:     len(info.RequiredAffinityTerms) > 0 || hasHardSpreadConstraints(&pod.Spec),
	}
}

// DependsOnOtherPods tells whether a member's fit on a node can change when
// pods are placed elsewhere (pod affinity, topology spread).
func (g *PodGroup) DependsOnOtherPods() bool { return g.interPod }

// HasRequiredAntiAffinity tells whether members keep other pods out of
// their topology domain, so that each needs a domain of its own.
func (g *PodGroup) HasRequiredAntiAffinity() bool { return len(g.info.RequiredAntiAffinityTerms) > 0 }

// Subset returns a group of some of the pods of g, sharing its parsed form.
func (g *PodGroup) Subset(pods []*corev1.Pod) *PodGroup {
	subset := *g
	subset.Pods = pods
	return &subset
}

// Requests are the resources one pod of the group requests.
func (g *PodGroup) Requests() snapshot.Resources { return g.info.Requests }

// podInfo returns the parsed form of a member without parsing it again.
func (g *PodGroup) podInfo(pod *corev1.Pod) *snapshot.PodInfo {
	if pod == g.first {
		return g.info
	}
	info := *g.info
	info.Pod = snapshot.NewPod(pod)
	return &info
}

// GroupPods splits pods into equivalence groups, in the order their first
// pods appear. Pods without a controller are groups of their own, but
// share their identity with the pods of the same namespace and labels.
func GroupPods(pods []*corev1.Pod) []*PodGroup {
	var groups []*PodGroup
	byOwner := map[types.UID][]*PodGroup{}
	ids := snapshot.NewIdentities()
	for _, pod := range pods {
		owner := controllerUID(pod)
		if owner == "" {
			groups = append(groups, newPodGroup(pod, snapshot.NewPodInfoOf(pod, ids)))
			continue
		}
		found := false
		for _, group := range byOwner[owner] {
			if sameSchedulingSpec(group.Pods[0], pod) {
				group.Pods = append(group.Pods, pod)
				found = true
				break
			}
		}
		if !found {
			group := newPodGroup(pod, snapshot.NewPodInfoOf(pod, ids))
			byOwner[owner] = append(byOwner[owner], group)
			groups = append(groups, group)
		}
	}
	return groups
}

func controllerUID(pod *corev1.Pod) types.UID {
	for i := range pod.OwnerReferences {
		if ref := &pod.OwnerReferences[i]; ref.Controller != nil && *ref.Controller {
			return ref.UID
		}
	}
	return ""
}

// sameSchedulingSpec compares everything the simulator looks at. Labels
// matter because a pod may match its own affinity or spread selectors.
func sameSchedulingSpec(a, b *corev1.Pod) bool {
	// Pods with resource claims are groups of their own: each has claims
	// of its own, allocated on its own node.
	if len(a.Spec.ResourceClaims) > 0 || len(b.Spec.ResourceClaims) > 0 {
		return false
	}
	if a.Namespace != b.Namespace || a.Spec.NodeName != b.Spec.NodeName || !sameClaims(a, b) ||
		!maps.Equal(a.Labels, b.Labels) || !maps.Equal(a.Spec.NodeSelector, b.Spec.NodeSelector) ||
		len(a.Spec.Containers) != len(b.Spec.Containers) || len(a.Spec.InitContainers) != len(b.Spec.InitContainers) {
		return false
	}
	semantic := equality.Semantic
	if !semantic.DeepEqual(a.Spec.Affinity, b.Spec.Affinity) ||
		!semantic.DeepEqual(a.Spec.Tolerations, b.Spec.Tolerations) ||
		!semantic.DeepEqual(a.Spec.TopologySpreadConstraints, b.Spec.TopologySpreadConstraints) ||
		!semantic.DeepEqual(a.Spec.Overhead, b.Spec.Overhead) ||
		!semantic.DeepEqual(a.Spec.Resources, b.Spec.Resources) {
		return false
	}
	for i := range a.Spec.Containers {
		ca, cb := &a.Spec.Containers[i], &b.Spec.Containers[i]
		if !sameRequests(ca.Resources.Requests, cb.Resources.Requests) || !slices.Equal(ca.Ports, cb.Ports) {
			return false
		}
	}
	for i := range a.Spec.InitContainers {
		ca, cb := &a.Spec.InitContainers[i], &b.Spec.InitContainers[i]
		if !sameRequests(ca.Resources.Requests, cb.Resources.Requests) || !slices.Equal(ca.Ports, cb.Ports) ||
			!ptr.Equal(ca.RestartPolicy, cb.RestartPolicy) {
			return false
		}
	}
	return true
}

// sameClaims tells whether two pods use the same claims. Pods with
// generic ephemeral volumes never do: each has claims of its own, which
// count against attach limits apart.
func sameClaims(a, b *corev1.Pod) bool {
	claimsOf := func(pod *corev1.Pod) ([]string, bool) {
		var claims []string
		for i := range pod.Spec.Volumes {
			volume := &pod.Spec.Volumes[i]
			if volume.Ephemeral != nil {
				return nil, false
			}
			if volume.PersistentVolumeClaim != nil {
				claims = append(claims, volume.PersistentVolumeClaim.ClaimName)
			}
		}
		return claims, true
	}
	claimsA, okA := claimsOf(a)
	claimsB, okB := claimsOf(b)
	return okA && okB && slices.Equal(claimsA, claimsB)
}

// sameRequests is equality.Semantic.DeepEqual for resource lists, without
// reflection: it runs for every container of every pod grouped.
func sameRequests(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, quantity := range a {
		other, ok := b[name]
		if !ok || quantity.Cmp(other) != 0 {
			return false
		}
	}
	return true
}

func hasHardSpreadConstraints(spec *corev1.PodSpec) bool {
	for i := range spec.TopologySpreadConstraints {
		if spec.TopologySpreadConstraints[i].WhenUnsatisfiable == corev1.DoNotSchedule {
			return true
		}
	}
	return false
}

// FitClasses numbers groups so that groups of one number differ at most in
// the cpu and memory they request: where a pod of one of them does not fit
// a node for another reason, and the reason lasts as more pods are placed,
// a pod of any of them does not fit either. Pods without owners, each a
// group of its own, mostly fall into few classes.
func FitClasses(groups []*PodGroup) map[*PodGroup]int {
	classes := make(map[*PodGroup]int, len(groups))
	numbers := map[string]int{}
	for _, group := range groups {
		key := fitKey(group)
		number, ok := numbers[key]
		if !ok {
			number = len(numbers)
			numbers[key] = number
		}
		classes[group] = number
	}
	return classes
}

// fitKey is what the predicates read of a group's pods but cpu and memory
// requests and what a state signature covers.
func fitKey(group *PodGroup) string {
	pod := group.info.Pod
	b := append([]byte(termsSignature(pod)), 0)
	b = append(append(b, labelsSignature(pod)...), 0)
	b = append(append(b, pod.NodeName...), 0)
	b = snapshot.AppendLabels(b, pod.Spec.NodeSelector)
	if affinity := pod.Spec.Affinity; affinity != nil && affinity.NodeAffinity != nil {
		b = appendMarshalled(append(b, 'N'), affinity.NodeAffinity)
	}
	for i := range pod.Spec.Tolerations {
		b = appendMarshalled(append(b, 't'), &pod.Spec.Tolerations[i])
	}
	for _, port := range group.info.HostPorts {
		b = fmt.Appendf(b, "p%s/%s/%d", port.IP, port.Protocol, port.Port)
	}
	for _, claim := range group.info.Claims {
		b = fmt.Appendf(b, "c%s/%t", claim.Name, claim.Ephemeral)
	}
	requests := group.info.Requests
	b = fmt.Appendf(b, "r%d", requests.EphemeralStorage)
	for _, name := range slices.Sorted(maps.Keys(requests.Scalar)) {
		b = fmt.Appendf(b, "%s=%d", name, requests.Scalar[name])
	}
	return string(b)
}
