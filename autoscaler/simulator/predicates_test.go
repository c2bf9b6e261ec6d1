package simulator_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

const zoneKey = corev1.LabelTopologyZone

func withAffinity(affinity *corev1.Affinity) st.PodOption {
	return func(pod *corev1.Pod) { pod.Spec.Affinity = affinity }
}

func requiredNodeAffinity(key string, values ...string) st.PodOption {
	return withAffinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}},
		}}},
	}})
}

func podAffinityTerm(topologyKey string, kv ...string) corev1.PodAffinityTerm {
	selector := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		selector[kv[i]] = kv[i+1]
	}
	return corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: selector}, TopologyKey: topologyKey}
}

func requiredPodAffinity(term corev1.PodAffinityTerm) st.PodOption {
	return withAffinity(&corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}})
}

func requiredPodAntiAffinity(term corev1.PodAffinityTerm) st.PodOption {
	return withAffinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}})
}

// zoneSpreadConstraint spreads the pods labelled kv over zones, with a
// skew of at most one.
func zoneSpreadConstraint(kv ...string) st.PodOption {
	return func(pod *corev1.Pod) {
		selector := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			selector[kv[i]] = kv[i+1]
		}
		pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: zoneKey, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: selector},
		})
	}
}

func TestPredicates(t *testing.T) {
	zoneA, zoneB := st.WithNodeLabels(zoneKey, "a"), st.WithNodeLabels(zoneKey, "b")
	tests := []struct {
		name  string
		nodes []*corev1.Node
		// pods are already bound to nodes.
		pods        []*corev1.Pod
		pod         *corev1.Pod
		node        string
		wantReasons []string
	}{
		{
			name:  "fits an empty node",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi")},
			pod:   st.Pod("p", "2", "4Gi"), node: "n",
		},
		{
			name:  "insufficient cpu and memory are both reported",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi")},
			pods:  []*corev1.Pod{st.Pod("big", "1500m", "3Gi", st.OnNode("n"))},
			pod:   st.Pod("p", "1", "2Gi"), node: "n",
			wantReasons: []string{"Insufficient cpu", "Insufficient memory"},
		},
		{
			name:  "extended resources",
			nodes: []*corev1.Node{st.Node("n", "8", "16Gi", st.WithAllocatable("nvidia.com/gpu", "1"))},
			pod:   st.Pod("p", "1", "1Gi", st.WithRequest("nvidia.com/gpu", "2")), node: "n",
			wantReasons: []string{"Insufficient nvidia.com/gpu"},
		},
		{
			name:  "extended resources that fit",
			nodes: []*corev1.Node{st.Node("n", "8", "16Gi", st.WithAllocatable("nvidia.com/gpu", "2"))},
			pod:   st.Pod("p", "1", "1Gi", st.WithRequest("nvidia.com/gpu", "2")), node: "n",
		},
		{
			name:  "pod count counts even for pods without requests",
			nodes: []*corev1.Node{st.Node("n", "8", "16Gi", st.WithAllocatable(corev1.ResourcePods, "1"))},
			pods:  []*corev1.Pod{st.Pod("other", "", "", st.OnNode("n"))},
			pod:   st.Pod("p", "", ""), node: "n",
			wantReasons: []string{"Too many pods"},
		},
		{
			name:  "pod overhead counts",
			nodes: []*corev1.Node{st.Node("n", "1", "4Gi")},
			pod: st.Pod("p", "1", "", func(pod *corev1.Pod) {
				pod.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: *resourceQuantity("100m")}
			}), node: "n",
			wantReasons: []string{"Insufficient cpu"},
		},
		{
			name:  "requested node name",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi")},
			pod:   st.Pod("p", "1", "1Gi", func(pod *corev1.Pod) { pod.Spec.NodeName = "other" }), node: "n",
			wantReasons: []string{simulator.ReasonNodeName},
		},
		{
			name:  "node selector that matches",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithNodeLabels("disk", "ssd"))},
			pod:   st.Pod("p", "1", "1Gi", st.WithNodeSelector("disk", "ssd")), node: "n",
		},
		{
			name:  "node selector that does not match",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithNodeLabels("disk", "hdd"))},
			pod:   st.Pod("p", "1", "1Gi", st.WithNodeSelector("disk", "ssd")), node: "n",
			wantReasons: []string{"node(s) didn't match Pod's node affinity/selector"},
		},
		{
			name:  "required node affinity that matches",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", zoneA)},
			pod:   st.Pod("p", "1", "1Gi", requiredNodeAffinity(zoneKey, "a", "c")), node: "n",
		},
		{
			name:  "required node affinity that does not match",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", zoneB)},
			pod:   st.Pod("p", "1", "1Gi", requiredNodeAffinity(zoneKey, "a")), node: "n",
			wantReasons: []string{"node(s) didn't match Pod's node affinity/selector"},
		},
		{
			name:  "untolerated NoSchedule taint",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule))},
			pod:   st.Pod("p", "1", "1Gi"), node: "n",
			wantReasons: []string{"node(s) had untolerated taint {dedicated: gpu}"},
		},
		{
			name:  "untolerated NoExecute taint",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoExecute))},
			pod:   st.Pod("p", "1", "1Gi", st.WithToleration("dedicated", "gpu", corev1.TaintEffectNoSchedule)), node: "n",
			wantReasons: []string{"node(s) had untolerated taint {dedicated: gpu}"},
		},
		{
			name:  "tolerated taint",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule))},
			pod:   st.Pod("p", "1", "1Gi", st.WithToleration("dedicated", "gpu", corev1.TaintEffectNoSchedule)), node: "n",
		},
		{
			name:  "PreferNoSchedule taints do not block",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.WithTaint("dedicated", "gpu", corev1.TaintEffectPreferNoSchedule))},
			pod:   st.Pod("p", "1", "1Gi"), node: "n",
		},
		{
			name:  "unschedulable node",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.Unschedulable())},
			pod:   st.Pod("p", "1", "1Gi"), node: "n",
			wantReasons: []string{"node(s) were unschedulable"},
		},
		{
			name:  "unschedulable node with the toleration",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", st.Unschedulable())},
			pod:   st.Pod("p", "1", "1Gi", st.WithToleration(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule)), node: "n",
		},
		{
			name:  "host port in use",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi")},
			pods:  []*corev1.Pod{st.Pod("other", "", "", st.OnNode("n"), st.WithHostPort(8080))},
			pod:   st.Pod("p", "1", "1Gi", st.WithHostPort(8080)), node: "n",
			wantReasons: []string{"node(s) didn't have free ports for the requested pod ports"},
		},
		{
			name:  "another host port is free",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi")},
			pods:  []*corev1.Pod{st.Pod("other", "", "", st.OnNode("n"), st.WithHostPort(8080))},
			pod:   st.Pod("p", "1", "1Gi", st.WithHostPort(9090)), node: "n",
		},
		{
			name:  "pod affinity satisfied in the zone",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneA)},
			pods:  []*corev1.Pod{st.Pod("db", "", "", st.OnNode("n1"), st.WithPodLabels("app", "db"))},
			pod:   st.Pod("p", "1", "1Gi", requiredPodAffinity(podAffinityTerm(zoneKey, "app", "db"))), node: "n2",
		},
		{
			name:  "pod affinity not satisfied in another zone",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods:  []*corev1.Pod{st.Pod("db", "", "", st.OnNode("n1"), st.WithPodLabels("app", "db"))},
			pod:   st.Pod("p", "1", "1Gi", requiredPodAffinity(podAffinityTerm(zoneKey, "app", "db"))), node: "n2",
			wantReasons: []string{"node(s) didn't match pod affinity rules"},
		},
		{
			name:  "pod affinity with no matching pod anywhere",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", zoneA)},
			pod:   st.Pod("p", "1", "1Gi", requiredPodAffinity(podAffinityTerm(zoneKey, "app", "db"))), node: "n",
			wantReasons: []string{"node(s) didn't match pod affinity rules"},
		},
		{
			name:  "the first pod of a set with affinity to itself",
			nodes: []*corev1.Node{st.Node("n", "2", "4Gi", zoneA)},
			pod:   st.Pod("p", "1", "1Gi", st.WithPodLabels("app", "web"), requiredPodAffinity(podAffinityTerm(zoneKey, "app", "web"))), node: "n",
		},
		{
			name:  "pod anti-affinity against a pod in the zone",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneA)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod:   st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), requiredPodAntiAffinity(podAffinityTerm(zoneKey, "app", "web"))), node: "n2",
			wantReasons: []string{"node(s) didn't match pod anti-affinity rules"},
		},
		{
			name:  "pod anti-affinity on hostname allows another node",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneA)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod:   st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "web"))), node: "n2",
		},
		{
			name:  "an existing pod's anti-affinity keeps the pod out of its zone",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneA)},
			pods: []*corev1.Pod{st.Pod("loner", "", "", st.OnNode("n1"),
				requiredPodAntiAffinity(podAffinityTerm(zoneKey, "app", "web")))},
			pod: st.Pod("web", "1", "1Gi", st.WithPodLabels("app", "web")), node: "n2",
			wantReasons: []string{"node(s) didn't satisfy existing pods anti-affinity rules"},
		},
		{
			name:  "an existing pod's anti-affinity does not reach another zone",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods: []*corev1.Pod{st.Pod("loner", "", "", st.OnNode("n1"),
				requiredPodAntiAffinity(podAffinityTerm(zoneKey, "app", "web")))},
			pod: st.Pod("web", "1", "1Gi", st.WithPodLabels("app", "web")), node: "n2",
		},
		{
			name:  "topology spread would exceed the skew",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod:   st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")), node: "n1",
			wantReasons: []string{"node(s) didn't match pod topology spread constraints"},
		},
		{
			name:  "topology spread within the skew",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod:   st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")), node: "n2",
		},
		{
			name:  "topology spread counts only the pods its selector matches",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods: []*corev1.Pod{
				st.Pod("other", "", "", st.OnNode("n1"), st.WithPodLabels("app", "other")),
				st.Pod("web-0", "", "", st.OnNode("n2"), st.WithPodLabels("app", "web")),
			},
			pod:         st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")),
			node:        "n2",
			wantReasons: []string{"node(s) didn't match pod topology spread constraints"},
		},
		{
			name:  "topology spread on a node without the topology label",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi")},
			pod:   st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")), node: "n2",
			wantReasons: []string{"node(s) didn't match pod topology spread constraints (missing required label)"},
		},
		{
			name:  "topology spread ignores domains the pod cannot use",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA), st.Node("n2", "2", "4Gi", zoneB)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod: st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web"),
				st.WithNodeSelector(zoneKey, "a")), node: "n1",
		},
		{
			name:  "topology spread with minDomains counts missing domains as empty",
			nodes: []*corev1.Node{st.Node("n1", "2", "4Gi", zoneA)},
			pods:  []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n1"), st.WithPodLabels("app", "web"))},
			pod: st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web"),
				func(pod *corev1.Pod) { pod.Spec.TopologySpreadConstraints[0].MinDomains = ptr.To[int32](2) }), node: "n1",
			wantReasons: []string{"node(s) didn't match pod topology spread constraints"},
		},
		{
			// Found by the scheduler agreement harness: kube-scheduler applies
			// each constraint's inclusion policies to that constraint only.
			name: "a tainted node counts for the constraints that do not honor taints",
			nodes: []*corev1.Node{
				st.Node("n1", "2", "4Gi", zoneA, st.WithTaint("dedicated", "db", corev1.TaintEffectNoSchedule)),
				st.Node("n2", "2", "4Gi", zoneB),
			},
			pods: []*corev1.Pod{st.Pod("web-0", "", "", st.OnNode("n2"), st.WithPodLabels("app", "web"))},
			pod: st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web"),
				func(pod *corev1.Pod) {
					hostSpread := pod.Spec.TopologySpreadConstraints[0]
					hostSpread.TopologyKey, hostSpread.MaxSkew = corev1.LabelHostname, 5
					hostSpread.NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
					pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, hostSpread)
				}), node: "n2",
			wantReasons: []string{"node(s) didn't match pod topology spread constraints"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			snap := snapshot.New(snapshot.Input{Nodes: tt.nodes, Pods: tt.pods})
			sched := simulator.NewScheduler(ctx, snap)
			g.Expect(sched.Check(tt.pod, tt.node)).To(Equal(tt.wantReasons))
		})
	}
}
