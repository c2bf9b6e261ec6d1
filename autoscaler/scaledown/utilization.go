package scaledown

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Utilization is how much of a node its pods request.
type Utilization struct {
	// Value is what the node is judged on: the larger of CPU and Memory,
	// or GPU on GPU nodes.
	Value       float64
	CPU, Memory float64
	// GPU is the utilization of the GPU resource of a GPU node, else 0.
	GPU float64
	// GPUResource is the GPU resource of a GPU node, else empty.
	GPUResource corev1.ResourceName
}

// NodeUtilization computes the utilization of a node at now from the
// requests of its pods over its allocatable. DaemonSet and mirror pods
// count unless opts says to ignore them; pods gone but still listed never
// count. A node with allocatable GPUs is judged on them alone: its CPU and
// memory are there to feed the GPUs.
func NodeUtilization(nodeInfo *snapshot.NodeInfo, opts Options, now time.Time) Utilization {
	requested := nodeInfo.Requested().Clone()
	for _, pod := range nodeInfo.Pods() {
		if gone(pod.Pod, now) ||
			(opts.IgnoreDaemonSetsUtilization && pod.Pod.IsDaemonSetPod()) ||
			(opts.IgnoreMirrorPodsUtilization && isMirrorPod(pod.Pod)) {
			requested.Sub(pod.Requests)
		}
	}
	allocatable := nodeInfo.Allocatable()
	u := Utilization{
		CPU:    ratio(requested.MilliCPU, allocatable.MilliCPU),
		Memory: ratio(requested.Memory, allocatable.Memory),
	}
	u.Value = max(u.CPU, u.Memory)
	if gpu := gpuResource(allocatable); gpu != "" {
		u.GPUResource = gpu
		u.GPU = ratio(requested.Scalar[gpu], allocatable.Scalar[gpu])
		u.Value = u.GPU
	}
	return u
}

// gpuResource returns the GPU resource of a node that offers allocatable, or "".
func gpuResource(allocatable snapshot.Resources) corev1.ResourceName {
	return nodefacts.GPUResource(func(name corev1.ResourceName) int64 { return allocatable.Scalar[name] })
}

// ratio is requested over allocatable; a resource the node does not offer
// is fully used as soon as anything requests it.
func ratio(requested, allocatable int64) float64 {
	if allocatable <= 0 {
		if requested > 0 {
			return 1
		}
		return 0
	}
	return float64(requested) / float64(allocatable)
}
