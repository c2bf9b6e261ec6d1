// Package buffers turns capacity buffers (the CapacityBuffer API of
// autoscaling.x-k8s.io) into the pods that hold their room in the
// engine's simulation. A buffer asks for room for some number of pods of a
// template; the engine adds that many virtual pods to the pending pods of
// each loop, so that scale-up makes room for those that fit nowhere and
// scale-down keeps the nodes that hold the others. The virtual pods never
// reach the API server. A buffer may be on a schedule (schedule.go):
// outside its windows, less a lead time, the engine leaves its pods out.
package buffers

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
)

// Lister lists the capacity buffers of a cluster, resolved, and writes
// what they resolved to in their status.
type Lister interface {
	// ListBuffers lists the buffers that hold room for at least one pod,
	// resolved, with their schedules: those outside their windows are
	// listed too, and left out by the engine. It writes nothing.
	ListBuffers(ctx context.Context) ([]Buffer, error)
	// WriteStatus writes in the status of the buffers the last
	// ListBuffers resolved what they resolved to, and where the scheduled
	// ones stand in their schedule: windows, by buffer key.
	WriteStatus(ctx context.Context, windows map[string]Window)
}

// BufferAnnotation, on a virtual pod, names the buffer it holds room for
// (namespace/name). Only the engine's virtual pods carry it.
const BufferAnnotation = "autoscaling.cluster.x-k8s.io/capacity-buffer"

// safeToEvictAnnotation is the upstream annotation that lifts scale-down's
// rules for a pod: a virtual pod needs only room elsewhere to move.
const safeToEvictAnnotation = "cluster-autoscaler.kubernetes.io/safe-to-evict"

// Buffer is the room a capacity buffer asks for, resolved: Replicas pods
// of Template.
type Buffer struct {
	Namespace string
	Name      string
	UID       types.UID
	// CreationTimestamp is the buffer's: its pods are as old as it is,
	// so that the delay for new pods does not hold them back.
	CreationTimestamp metav1.Time
	// Template is the pod each unit of the buffer is room for.
	Template corev1.PodTemplateSpec
	// Replicas is how many such pods.
	Replicas int32
	// Schedule, when set, is when the buffer holds its room; without
	// one, it holds it at all times.
	Schedule *Schedule
	// ScheduleProblem is what is wrong with the buffer's schedule
	// annotations, which are then ignored: the buffer holds its room at
	// all times, as without them.
	ScheduleProblem string
}

// Key is the buffer's namespace/name.
func (b *Buffer) Key() string { return b.Namespace + "/" + b.Name }

// Pods are the virtual pods of the buffers, pending and unschedulable,
// at priority: the lowest priority that triggers a scale-up (the
// engine's priority cutoff), so that real pods, which the engine places
// first, win every tie. Each pod has a UID of its own, stable across
// loops, so that the engine keeps its place from one loop to the next.
func Pods(buffers []Buffer, priority int32) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range buffers {
		b := &buffers[i]
		for n := range b.Replicas {
			pods = append(pods, b.pod(n, priority))
		}
	}
	return pods
}

func (b *Buffer) pod(n, priority int32) *corev1.Pod {
	spec := b.Template.Spec.DeepCopy()
	spec.NodeName = ""
	spec.Priority = ptr.To(priority)
	// The priority class would give it the class's value in the simulator.
	spec.PriorityClassName = ""
	annotations := maps.Clone(b.Template.Annotations)
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[BufferAnnotation] = b.Key()
	annotations[safeToEvictAnnotation] = "true"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         b.Namespace,
			Name:              fmt.Sprintf("capacity-buffer-%s-%d", b.Name, n),
			UID:               types.UID(fmt.Sprintf("%s-%d", b.UID, n)),
			CreationTimestamp: b.CreationTimestamp,
			Labels:            b.Template.Labels,
			Annotations:       annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "autoscaling.x-k8s.io/v1beta1", Kind: "CapacityBuffer",
				Name: b.Name, UID: b.UID, Controller: ptr.To(true),
			}},
		},
		Spec: *spec,
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			}},
		},
	}
}

// IsBufferPod tells whether a pod is a virtual pod of a buffer.
func IsBufferPod(pod *corev1.Pod) bool {
	_, ok := pod.Annotations[BufferAnnotation]
	return ok
}

// Size is what a buffer's spec asks for; nil fields are not set.
type Size struct {
	// Replicas is a number of pods.
	Replicas *int32
	// Percentage is a share of the replicas of the workload the buffer
	// refers to, WorkloadReplicas, rounded up.
	Percentage       *int32
	WorkloadReplicas *int32
	// Limits cap the resources all the buffer's pods request together.
	Limits corev1.ResourceList
}

// ReplicasOf is the number of pods of template a buffer of this size holds
// room for, as the upstream CapacityBuffer API defines it: the larger of
// replicas and the percentage of the workload's replicas, capped by what
// fits within limits; with limits alone, as many as fit. It fails when
// none of them applies, or when the limits name no resource the template
// requests.
func (s Size) ReplicasOf(template *corev1.PodTemplateSpec) (int32, error) {
	replicas := int32(-1)
	if s.Replicas != nil {
		replicas = max(0, *s.Replicas)
	}
	if s.Percentage != nil && s.WorkloadReplicas != nil {
		share := (int64(max(0, *s.Percentage))*int64(max(0, *s.WorkloadReplicas)) + 99) / 100
		replicas = max(replicas, int32(min(share, math.MaxInt32)))
	}
	if s.Limits != nil {
		byLimits, err := replicasWithin(template, s.Limits)
		if err != nil {
			return 0, err
		}
		if replicas < 0 {
			return byLimits, nil
		}
		return min(replicas, byLimits), nil
	}
	if replicas < 0 {
		return 0, fmt.Errorf("the buffer sets none of replicas, a percentage of a workload's replicas, and limits")
	}
	return replicas, nil
}

// replicasWithin is how many pods of template fit within limits, by every
// resource that both the pods request and the limits name.
func replicasWithin(template *corev1.PodTemplateSpec, limits corev1.ResourceList) (int32, error) {
	requests := resourcehelper.PodRequests(&corev1.Pod{Spec: template.Spec}, resourcehelper.PodResourcesOptions{})
	replicas := int64(math.MaxInt32)
	found := false
	for name, request := range requests {
		limit, ok := limits[name]
		if !ok || request.MilliValue() <= 0 {
			continue
		}
		found = true
		replicas = min(replicas, max(0, limit.MilliValue()/request.MilliValue()))
	}
	if !found {
		return 0, fmt.Errorf("the buffer's limits name none of the resources its pods request (%s)", resourceNames(requests))
	}
	return int32(replicas), nil
}

func resourceNames(list corev1.ResourceList) string {
	names := slices.Sorted(maps.Keys(list))
	if len(names) == 0 {
		return "none"
	}
	return fmt.Sprint(names)
}
