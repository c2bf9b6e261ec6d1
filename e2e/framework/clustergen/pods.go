package clustergen

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

var (
	cpus     = []string{"50m", "100m", "250m", "500m", "1", "1500m", "2", "3", "6"}
	memories = []string{"64Mi", "256Mi", "512Mi", "1Gi", "2Gi", "4Gi", "8Gi", "24Gi"}
	storages = []string{"1Gi", "10Gi", "40Gi", "150Gi"}
	// hostPorts are few, so that pods contend for them.
	hostPorts = []int32{8080, 9100, 9443}
)

// boundPods fills each node partly with pods that fit it, like the
// workloads already running.
func (g *generator) boundPods() {
	for _, node := range g.c.Nodes {
		for i := range g.between(0, int(node.Status.Allocatable.Pods().Value()/2)) {
			pod := g.pod(fmt.Sprintf("%s-%02d", node.Name, i), pick(g, namespaces).name)
			pod.Spec.NodeName = node.Name
			pod.Spec.Containers = []corev1.Container{g.container("app", "2", "4Gi")}
			if !g.take(node.Name, pod) {
				continue
			}
			for _, taint := range node.Spec.Taints {
				pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpExists})
			}
			switch {
			case g.chance(0.15):
				pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.selfTerm(pod, corev1.LabelHostname)},
				}}
			case g.chance(0.03):
				pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.selfTerm(pod, corev1.LabelTopologyZone)},
				}}
			}
			if g.chance(0.08) {
				g.hostPort(pod)
			}
			if g.storage != nil && g.chance(0.3) {
				g.storage.attachTo(g, pod, node)
			}
			if g.dra != nil && g.chance(0.15) {
				g.dra.allocateTo(g, pod, node.Name)
			}
			pod.Status = corev1.PodStatus{Phase: corev1.PodRunning}
			g.c.BoundPods = append(g.c.BoundPods, pod)
		}
	}
}

// take reserves the pod's requests on the node; false when they do not fit.
func (g *generator) take(nodeName string, pod *corev1.Pod) bool {
	free := g.free[nodeName]
	req := pod.Spec.Containers[0].Resources.Requests
	need := capacity{milliCPU: req.Cpu().MilliValue(), memory: req.Memory().Value(), storage: req.StorageEphemeral().Value(), pods: 1}
	if need.milliCPU > free.milliCPU || need.memory > free.memory || need.storage > free.storage || need.pods > free.pods {
		return false
	}
	free.milliCPU -= need.milliCPU
	free.memory -= need.memory
	free.storage -= need.storage
	free.pods--
	return true
}

// pod returns a pod of a random app, without containers.
func (g *generator) pod(name, namespace string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: namespace,
			Labels: map[string]string{AppLabel: pick(g, apps), TierLabel: pick(g, tiers), HashLabel: pick(g, hashes)},
		},
	}
}

// container requests a random cpu and memory up to the given bounds' rank
// in cpus and memories, and sometimes ephemeral storage.
func (g *generator) container(name, maxCPU, maxMemory string) corev1.Container {
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(pick(g, upTo(cpus, maxCPU))),
		corev1.ResourceMemory: resource.MustParse(pick(g, upTo(memories, maxMemory))),
	}
	if g.chance(0.25) {
		requests[corev1.ResourceEphemeralStorage] = resource.MustParse(pick(g, storages[:2]))
	}
	return corev1.Container{Name: name, Image: "registry.example/" + name, Resources: corev1.ResourceRequirements{Requests: requests}}
}

// upTo returns the prefix of values that ends with last.
func upTo(values []string, last string) []string {
	for i, v := range values {
		if v == last {
			return values[:i+1]
		}
	}
	return values
}

// pendingPod returns a pod with a random mix of the constraints the
// simulator implements, or, with DRA, sometimes a pod with resource claims.
func (g *generator) pendingPod(name string) *corev1.Pod {
	if g.dra != nil && g.chance(0.15) {
		return g.devicePod(name)
	}
	pod := g.pod(name, pick(g, namespaces).name)
	g.requests(pod)
	if g.chance(0.2) {
		g.nodeSelector(pod)
	}
	if g.chance(0.25) {
		g.nodeAffinity(pod)
	}
	if g.chance(0.35) {
		g.tolerations(pod)
	}
	if g.chance(0.1) {
		g.hostPort(pod)
	}
	if g.chance(0.3) {
		g.topologySpread(pod)
	}
	if g.chance(0.12) {
		g.podAffinity(pod)
	}
	if g.chance(0.2) {
		g.podAntiAffinity(pod)
	}
	if g.storage != nil && g.chance(0.35) {
		g.storage.volumesOf(g, pod)
	}
	return pod
}

