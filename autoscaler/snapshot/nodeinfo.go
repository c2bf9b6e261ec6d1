package snapshot

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// NodeInfo is a node with the pods placed on it and their sums. A NodeInfo
// returned by a Snapshot is read-only: change it through the Snapshot, which
// copies it on first write so that a fork never leaks into its parent.
type NodeInfo struct {
	node        *corev1.Node
	capacity    Resources
	allocatable Resources
	pods        []*PodInfo
	requested   Resources
	hostPorts   []HostPort
	// podsWithRequiredAntiAffinity is kept apart because every incoming pod
	// must be checked against them, on every node.
	podsWithRequiredAntiAffinity []*PodInfo
	// attachLimits are the node's CSI attach limits, shared by copies.
	attachLimits AttachLimits
	// resourceSlices publish the node's local DRA devices, shared by
	// copies.
	resourceSlices []*resourceapi.ResourceSlice
	// limitCapacity is what the cluster-wide limits count of the node
	// (LimitCapacity): capacity, and the devices of resourceSlices,
	// counted when the node gets them.
	limitCapacity Resources
	// order places the node in the snapshot's lists, which are sorted by
	// it: the snapshot sets it when the node is added.
	order uint64
}

// NewNodeInfo returns node with pods placed on it.
func NewNodeInfo(node *corev1.Node, pods ...*PodInfo) *NodeInfo {
	info := &NodeInfo{node: node, capacity: NewResources(node.Status.Capacity), allocatable: NewResources(node.Status.Allocatable)}
	info.limitCapacity = info.capacity
	for _, pod := range pods {
		info.addPod(pod)
	}
	return info
}

// Node is the node; never nil.
func (n *NodeInfo) Node() *corev1.Node { return n.node }

// Name is the node's name.
func (n *NodeInfo) Name() string { return n.node.Name }

// Order is the node's place in the snapshot's lists (Snapshot.NodeInfos),
// which are sorted by it: it finds the place again in a list that nodes
// were removed from since.
func (n *NodeInfo) Order() uint64 { return n.order }

// WithAttachLimits returns the node, not yet in a snapshot, with CSI
// attach limits, such as a template's.
func (n *NodeInfo) WithAttachLimits(limits AttachLimits) *NodeInfo {
	copied := n.clone()
	copied.attachLimits = limits
	return copied
}

// WithResourceSlices returns the node, not yet in a snapshot, with the
// node-local ResourceSlices of another node, such as a template's from a
// member of its group: copies published for this node, with devices
// unallocated.
func (n *NodeInfo) WithResourceSlices(slices []*resourceapi.ResourceSlice) *NodeInfo {
	copied := n.clone()
	copied.resourceSlices = nil
	for _, slice := range slices {
		copied.resourceSlices = append(copied.resourceSlices, renameSlices([]*resourceapi.ResourceSlice{slice}, LocalSliceNode(slice), n.node.Name)...)
	}
	copied.countDevices()
	return copied
}

// ResourceSlices are the ResourceSlices of the node's local DRA devices.
// Do not modify them.
func (n *NodeInfo) ResourceSlices() []*resourceapi.ResourceSlice { return n.resourceSlices }

// AttachLimits are the node's CSI attach limits, from its CSINode; nil when
// it has none. Do not modify the map.
func (n *NodeInfo) AttachLimits() AttachLimits { return n.attachLimits }

// Pods are the pods placed on the node. Do not modify the slice.
func (n *NodeInfo) Pods() []*PodInfo { return n.pods }

// Capacity is the node's capacity, converted once: cluster totals, resource
// limits and the similarity of node groups read it again and again. Do not
// modify its Scalar map.
func (n *NodeInfo) Capacity() Resources { return n.capacity }

// LimitCapacity is what the cluster-wide resource limits (cores, memory,
// GPUs of a type: scale-up's maximums, scale-down's minimums, the totals
// of the status and metrics) count of the node: its capacity, plus, under
// the name of each DRA driver that publishes devices in the node's local
// ResourceSlices (e.g. gpu.nvidia.com), how many devices it publishes. A
// GPU type of resourceLimits.gpus is read from it by name: an extended
// resource name (nvidia.com/gpu) counts the node's capacity, a driver name
// its devices; the first always has a slash, the second never. It is
// counted once, when the node gets its slices. Do not modify its Scalar
// map.
func (n *NodeInfo) LimitCapacity() Resources { return n.limitCapacity }

// Allocatable is what the node offers to pods, including the pod count.
func (n *NodeInfo) Allocatable() Resources { return n.allocatable }

