// Package trim turns the Pods a cache receives into the compact
// snapshot.Pods the engine reads, and trims the Nodes and the metadata of
// controllers. A workload cluster has tens of pods per node and the cache
// holds every one of them, so the cached pod is the bulk of the
// autoscaler's memory: a snapshot.Pod keeps the fields the engine reads,
// not the 1.2 KiB struct of a corev1.Pod; its spec keeps what scheduling
// reads, not images, commands, environment, probes or volume mounts; and
// the pods of one workload share their common parts (labels, owner, spec,
// conditions) between them.
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

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// PodAnnotations are the only pod annotations the engine reads; the
// others are dropped.
var PodAnnotations = []string{
	corev1.MirrorPodAnnotationKey,
	scaledown.SafeToEvictAnnotation,
	scaledown.SafeToEvictLocalVolumesAnnotation,
	scaledown.DoNotDisruptAnnotation,
	snapshot.DaemonSetPodAnnotation,
	provisioningv1.ConsumeProvisioningRequestAnnotation,
	provisioningv1.DeprecatedConsumeProvisioningRequestAnnotation,
}

// maxOwners bounds the pods remembered for sharing; when it is reached the
// Transformer starts afresh, which only stops the next pods from sharing
// with the earlier ones.
const maxOwners = 8192

// Transformer converts the objects of one or more caches. It is safe for
// concurrent use.
type Transformer struct {
	mu sync.Mutex
	// last is the last pod converted of each controller: the pods of one
	// workload share their common parts with it.
	last map[types.UID]*snapshot.Pod
}

// NewTransformer returns a Transformer that remembers no pod yet.
func NewTransformer() *Transformer {
	return &Transformer{last: map[types.UID]*snapshot.Pod{}}
}

// Transform returns a *snapshot.Pod for a *corev1.Pod, and trims a
// *corev1.Node and a *metav1.PartialObjectMetadata in place; it returns
// other objects unchanged. It has the signature of a cache transform
// function; a cache of Pods transformed this way holds snapshot.Pods,
// which only the informer's store and handlers can read (client.Reader
// cannot).
func (t *Transformer) Transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return t.Pod(o), nil
	case *corev1.Node:
		Node(o)
	case *metav1.PartialObjectMetadata:
		Metadata(o)
	}
	return obj, nil
}

// Pod returns what the engine reads of pod; the parts equal to those of the
// last pod of the same controller are shared with it. pod is not modified.
func (t *Transformer) Pod(pod *corev1.Pod) *snapshot.Pod {
	spec := &pod.Spec
	out := snapshot.NewPod(pod)
	out.Annotations = engineAnnotations(pod.Annotations)
	out.OwnerReferences = slices.Clip(pod.OwnerReferences)
	out.Conditions = scheduledCondition(pod.Status.Conditions)
	// NodeName stays out of the spec, so that replicas on different nodes
	// share it.
	out.Spec = &corev1.PodSpec{
		NodeSelector:                  spec.NodeSelector,
		Affinity:                      spec.Affinity,
		Tolerations:                   slices.Clip(spec.Tolerations),
		TopologySpreadConstraints:     slices.Clip(spec.TopologySpreadConstraints),
		Priority:                      spec.Priority,
		Overhead:                      spec.Overhead,
		Resources:                     spec.Resources,
		HostNetwork:                   spec.HostNetwork,
		TerminationGracePeriodSeconds: spec.TerminationGracePeriodSeconds,
		Volumes:                       engineVolumes(spec.Volumes),
		ResourceClaims:                slices.Clip(spec.ResourceClaims),
		Containers:                    containers(spec.Containers),
		InitContainers:                containers(spec.InitContainers),
	}

	owner := out.Controller()
	if owner == nil {
		return out
	}
	t.mu.Lock()
	previous := t.last[owner.UID]
	if len(t.last) >= maxOwners {
		clear(t.last)
	}
	t.last[owner.UID] = out
	t.mu.Unlock()
	if previous != nil {
		shareWith(out, previous)
	}
	return out
}

// shareWith makes pod use previous's namespace, labels, owners, spec and
// conditions where they are equal.
func shareWith(pod, previous *snapshot.Pod) {
	reuse(&pod.Namespace, previous.Namespace)
	reuse(&pod.Labels, previous.Labels)
	reuse(&pod.Annotations, previous.Annotations)
	reuse(&pod.OwnerReferences, previous.OwnerReferences)
	reuse(&pod.Conditions, previous.Conditions)
	reuse(&pod.Spec, previous.Spec)
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

// Metadata keeps of an object read as metadata what names it: the engine
// reads controllers this way only to know which exist, and a cluster may
// have tens of thousands of ReplicaSets (ten old ones per Deployment by
// default), whose labels and annotations it never reads.
func Metadata(obj *metav1.PartialObjectMetadata) {
	obj.ObjectMeta = metav1.ObjectMeta{Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion}
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

// engineVolumes are the volumes the engine reads: emptyDir and hostPath
// volumes, which decide whether a pod may be moved, and the claims, which
// decide where it fits. Of a generic ephemeral volume only its name
// matters: it names the pod's claim.
func engineVolumes(in []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, volume := range in {
		kept := corev1.VolumeSource{EmptyDir: volume.EmptyDir, HostPath: volume.HostPath, PersistentVolumeClaim: volume.PersistentVolumeClaim}
		if volume.Ephemeral != nil {
			kept.Ephemeral = &corev1.EphemeralVolumeSource{}
		}
		if kept != (corev1.VolumeSource{}) {
			out = append(out, corev1.Volume{Name: volume.Name, VolumeSource: kept})
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
