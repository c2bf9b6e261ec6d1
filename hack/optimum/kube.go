package optimum

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// AppLabel names a pod's app; its value is App.Name.
const AppLabel = "app"

// GroupID is the node group ID of group g of a mix, as the engine names
// a MachineDeployment.
func (m *Mix) GroupID(g int) string { return "MachineDeployment/default/" + m.Groups[g].Name }

// Node is a node of group g named name, with the group's allocatable
// (its capacity less the kube-reserved), zone and instance type.
func (m *Mix) Node(g int, name string) *corev1.Node {
	group := m.Groups[g]
	cpu := strconv.FormatInt((group.MilliCPU+KubeReservedMilliCPU)/1000, 10)
	memory := fmt.Sprintf("%dMi", group.MemoryMiB+KubeReservedMemoryMiB)
	return st.Node(name, cpu, memory,
		st.WithAllocatable(corev1.ResourceCPU, fmt.Sprintf("%dm", group.MilliCPU)),
		st.WithAllocatable(corev1.ResourceMemory, fmt.Sprintf("%dMi", group.MemoryMiB)),
		st.WithNodeLabels(corev1.LabelTopologyZone, group.Zone, corev1.LabelInstanceTypeStable, group.Name))
}

// ControlPlane are the cluster's control-plane nodes, one a zone, which
// take no pods (their taint) but make every zone a topology domain:
// topology spread counts tainted nodes' domains unless told not to.
func (m *Mix) ControlPlane() []*corev1.Node {
	var nodes []*corev1.Node
	for _, zone := range m.Zones {
		nodes = append(nodes, st.Node("control-plane-"+zone, "4", "16Gi",
			st.WithNodeLabels(corev1.LabelTopologyZone, zone),
			st.WithTaint("node-role.kubernetes.io/control-plane", "", corev1.TaintEffectNoSchedule)))
	}
	return nodes
}

// KubePods are the mix's pods, pending as kube-scheduler leaves them,
// each owned by its app's ReplicaSet and labelled with its app.
func (m *Mix) KubePods() []*corev1.Pod {
	var pods []*corev1.Pod
	for _, app := range m.Apps {
		selector := &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: app.Name}}
		for _, pod := range st.Replicas(app.Name, app.Replicas, fmt.Sprintf("%dm", app.MilliCPU), fmt.Sprintf("%dMi", app.MemoryMiB),
			st.WithPodLabels(AppLabel, app.Name)) {
			if app.Spread {
				pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
					MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selector,
				}}
			}
			if app.AntiAffinity {
				pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
						LabelSelector: selector, TopologyKey: corev1.LabelHostname,
					}},
				}}
			}
			pods = append(pods, pod)
		}
	}
	return pods
}

// AppOf is the index in Mix.Apps of a pod's app, or -1.
func (m *Mix) AppOf(pod *corev1.Pod) int {
	for a, app := range m.Apps {
		if app.Name == pod.Labels[AppLabel] {
			return a
		}
	}
	return -1
}

// GroupIndex is the index in Mix.Groups of the group named name, or -1.
func (m *Mix) GroupIndex(name string) int {
	for g, group := range m.Groups {
		if group.Name == name {
			return g
		}
	}
	return -1
}
