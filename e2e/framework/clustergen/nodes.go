package clustergen

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const (
	// PoolLabel names a node's kind, as a node group label would.
	PoolLabel = "pool"
	// DiskLabel is set on some nodes only, for Exists and DoesNotExist.
	DiskLabel = "disk"
	// GPUResource is the extended resource of the gpu kind.
	GPUResource corev1.ResourceName = "example.com/gpu"
	// CSIDriver is the driver of the attachable volumes; nodes of the kinds
	// with an attach limit report it in their CSINode.
	CSIDriver = "csi.example.com"
)

// nodeKind is a node group: nodes of one shape.
type nodeKind struct {
	name, instanceType string
	cpu, memory        string
	storage            string
	pods               int64
	extended           corev1.ResourceList
	taints             []corev1.Taint
	// zones the nodes are spread over; none leaves the zone label out.
	zones []string
	// attachLimit, when set, is the CSI attach limit of the nodes.
	attachLimit int32
}

// kinds are the node kinds of every cluster, like the node groups of a
// cluster with general, compute, memory and GPU machines, small machines
// that run out of pod slots, and edge nodes without a zone.
var kinds = []nodeKind{
	{name: "general", instanceType: "m5.xlarge", cpu: "4", memory: "16Gi", storage: "100Gi", pods: 58, zones: zones, attachLimit: 3},
	{name: "compute", instanceType: "c5.2xlarge", cpu: "8", memory: "16Gi", storage: "100Gi", pods: 58, zones: zones[:2]},
	{
		name: "memory", instanceType: "r5.2xlarge", cpu: "8", memory: "64Gi", storage: "200Gi", pods: 58, zones: zones, attachLimit: 5,
		taints: []corev1.Taint{{Key: "workload", Value: "memory", Effect: corev1.TaintEffectNoSchedule}},
	},
	{
		name: "gpu", instanceType: "g4dn.2xlarge", cpu: "8", memory: "32Gi", storage: "200Gi", pods: 29, zones: zones[:1],
		extended: corev1.ResourceList{GPUResource: resource.MustParse("2")},
		taints:   []corev1.Taint{{Key: string(GPUResource), Value: "present", Effect: corev1.TaintEffectNoSchedule}},
	},
	{name: "tiny", instanceType: "t3.small", cpu: "2", memory: "2Gi", storage: "20Gi", pods: 11, zones: zones[1:]},
	{
		name: "edge", instanceType: "m5.large", cpu: "2", memory: "8Gi", storage: "50Gi", pods: 29,
		taints: []corev1.Taint{{Key: "edge", Effect: corev1.TaintEffectNoExecute}},
	},
	{
		name: "spot", instanceType: "m5.xlarge", cpu: "4", memory: "16Gi", storage: "100Gi", pods: 58, zones: zones,
		taints: []corev1.Taint{{Key: "spot", Value: "true", Effect: corev1.TaintEffectPreferNoSchedule}},
	},
}

// capacity is what is left of a node for bound pods.
type capacity struct {
	milliCPU, memory, storage, pods int64
}

func (g *generator) nodes() {
	g.free, g.kindOf = map[string]*capacity{}, map[string]*nodeKind{}
	for k := range kinds {
		kind := &kinds[k]
		for i := range g.between((g.opts.NodesPerKind+1)/2, g.opts.NodesPerKind) {
			node := g.node(kind, fmt.Sprintf("%s-%d", kind.name, i))
			g.c.Nodes = append(g.c.Nodes, node)
			g.kindOf[node.Name] = kind
			alloc := node.Status.Allocatable
			g.free[node.Name] = &capacity{
				milliCPU: alloc.Cpu().MilliValue(), memory: alloc.Memory().Value(),
				storage: alloc.StorageEphemeral().Value(), pods: alloc.Pods().Value(),
			}
			if kind.attachLimit > 0 && g.opts.Volumes {
				g.c.CSINodes = append(g.c.CSINodes, csiNode(node.Name, kind.attachLimit))
			}
		}
	}
}

func (g *generator) node(kind *nodeKind, name string) *corev1.Node {
	labels := map[string]string{
		corev1.LabelHostname:           name,
		corev1.LabelInstanceTypeStable: kind.instanceType,
		corev1.LabelOSStable:           "linux",
		corev1.LabelArchStable:         "amd64",
		PoolLabel:                      kind.name,
	}
	if len(kind.zones) > 0 {
		labels[corev1.LabelTopologyZone] = pick(g, kind.zones)
	}
	if g.chance(0.5) {
		labels[DiskLabel] = "ssd"
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse(kind.cpu),
		corev1.ResourceMemory:           resource.MustParse(kind.memory),
		corev1.ResourceEphemeralStorage: resource.MustParse(kind.storage),
		corev1.ResourcePods:             *resource.NewQuantity(kind.pods, resource.DecimalSI),
	}
	for name, quantity := range kind.extended {
		capacity[name] = quantity
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: append([]corev1.Taint(nil), kind.taints...)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			NodeInfo:    corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux"},
		},
	}
	if g.chance(0.1) {
		node.Spec.Unschedulable = true
		// Half of them carry the taint the node lifecycle controller adds,
		// the others show spec.unschedulable alone, as before it does.
		if g.chance(0.5) {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
		}
	}
	return node
}

func csiNode(name string, limit int32) *storagev1.CSINode {
	return &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{
			Name: CSIDriver, NodeID: name, TopologyKeys: []string{corev1.LabelTopologyZone},
			Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To(limit)},
		}}},
	}
}