// Requested is the sum of the requests of the pods on the node; Pods is
// their number.
func (n *NodeInfo) Requested() Resources { return n.requested }

// HostPorts are the host ports bound by the pods on the node.
func (n *NodeInfo) HostPorts() []HostPort { return n.hostPorts }

// PodsWithRequiredAntiAffinity are the pods on the node that have required
// pod anti-affinity terms.
func (n *NodeInfo) PodsWithRequiredAntiAffinity() []*PodInfo { return n.podsWithRequiredAntiAffinity }

// CopyAs returns a copy of the node under another name (and hostname label)
// with the same pods; it is how template nodes become new nodes.
func (n *NodeInfo) CopyAs(name string) *NodeInfo {
	node := *n.node
	node.Name = name
	node.Labels = make(map[string]string, len(n.node.Labels))
	for key, value := range n.node.Labels {
		node.Labels[key] = value
	}
	node.Labels[corev1.LabelHostname] = name
	copied := n.clone()
	copied.node = &node
	copied.resourceSlices = renameSlices(n.resourceSlices, n.node.Name, name)
	return copied
}

func (n *NodeInfo) clone() *NodeInfo {
	return &NodeInfo{
		node:                         n.node,
		capacity:                     n.capacity,
		allocatable:                  n.allocatable,
		pods:                         slices.Clone(n.pods),
		requested:                    n.requested.Clone(),
		hostPorts:                    slices.Clone(n.hostPorts),
		podsWithRequiredAntiAffinity: slices.Clone(n.podsWithRequiredAntiAffinity),
		attachLimits:                 n.attachLimits,
		resourceSlices:               n.resourceSlices,
		limitCapacity:                n.limitCapacity,
		order:                        n.order,
	}
}

// countDevices sets limitCapacity from the node's capacity and the
// devices of its local ResourceSlices. A pool whose slices are of several
// generations, while its driver replaces them, counts those of the newest
// only, as the allocator uses them.
func (n *NodeInfo) countDevices() {
	n.limitCapacity = n.capacity
	if len(n.resourceSlices) == 0 {
		return
	}
	// Sized for a driver a slice, so that adding them does not grow it.
	n.limitCapacity.Scalar = make(map[corev1.ResourceName]int64, len(n.capacity.Scalar)+len(n.resourceSlices))
	for name, value := range n.capacity.Scalar {
		n.limitCapacity.Scalar[name] = value
	}
	for _, slice := range n.resourceSlices {
		if len(slice.Spec.Devices) > 0 && !outdated(slice, n.resourceSlices) {
			n.limitCapacity.Scalar[corev1.ResourceName(slice.Spec.Driver)] += int64(len(slice.Spec.Devices))
		}
	}
}

// outdated tells whether a slice of the same pool of a newer generation
// replaces slice. The slices of one node are few.
func outdated(slice *resourceapi.ResourceSlice, slices []*resourceapi.ResourceSlice) bool {
	for _, other := range slices {
		if other.Spec.Driver == slice.Spec.Driver && other.Spec.Pool.Name == slice.Spec.Pool.Name &&
			other.Spec.Pool.Generation > slice.Spec.Pool.Generation {
			return true
		}
	}
	return false
}

func (n *NodeInfo) addPod(pod *PodInfo) {
	n.pods = append(n.pods, pod)
	n.requested.Add(pod.Requests)
	n.hostPorts = append(n.hostPorts, pod.HostPorts...)
	if len(pod.RequiredAntiAffinityTerms) > 0 {
		n.podsWithRequiredAntiAffinity = append(n.podsWithRequiredAntiAffinity, pod)
	}
}

// removePod removes the pod with the given namespace and name and tells
// whether it was there.
func (n *NodeInfo) removePod(namespace, name string) bool {
	i := slices.IndexFunc(n.pods, func(p *PodInfo) bool {
		return p.Pod.Name == name && p.Pod.Namespace == namespace
	})
	if i < 0 {
		return false
	}
	pod := n.pods[i]
	n.pods = slices.Delete(n.pods, i, i+1)
	n.requested.Sub(pod.Requests)
	for _, port := range pod.HostPorts {
		if j := slices.Index(n.hostPorts, port); j >= 0 {
			n.hostPorts = slices.Delete(n.hostPorts, j, j+1)
		}
	}
	if j := slices.Index(n.podsWithRequiredAntiAffinity, pod); j >= 0 {
		n.podsWithRequiredAntiAffinity = slices.Delete(n.podsWithRequiredAntiAffinity, j, j+1)
	}
	return true
}
