package autoscaler

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// BufferStatus is how much of one capacity buffer's room the cluster
// holds, as the last loop planned it.
type BufferStatus struct {
	// Buffer is the buffer's namespace/name.
	Buffer string
	// Replicas are the pods the buffer holds room for.
	Replicas int
	// Held are those with room on nodes that exist.
	Held int
	// Upcoming are those whose room is on nodes on their way, or on the
	// nodes this loop's scale-up added.
	Upcoming int
	// Unplaceable are those no node group can make room for, with why.
	Unplaceable int
	Reasons     []ReasonCount
	// Schedule says, for a scheduled buffer, where it stands in its
	// schedule (buffers.Window.Message), or why its schedule is ignored;
	// outside its windows, Replicas is zero.
	Schedule string
}

// readBuffers adds the virtual pods of the cluster's capacity buffers to
// the pending pods of in, within OptionalReadTimeout. It writes nothing:
// what the buffers resolved to is written by the actuation at the end of
// the loop (actuation.writeBufferStatus). A failure does not stop the
// loop: it goes on without buffers, and the status says why.
func (s *steps) readBuffers(ctx context.Context, in *snapshot.Input, l *loop) {
	if s.opts.Buffers == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	list, err := s.opts.Buffers.ListBuffers(ctx)
	if err != nil {
		if s.told.buffersError.tellOnly(err.Error(), l.now) {
			klog.FromContext(ctx).Error(err, "Cannot read the capacity buffers of the cluster; no room is kept for them")
		}
		l.status.BuffersError = err.Error()
		return
	}
	// The read succeeded: its next error is told.
	s.told.buffersError.endRound()
	l.buffersRead = true
	l.listedBuffers = list
	for _, buffer := range list {
		if buffer.Schedule != nil {
			window := buffer.Schedule.At(l.now, s.settings.config.MaxNodeProvisionTime)
			if l.bufferWindows == nil {
				l.bufferWindows = map[string]buffers.Window{}
			}
			l.bufferWindows[buffer.Key()] = window
			if !window.Holding {
				continue
			}
		}
		l.buffers = append(l.buffers, buffer)
	}
	in.Pods = append(in.Pods, buffers.Pods(l.buffers, s.settings.config.PodPriorityThreshold)...)
}

// bufferReference names a buffer in its events.
func bufferReference(buffer *buffers.Buffer) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: "autoscaling.x-k8s.io/v1beta1", Kind: "CapacityBuffer",
		Namespace: buffer.Namespace, Name: buffer.Name, UID: buffer.UID,
	}
}

// bufferStatuses counts where the plan put the virtual pods of each buffer
// listed, with where the scheduled ones stand in their schedule.
func bufferStatuses(list []buffers.Buffer, windows map[string]buffers.Window, snap *snapshot.Snapshot, plan *scaleup.Plan) []BufferStatus {
	if len(list) == 0 {
		return nil
	}
	statuses := make([]BufferStatus, len(list))
	index := make(map[string]int, len(list))
	for i := range list {
		statuses[i] = BufferStatus{Buffer: list[i].Key(), Replicas: int(list[i].Replicas)}
		index[list[i].Key()] = i
		switch window, scheduled := windows[list[i].Key()]; {
		case list[i].ScheduleProblem != "":
			statuses[i].Schedule = "its schedule is ignored, and it holds its room at all times: " + list[i].ScheduleProblem
		case scheduled:
			statuses[i].Schedule = window.Message()
			if !window.Holding {
				statuses[i].Replicas = 0
			}
		}
	}
	of := func(pod *corev1.Pod) *BufferStatus {
		i, ok := index[pod.Annotations[buffers.BufferAnnotation]]
		if !ok {
			return nil
		}
		return &statuses[i]
	}
	for _, placement := range plan.Absorbed {
		if status := of(placement.Pod); status != nil {
			if snap.NodeInfo(placement.NodeName) != nil {
				status.Held++
			} else {
				status.Upcoming++
			}
		}
	}
	for _, pod := range plan.Helped {
		if status := of(pod); status != nil {
			status.Upcoming++
		}
	}
	reasons := map[*BufferStatus]map[string]int{}
	for _, pod := range plan.NoScaleUp {
		if status := of(pod.Pod); status != nil {
			status.Unplaceable++
			if reasons[status] == nil {
				reasons[status] = map[string]int{}
			}
			reasons[status][pod.Message()]++
		}
	}
	for status, counts := range reasons {
		status.Reasons = sortedReasons(counts)
	}
	return statuses
}

// withoutBufferPods are the pods that exist: the virtual pods of buffers
// get no events and no nominations.
func withoutBufferPods(pods []*corev1.Pod) []*corev1.Pod {
	return slices.DeleteFunc(slices.Clone(pods), buffers.IsBufferPod)
}

// bufferOf is the CapacityBuffer whose room a virtual pod holds, as the
// object of an event in the workload cluster; nil for a pod that exists.
func bufferOf(pod *corev1.Pod) *metav1.PartialObjectMetadata {
	if !buffers.IsBufferPod(pod) {
		return nil
	}
	for _, owner := range pod.OwnerReferences {
		if owner.Kind == "CapacityBuffer" {
			return &metav1.PartialObjectMetadata{
				TypeMeta:   metav1.TypeMeta{APIVersion: owner.APIVersion, Kind: owner.Kind},
				ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID},
			}
		}
	}
	return nil
}

// buffersOf are the CapacityBuffers whose virtual pods are among pods,
// once each, as upstream tells a scale-up on the buffers it was for.
func buffersOf(pods []*corev1.Pod) []*metav1.PartialObjectMetadata {
	var out []*metav1.PartialObjectMetadata
	seen := map[types.UID]bool{}
	for _, pod := range pods {
		if buffer := bufferOf(pod); buffer != nil && !seen[buffer.UID] {
			seen[buffer.UID] = true
			out = append(out, buffer)
		}
	}
	return out
}

// unhelpedBuffer is a CapacityBuffer whose room no node group can make,
// and why: the reason of its first virtual pod left.
type unhelpedBuffer struct {
	buffer  *metav1.PartialObjectMetadata
	message string
}

// buffersNotHelped are the CapacityBuffers with virtual pods that no node
// group can help, once each.
func buffersNotHelped(noScaleUp []scaleup.NoScaleUp) []unhelpedBuffer {
	var out []unhelpedBuffer
	seen := map[types.UID]bool{}
	for _, pod := range noScaleUp {
		if buffer := bufferOf(pod.Pod); buffer != nil && !seen[buffer.UID] {
			seen[buffer.UID] = true
			out = append(out, unhelpedBuffer{buffer: buffer, message: pod.Message()})
		}
	}
	return out
}

// placementsOfRealPods are the placements of pods that exist.
func placementsOfRealPods(placements []simulator.Placement) []simulator.Placement {
	return slices.DeleteFunc(slices.Clone(placements), func(p simulator.Placement) bool { return buffers.IsBufferPod(p.Pod) })
}

// realNoScaleUp are the pods that exist among those no group can help.
func realNoScaleUp(pods []scaleup.NoScaleUp) []scaleup.NoScaleUp {
	return slices.DeleteFunc(slices.Clone(pods), func(n scaleup.NoScaleUp) bool { return buffers.IsBufferPod(n.Pod) })
}
