package snapshot

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DaemonSetPodAnnotation "true" makes a pod a DaemonSet pod whatever its
// controller, as the upstream cluster-autoscaler reads it: the pods of
// DaemonSet controllers of other kinds (OpenKruise's Advanced DaemonSet,
// for one) belong to their node as those of a DaemonSet do.
const DaemonSetPodAnnotation = "cluster-autoscaler.kubernetes.io/daemonset-pod"

// Pod is what the engine reads of a pod, without the rest of a
// corev1.Pod: a corev1.Pod is 1.2 KiB before any of its contents, and a
// cluster has tens of pods per node, so a cache of Pods costs a sixth of
// a cache of corev1.Pods. A Pod is read-only: its maps, slices and Spec
// may be shared with other Pods, such as the replicas of one workload.
// It keeps what a snapshot parsed of it, so that a cache's Pod is parsed
// once, not in every loop.
type Pod struct {
	Namespace, Name   string
	UID               types.UID
	ResourceVersion   string
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	Labels            map[string]string
	Annotations       map[string]string
	OwnerReferences   []metav1.OwnerReference
	// NodeName is the node the pod is bound to. Read it, never
	// Spec.NodeName, which is empty when Spec is shared by the replicas
	// of a workload on many nodes.
	NodeName string
	// NominatedNodeName is the node kube-scheduler keeps room on for the
	// pod (status.nominatedNodeName).
	NominatedNodeName string
	Phase             corev1.PodPhase
	Conditions        []corev1.PodCondition
	// ResourceClaimStatuses name the ResourceClaims made for the pod
	// from the templates of its spec.resourceClaims.
	ResourceClaimStatuses []corev1.PodResourceClaimStatus
	Spec                  *corev1.PodSpec

	// parsed is the pod's PodInfo, once a snapshot parsed it: the engines
	// of a cluster share its cache, and a cached pod parses the same in
	// every loop.
	parsed atomic.Pointer[PodInfo]
}

// NewPod returns the Pod of pod, sharing pod's maps, slices and spec.
func NewPod(pod *corev1.Pod) *Pod {
	return &Pod{
		Namespace:         pod.Namespace,
		Name:              pod.Name,
		UID:               pod.UID,
		ResourceVersion:   pod.ResourceVersion,
		CreationTimestamp: pod.CreationTimestamp,
		DeletionTimestamp: pod.DeletionTimestamp,
		Labels:            pod.Labels,
		Annotations:       pod.Annotations,
		OwnerReferences:   pod.OwnerReferences,
		NodeName:          pod.Spec.NodeName,
		NominatedNodeName: pod.Status.NominatedNodeName,
		Phase:             pod.Status.Phase,
		Conditions:        pod.Status.Conditions,
		Spec:              &pod.Spec,

		ResourceClaimStatuses: pod.Status.ResourceClaimStatuses,
	}
}

// Full returns a new corev1.Pod with what p holds, which the caller may
// change but whose maps, slices and pointers it shares with p.
func (p *Pod) Full() *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: p.objectMeta(),
		Spec:       *p.Spec,
		Status: corev1.PodStatus{
			Phase: p.Phase, Conditions: p.Conditions, NominatedNodeName: p.NominatedNodeName,
			ResourceClaimStatuses: p.ResourceClaimStatuses,
		},
	}
	pod.Spec.NodeName = p.NodeName
	return pod
}

// GetObjectMeta returns the pod's metadata, so that the stores and indexers
// of client-go's informers can key and index a Pod (meta.Accessor).
func (p *Pod) GetObjectMeta() metav1.Object {
	meta := p.objectMeta()
	return &meta
}

func (p *Pod) objectMeta() metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace:         p.Namespace,
		Name:              p.Name,
		UID:               p.UID,
		ResourceVersion:   p.ResourceVersion,
		CreationTimestamp: p.CreationTimestamp,
		DeletionTimestamp: p.DeletionTimestamp,
		Labels:            p.Labels,
		Annotations:       p.Annotations,
		OwnerReferences:   p.OwnerReferences,
	}
}

// Controller is the owner reference of the pod's controller, or nil.
func (p *Pod) Controller() *metav1.OwnerReference {
	for i := range p.OwnerReferences {
		if ref := &p.OwnerReferences[i]; ref.Controller != nil && *ref.Controller {
			return ref
		}
	}
	return nil
}

// IsDaemonSetPod tells whether the pod runs on its node as a daemon: its
// controller is a DaemonSet, of any API group, or the pod is annotated
// DaemonSetPodAnnotation "true".
func (p *Pod) IsDaemonSetPod() bool {
	if owner := p.Controller(); owner != nil && owner.Kind == "DaemonSet" {
		return true
	}
	return p.Annotations[DaemonSetPodAnnotation] == "true"
}

// Finished tells whether the pod has succeeded or failed: it holds no
// resources any more.
func (p *Pod) Finished() bool { return finished(p.Phase) }

func finished(phase corev1.PodPhase) bool {
	return phase == corev1.PodSucceeded || phase == corev1.PodFailed
}
