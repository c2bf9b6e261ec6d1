package scaleup

import (
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Reasons a node group cannot grow, as users read them in events.
const (
	ReasonMaxGroupSize       = "max node group size reached"
	ReasonMaxNodesTotal      = "max total nodes in cluster reached"
	ReasonMaxNodesPerScaleUp = "max nodes per scale-up reached"
	ReasonNoTemplate         = "no template node"
)

// clusterTotals are the sums over every node of what the limits count
// (snapshot.NodeInfo.LimitCapacity).
type clusterTotals struct {
	nodes    int
	capacity snapshot.Resources
}

func totalsOf(nodeInfos []*snapshot.NodeInfo) clusterTotals {
	var totals clusterTotals
	for _, nodeInfo := range nodeInfos {
		totals.nodes++
		totals.capacity.Add(nodeInfo.LimitCapacity())
	}
	return totals
}

// nodesAllowed is how many nodes like template the limits still allow,
// and the limit that binds.
func (l ResourceLimits) nodesAllowed(totals clusterTotals, template *snapshot.NodeInfo) (int, string) {
	allowed, reason := math.MaxInt, ""
	restrict := func(n int64, why string) {
		n = max(n, 0)
		if n < int64(allowed) {
			allowed, reason = int(n), why
		}
	}
	if l.MaxNodesTotal > 0 {
		restrict(int64(l.MaxNodesTotal-totals.nodes), ReasonMaxNodesTotal)
	}
	capacity := template.LimitCapacity()
	if l.Cores.Max > 0 && capacity.MilliCPU > 0 {
		restrict((l.Cores.Max*1000-totals.capacity.MilliCPU)/capacity.MilliCPU, ResourceLimitReason(corev1.ResourceCPU))
	}
	if l.MemoryBytes.Max > 0 && capacity.Memory > 0 {
		restrict((l.MemoryBytes.Max-totals.capacity.Memory)/capacity.Memory, ResourceLimitReason(corev1.ResourceMemory))
	}
	gpus := make([]corev1.ResourceName, 0, len(l.GPUs))
	for name := range l.GPUs {
		gpus = append(gpus, name)
	}
	slices.Sort(gpus)
	for _, name := range gpus {
		if limit, perNode := l.GPUs[name].Max, capacity.Scalar[name]; perNode > 0 {
			restrict((limit-totals.capacity.Scalar[name])/perNode, ResourceLimitReason(name))
		}
	}
	return allowed, reason
}

// NodesAllowed is how many nodes like template the limits allow to add
// to a cluster of nodeInfos, and the limit that binds ("" when none does).
func (l ResourceLimits) NodesAllowed(nodeInfos []*snapshot.NodeInfo, template *snapshot.NodeInfo) (int, string) {
	return l.nodesAllowed(totalsOf(nodeInfos), template)
}

// ResourceLimitReason is why a node group cannot grow past the cluster-wide
// limit of a resource, e.g. cpu, memory, nvidia.com/gpu or the DRA driver
// gpu.nvidia.com.
func ResourceLimitReason(name corev1.ResourceName) string {
	return "max cluster " + string(name) + " limit reached"
}
