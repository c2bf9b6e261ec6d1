package snapshot

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resources is a compact, allocation-free form of a corev1.ResourceList,
// the way kube-scheduler keeps it: comparing int64s is much cheaper than
// comparing resource.Quantity values in the inner loop of a simulation.
type Resources struct {
	MilliCPU         int64
	Memory           int64
	EphemeralStorage int64
	// Pods is the number of pods; on a node it is the pod capacity, in
	// requests it is the number of pods placed.
	Pods int64
	// Scalar holds extended resources and hugepages; nil when there are none.
	Scalar map[corev1.ResourceName]int64
}

// NewResources converts a ResourceList. The pods entry becomes Pods.
func NewResources(list corev1.ResourceList) Resources {
	var r Resources
	for name, quantity := range list {
		switch name {
		case corev1.ResourceCPU:
			r.MilliCPU = quantity.MilliValue()
		case corev1.ResourceMemory:
			r.Memory = quantity.Value()
		case corev1.ResourceEphemeralStorage:
			r.EphemeralStorage = quantity.Value()
		case corev1.ResourcePods:
			r.Pods = quantity.Value()
		default:
			if r.Scalar == nil {
				r.Scalar = map[corev1.ResourceName]int64{}
			}
			r.Scalar[name] = quantity.Value()
		}
	}
	return r
}

// PodRequests are the resources the scheduler reserves for a pod: the
// larger of its init containers and its containers plus sidecars, pod-level
// requests when set, and the pod overhead (k8s.io/component-helpers/resource).
// Pods is always 1.
func PodRequests(pod *corev1.Pod) Resources {
	return podRequests(NewPod(pod), nil)
}

// podRequests is PodRequests reusing a resource list, to spare allocations
// when building a snapshot of many pods.
func podRequests(pod *Pod, reuse corev1.ResourceList) Resources {
	if r, ok := containerRequests(pod.Spec); ok {
		return r
	}
	r := NewResources(resourcehelper.PodRequests(pod.Full(), resourcehelper.PodResourcesOptions{Reuse: reuse}))
	r.Pods = 1
	return r
}

// containerRequests is PodRequests for the common pod that has neither
// init containers, pod-level resources nor overhead, and requests nothing
// but cpu, memory and ephemeral storage: the sum of its containers'
// requests. It adds quantities before converting them, as PodRequests does,
// and saves building a ResourceList, the bulk of the cost of a snapshot.
// ok is false for other pods.
func containerRequests(spec *corev1.PodSpec) (r Resources, ok bool) {
	if len(spec.InitContainers) > 0 || spec.Resources != nil || spec.Overhead != nil {
		return Resources{}, false
	}
	var cpu, memory, ephemeralStorage resource.Quantity
	for i := range spec.Containers {
		for name, quantity := range spec.Containers[i].Resources.Requests {
			switch name {
			case corev1.ResourceCPU:
				cpu.Add(quantity)
			case corev1.ResourceMemory:
				memory.Add(quantity)
			case corev1.ResourceEphemeralStorage:
				ephemeralStorage.Add(quantity)
			default:
				return Resources{}, false
			}
		}
	}
	return Resources{MilliCPU: cpu.MilliValue(), Memory: memory.Value(), EphemeralStorage: ephemeralStorage.Value(), Pods: 1}, true
}

// Add adds other to r.
func (r *Resources) Add(other Resources) {
	r.MilliCPU += other.MilliCPU
	r.Memory += other.Memory
	r.EphemeralStorage += other.EphemeralStorage
	r.Pods += other.Pods
	if len(other.Scalar) > 0 && r.Scalar == nil {
		r.Scalar = make(map[corev1.ResourceName]int64, len(other.Scalar))
	}
	for name, value := range other.Scalar {
		r.Scalar[name] += value
	}
}

// Sub subtracts other from r.
func (r *Resources) Sub(other Resources) {
	r.MilliCPU -= other.MilliCPU
	r.Memory -= other.Memory
	r.EphemeralStorage -= other.EphemeralStorage
	r.Pods -= other.Pods
	if len(other.Scalar) > 0 && r.Scalar == nil {
		r.Scalar = make(map[corev1.ResourceName]int64, len(other.Scalar))
	}
	for name, value := range other.Scalar {
		r.Scalar[name] -= value
	}
}

// Get returns the amount of one resource (cpu in millicores).
func (r Resources) Get(name corev1.ResourceName) int64 {
	switch name {
	case corev1.ResourceCPU:
		return r.MilliCPU
	case corev1.ResourceMemory:
		return r.Memory
	case corev1.ResourceEphemeralStorage:
		return r.EphemeralStorage
	case corev1.ResourcePods:
		return r.Pods
	default:
		return r.Scalar[name]
	}
}

// Names lists the resources that are set, in no particular order.
func (r Resources) Names() []corev1.ResourceName {
	names := make([]corev1.ResourceName, 0, 4+len(r.Scalar))
	if r.MilliCPU != 0 {
		names = append(names, corev1.ResourceCPU)
	}
	if r.Memory != 0 {
		names = append(names, corev1.ResourceMemory)
	}
	if r.EphemeralStorage != 0 {
		names = append(names, corev1.ResourceEphemeralStorage)
	}
	if r.Pods != 0 {
		names = append(names, corev1.ResourcePods)
	}
	for name := range r.Scalar {
		names = append(names, name)
	}
	return names
}

// Clone returns a copy that shares nothing with r.
func (r Resources) Clone() Resources {
	r.Scalar = maps.Clone(r.Scalar)
	return r
}
