// Package trim shrinks the Pods and Nodes a cache keeps for the engine to
// what the engine reads. A workload cluster has tens of pods per node and
// the cache holds every one of them, so the cached Pod is the bulk of the
// autoscaler's memory: trimming drops the fields the engine never reads
// (images, commands, environment, probes, volume mounts, container
// statuses, managed fields...) and shares the parts that the pods of one
// workload have in common (labels, owner, containers, tolerations,
// affinity) between them.
//
// Objects returned by a Transformer share memory with each other: they
// must be read only, as objects read from a cache always are.
package trim

import (
	"reflect"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// PodAnnotations are the only pod annotations the engine reads; the
// others are dropped.
var PodAnnotations = []string{
	corev1.MirrorPodAnnotationKey,
	scaledown.SafeToEvictAnnotation,
	scaledown.SafeToEvictLocalVolumesAnnotation,
}

// maxOwners bounds the pods remembered for sharing; when it is reached the
// Transformer starts afresh, which only stops the next pods from sharing
// with the earlier ones.
const maxOwners = 8192

// Transformer trims the objects of one or more caches. It is safe for
// concurrent use.
type Transformer struct {
	mu sync.Mutex
	// last is the last pod trimmed of each controller: the pods of one
	// workload share their common parts with it.
	last map[types.UID]*corev1.Pod
}

// NewTransformer returns a Transformer that remembers no pod yet.
func NewTransformer() *Transformer {
	return &Transformer{last: map[types.UID]*corev1.Pod{}}
}

// Transform trims a *corev1.Pod or *corev1.Node in place and returns it;
// it returns other objects unchanged. It has the signature of a cache
// transform function.
func (t *Transformer) Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		t.Pod(o)
	case *corev1.Node:
		Node(o)
	}
	return obj, nil
}

// Pod keeps of pod what the engine reads; the parts equal to those of the
// last pod of the same controller are shared with it.
func (t *Transformer) Pod(pod *corev1.Pod) {
	pod.ObjectMeta = metav1.ObjectMeta{
		Name:                       pod.Name,
		Namespace:                  pod.Namespace,
		UID:                        pod.UID,
		ResourceVersion:            pod.ResourceVersion,
		CreationTimestamp:          pod.CreationTimestamp,
		DeletionTimestamp:          pod.DeletionTimestamp,
		DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		Labels:                     pod.Labels,
		Annotations:                engineAnnotations(pod.Annotations),
		OwnerReferences:            slices.Clip(pod.OwnerReferences),
	}
	spec := &pod.Spec
	pod.Spec = corev1.PodSpec{
		NodeName:                      spec.NodeName,
		NodeSelector:                  spec.NodeSelector,
		Affinity:                      spec.Affinity,
		Tolerations:                   slices.Clip(spec.Tolerations),
		TopologySpreadConstraints:     slices.Clip(spec.TopologySpreadConstraints),
		Priority:                      spec.Priority,
		Overhead:                      spec.Overhead,
		Resources:                     spec.Resources,
		HostNetwork:                   spec.HostNetwork,
		TerminationGracePeriodSeconds: spec.TerminationGracePeriodSeconds,
		Volumes:                       localVolumes(spec.Volumes),
		Containers:                    containers(spec.Containers),
		InitContainers:                containers(spec.InitContainers),
	}
	pod.Status = corev1.PodStatus{
		Phase:      pod.Status.Phase,
		Conditions: scheduledCondition(pod.Status.Conditions),
	}

	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return
	}
	t.mu.Lock()
	previous := t.last[owner.UID]
	if len(t.last) >= maxOwners {
		clear(t.last)
	}
	t.last[owner.UID] = pod
	t.mu.Unlock()
	if previous != nil {
		shareWith(pod, previous)
	}
}

// shareWith makes pod use previous's labels, owners, containers,
// tolerations and scheduling constraints where they are equal.
func shareWith(pod, previous *corev1.Pod) {
	reuse(&pod.Labels, previous.Labels)
	reuse(&pod.Annotations, previous.Annotations)
	reuse(&pod.OwnerReferences, previous.OwnerReferences)
	reuse(&pod.Spec.NodeSelector, previous.Spec.NodeSelector)
	reuse(&pod.Spec.Affinity, previous.Spec.Affinity)
	reuse(&pod.Spec.Tolerations, previous.Spec.Tolerations)
	reuse(&pod.Spec.TopologySpreadConstraints, previous.Spec.TopologySpreadConstraints)
	reuse(&pod.Spec.Priority, previous.Spec.Priority)
	reuse(&pod.Spec.Overhead, previous.Spec.Overhead)
	reuse(&pod.Spec.Resources, previous.Spec.Resources)
	reuse(&pod.Spec.TerminationGracePeriodSeconds, previous.Spec.TerminationGracePeriodSeconds)
	reuse(&pod.Spec.Volumes, previous.Spec.Volumes)
	reuse(&pod.Spec.Containers, previous.Spec.Containers)
	reuse(&pod.Spec.InitContainers, previous.Spec.InitContainers)
	reuse(&pod.Status.Conditions, previous.Status.Conditions)
}

// reuse sets *field to previous when they are equal.
func reuse[T any](field *T, previous T) {
	if reflect.DeepEqual(*field, previous) {
		*field = previous
	}
}

// Node drops what the engine never reads from node and is large on real
// nodes: the managed fields and the list of images.
func Node(node *corev1.Node) {
	node.ManagedFields = nil
	node.Status.Images = nil
}

// engineAnnotations are the annotations among PodAnnotations, or nil.
func engineAnnotations(annotations map[string]string) map[string]string {
	var out map[string]string
	for _, key := range PodAnnotations {
		if value, ok := annotations[key]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[key] = value
		}
	}
	return out
}

// containers keeps of each container its name, its requests, its host
// ports and its restart policy (which makes an init container a sidecar).
func containers(in []corev1.Container) []corev1.Container {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(in))
	for i := range in {
		var ports []corev1.ContainerPort
		for _, port := range in[i].Ports {
			if port.HostPort != 0 {
				ports = append(ports, port)
			}
		}
		out[i] = corev1.Container{
			Name:          in[i].Name,
			Resources:     corev1.ResourceRequirements{Requests: in[i].Resources.Requests},
			Ports:         ports,
			RestartPolicy: in[i].RestartPolicy,
		}
	}
	return out
}

// localVolumes are the emptyDir and hostPath volumes, which decide
// whether a pod may be moved.
func localVolumes(in []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, volume := range in {
		if volume.EmptyDir != nil || volume.HostPath != nil {
			out = append(out, corev1.Volume{Name: volume.Name, VolumeSource: corev1.VolumeSource{EmptyDir: volume.EmptyDir, HostPath: volume.HostPath}})
		}
	}
	return out
}

// scheduledCondition is the PodScheduled condition without its message
// and times: whether the scheduler found the pod no node.
func scheduledCondition(in []corev1.PodCondition) []corev1.PodCondition {
	for _, condition := range in {
		if condition.Type == corev1.PodScheduled {
			return []corev1.PodCondition{{Type: condition.Type, Status: condition.Status, Reason: condition.Reason}}
		}
	}
	return nil
}