// requests gives the pod one or two containers, sometimes an init
// container or a sidecar, and sometimes ephemeral storage or GPUs.
func (g *generator) requests(pod *corev1.Pod) {
	if g.chance(0.05) {
		// No requests at all: only the pod count limits it.
		pod.Spec.Containers = []corev1.Container{{Name: "app", Image: "registry.example/app"}}
		return
	}
	pod.Spec.Containers = []corev1.Container{g.container("app", "6", "24Gi")}
	if g.chance(0.3) {
		pod.Spec.Containers = append(pod.Spec.Containers, g.container("helper", "500m", "512Mi"))
	}
	app := pod.Spec.Containers[0].Resources.Requests
	if g.chance(0.1) {
		app[corev1.ResourceEphemeralStorage] = resource.MustParse(pick(g, storages))
	}
	if g.chance(0.08) {
		// Extended resources cannot be overcommitted: limits equal requests.
		gpus := *resource.NewQuantity(int64(g.between(1, 3)), resource.DecimalSI)
		app[GPUResource] = gpus
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{GPUResource: gpus}
	}
	switch {
	case g.chance(0.1):
		pod.Spec.InitContainers = []corev1.Container{g.container("init", "3", "4Gi")}
	case g.chance(0.05):
		sidecar := g.container("sidecar", "500m", "512Mi")
		sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		pod.Spec.InitContainers = []corev1.Container{sidecar}
	}
}

func (g *generator) nodeSelector(pod *corev1.Pod) {
	kind := pick(g, kinds)
	switch g.rnd.IntN(4) {
	case 0:
		pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: pick(g, zones)}
	case 1:
		pod.Spec.NodeSelector = map[string]string{PoolLabel: kind.name}
	case 2:
		pod.Spec.NodeSelector = map[string]string{corev1.LabelInstanceTypeStable: kind.instanceType}
	default:
		pod.Spec.NodeSelector = map[string]string{DiskLabel: "ssd"}
	}
}

// nodeAffinity sets one or two required terms (ORed), each of one or two
// expressions, and rarely a term on the node name.
func (g *generator) nodeAffinity(pod *corev1.Pod) {
	var terms []corev1.NodeSelectorTerm
	for range g.between(1, 2) {
		var term corev1.NodeSelectorTerm
		if g.chance(0.05) {
			term.MatchFields = []corev1.NodeSelectorRequirement{{
				Key: metav1.ObjectNameField, Operator: corev1.NodeSelectorOpIn, Values: []string{g.c.Nodes[g.rnd.IntN(len(g.c.Nodes))].Name},
			}}
		} else {
			for range g.between(1, 2) {
				term.MatchExpressions = append(term.MatchExpressions, g.nodeRequirement())
			}
		}
		terms = append(terms, term)
	}
	pod.Spec.Affinity = ensureAffinity(pod)
	pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}
}

func (g *generator) nodeRequirement() corev1.NodeSelectorRequirement {
	switch g.rnd.IntN(6) {
	case 0:
		return corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: sample(g, zones, g.between(1, 2))}
	case 1:
		return corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpNotIn, Values: []string{pick(g, zones)}}
	case 2:
		var types []string
		for _, kind := range sample(g, kinds, g.between(1, 3)) {
			types = append(types, kind.instanceType)
		}
		return corev1.NodeSelectorRequirement{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpIn, Values: types}
	case 3:
		return corev1.NodeSelectorRequirement{Key: DiskLabel, Operator: corev1.NodeSelectorOpExists}
	case 4:
		return corev1.NodeSelectorRequirement{Key: DiskLabel, Operator: corev1.NodeSelectorOpDoesNotExist}
	default:
		return corev1.NodeSelectorRequirement{Key: PoolLabel, Operator: corev1.NodeSelectorOpNotIn, Values: []string{pick(g, kinds).name}}
	}
}

// tolerations tolerate the taint of one or two kinds, the unschedulable
// taint, or, rarely, everything.
func (g *generator) tolerations(pod *corev1.Pod) {
	if g.chance(0.05) {
		pod.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		return
	}
	for _, kind := range sample(g, kinds, g.between(1, 2)) {
		for _, taint := range kind.taints {
			toleration := corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpEqual, Value: taint.Value, Effect: taint.Effect}
			if g.chance(0.3) {
				// Right key, wrong value: does not tolerate it.
				toleration.Value = "other"
			}
			if taint.Value == "" {
				toleration = corev1.Toleration{Key: taint.Key, Operator: corev1.TolerationOpExists}
			}
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, toleration)
		}
	}
	if g.chance(0.2) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule,
		})
	}
}

func (g *generator) hostPort(pod *corev1.Pod) {
	port := pick(g, hostPorts)
	protocol := corev1.ProtocolTCP
	if g.chance(0.2) {
		protocol = corev1.ProtocolUDP
	}
	pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports, corev1.ContainerPort{
		Name: "metrics", ContainerPort: port, HostPort: port, Protocol: protocol,
	})
}

// topologySpread adds one or two hard constraints over zones or hosts.
func (g *generator) topologySpread(pod *corev1.Pod) {
	keys := sample(g, []string{corev1.LabelTopologyZone, corev1.LabelHostname}, g.between(1, 2))
	for _, key := range keys {
		app := pod.Labels[AppLabel]
		if g.chance(0.2) {
			app = pick(g, apps)
		}
		constraint := corev1.TopologySpreadConstraint{
			MaxSkew:           int32(g.between(1, 3)),
			TopologyKey:       key,
			WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: app}},
		}
		if g.chance(0.25) {
			constraint.MinDomains = ptr.To(int32(g.between(2, 5)))
		}
		if g.chance(0.3) {
			constraint.NodeAffinityPolicy = ptr.To(pick(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
		}
		if g.chance(0.3) {
			constraint.NodeTaintsPolicy = ptr.To(pick(g, []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}))
		}
		if g.chance(0.3) {
			constraint.MatchLabelKeys = []string{HashLabel}
		}
		pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, constraint)
	}
}

func (g *generator) podAffinity(pod *corev1.Pod) {
	pod.Spec.Affinity = ensureAffinity(pod)
	pod.Spec.Affinity.PodAffinity = &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.term(pod)},
	}
}

func (g *generator) podAntiAffinity(pod *corev1.Pod) {
	pod.Spec.Affinity = ensureAffinity(pod)
	terms := []corev1.PodAffinityTerm{g.term(pod)}
	if g.chance(0.3) {
		terms = append(terms, g.term(pod))
	}
	pod.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: terms}
}

// term selects pods of the pod's own app or another, in its namespace,
// listed namespaces, namespaces of a team, or every namespace.
func (g *generator) term(pod *corev1.Pod) corev1.PodAffinityTerm {
	term := g.selfTerm(pod, pick(g, []string{corev1.LabelHostname, corev1.LabelTopologyZone}))
	if g.chance(0.4) {
		term.LabelSelector.MatchLabels[AppLabel] = pick(g, apps)
	}
	if g.chance(0.2) {
		term.LabelSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{
			Key: TierLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{pick(g, tiers)},
		}}
	}
	switch g.rnd.IntN(5) {
	case 0:
		term.Namespaces = []string{pick(g, namespaces).name, pick(g, namespaces).name}
	case 1:
		term.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{TeamLabel: pick(g, teams)}}
	case 2:
		term.NamespaceSelector = &metav1.LabelSelector{}
	}
	return term
}

// selfTerm selects the pods of the pod's app in its namespace.
func (g *generator) selfTerm(pod *corev1.Pod, topologyKey string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{AppLabel: pod.Labels[AppLabel]}},
		TopologyKey:   topologyKey,
	}
}

func ensureAffinity(pod *corev1.Pod) *corev1.Affinity {
	if pod.Spec.Affinity == nil {
		return &corev1.Affinity{}
	}
	return pod.Spec.Affinity
}
