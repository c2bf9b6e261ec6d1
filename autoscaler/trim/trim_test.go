package trim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

// deploymentPod is a pod as the API server returns it for a Deployment,
// with what the engine reads and much that it does not.
func deploymentPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "shop", UID: types.UID("uid-" + name), GenerateName: "web-7d9f-",
			ResourceVersion:   "42",
			CreationTimestamp: metav1.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC),
			Labels:            map[string]string{"app": "web", "pod-template-hash": "7d9f"},
			Annotations: map[string]string{
				scaledown.SafeToEvictLocalVolumesAnnotation: "scratch",
				"kubectl.kubernetes.io/restartedAt":         "2026-11-20T10:00:00Z",
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9f", UID: "rs-uid", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
			Finalizers:      []string{"example.com/keep"},
		},
		Spec: corev1.PodSpec{
			NodeName:     "node-1",
			NodeSelector: map[string]string{"pool": "general"},
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
					TopologyKey:   corev1.LabelHostname,
				}},
			}},
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
			Priority:    ptr.To[int32](100),
			InitContainers: []corev1.Container{{
				Name: "proxy", Image: "proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}},
			Containers: []corev1.Container{{
				Name: "app", Image: "web:1", Command: []string{"/web"}, Args: []string{"--port=8080"},
				Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 9090, HostPort: 9090, Protocol: corev1.ProtocolTCP}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}},
				VolumeMounts:   []corev1.VolumeMount{{Name: "scratch", MountPath: "/tmp"}, {Name: "cache", MountPath: "/cache"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				{Name: "cache", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/cache"}}},
				{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-web-0"}}},
				{Name: "work", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{}}}},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			ResourceClaims: []corev1.PodResourceClaim{
				{Name: "gpu", ResourceClaimTemplateName: ptr.To("one-gpu")},
				{Name: "shared", ResourceClaimName: ptr.To("shared-nic")},
			},
		},
		Status: corev1.PodStatus{
			ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(name + "-gpu-x7k2")}},
			Phase:                 corev1.PodRunning,
			PodIP:                 "10.0.0.7",
			HostIP:                "192.168.0.1",
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "web:1", Ready: true, RestartCount: 3}},
		},
	}
}

func TestPodKeepsWhatTheEngineDecidesOn(t *testing.T) {
	g := NewWithT(t)
	pod := deploymentPod("web-7d9f-a")
	original := pod.DeepCopy()
	compact := trim.NewTransformer().Pod(pod)
	g.Expect(pod).To(Equal(original), "the decoded pod is not modified")
	full := compact.Full()

	g.Expect(snapshot.PodRequests(full)).To(Equal(snapshot.PodRequests(pod)), "requests, with the sidecar's")
	g.Expect(snapshot.NewPodInfo(full).HostPorts).To(Equal(snapshot.NewPodInfo(pod).HostPorts))
	g.Expect(snapshot.NewPodInfo(full).RequiredAntiAffinityTerms).To(HaveLen(1))
	g.Expect(full.Spec.NodeName).To(Equal(pod.Spec.NodeName))
	g.Expect(compact.NodeName).To(Equal(pod.Spec.NodeName))
	g.Expect(compact.Spec.NodeName).To(BeEmpty(), "the spec is shared by replicas on other nodes")
	g.Expect(full.Spec.NodeSelector).To(Equal(pod.Spec.NodeSelector))
	g.Expect(full.Spec.Tolerations).To(Equal(pod.Spec.Tolerations))
	g.Expect(full.Spec.Priority).To(Equal(pod.Spec.Priority))
	g.Expect(full.Spec.TerminationGracePeriodSeconds).To(Equal(pod.Spec.TerminationGracePeriodSeconds))
	g.Expect(full.OwnerReferences).To(Equal(pod.OwnerReferences), "a pod without its controller could not be moved")
	g.Expect(compact.Controller()).To(Equal(&pod.OwnerReferences[0]))
	g.Expect(full.Labels).To(Equal(pod.Labels), "selectors of PDBs, affinity and spreading match labels")
	g.Expect(full.Annotations).To(Equal(map[string]string{scaledown.SafeToEvictLocalVolumesAnnotation: "scratch"}))
	g.Expect(full.Spec.Volumes).To(HaveLen(4), "the emptyDir and hostPath volumes, which block a move, and the claims, which decide where the pod fits")
	g.Expect(full.Spec.Volumes[1].HostPath).To(Equal(pod.Spec.Volumes[1].HostPath))
	g.Expect(full.Spec.Volumes[2].PersistentVolumeClaim).To(Equal(pod.Spec.Volumes[3].PersistentVolumeClaim))
	g.Expect(full.Spec.Volumes[3].Name).To(Equal("work"), "a generic ephemeral volume's name names its claim")
	g.Expect(full.Spec.Volumes[3].Ephemeral).NotTo(BeNil())
	g.Expect(full.Spec.ResourceClaims).To(Equal(pod.Spec.ResourceClaims), "DRA claims decide where the pod fits")
	g.Expect(full.Status.ResourceClaimStatuses).To(Equal(pod.Status.ResourceClaimStatuses), "they name the claims made from templates")
	g.Expect(full.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(full.CreationTimestamp).To(Equal(pod.CreationTimestamp))

	// What an event needs to name the pod.
	g.Expect(full.Namespace).To(Equal(pod.Namespace))
	g.Expect(full.Name).To(Equal(pod.Name))
	g.Expect(full.UID).To(Equal(pod.UID))
	g.Expect(full.ResourceVersion).To(Equal(pod.ResourceVersion))

	g.Expect(full.ManagedFields).To(BeNil())
	g.Expect(full.Status.ContainerStatuses).To(BeNil())
	g.Expect(full.Spec.Containers[0].Image).To(BeEmpty())
	g.Expect(full.Spec.Containers[0].Env).To(BeNil())
	g.Expect(full.Spec.Containers[0].Ports).To(HaveLen(1), "only the host port matters to scheduling")
}

// The annotations by which a pod keeps its node from scale-down or
// consolidation reach the engine: the watches of a real cluster pass their
// pods through the Transformer, which drops the annotations it does not
// know of (do-not-disrupt was dropped so, and consolidation removed the
// nodes of such pods on the local stack).
func TestPodKeepsTheAnnotationsThatKeepItsNode(t *testing.T) {
	for _, annotation := range []string{scaledown.SafeToEvictAnnotation, scaledown.DoNotDisruptAnnotation} {
		t.Run(annotation, func(t *testing.T) {
			g := NewWithT(t)
			pod := deploymentPod("web-7d9f-a")
			pod.Annotations[annotation] = "true"
			full := trim.NewTransformer().Pod(pod).Full()
			g.Expect(full.Annotations).To(HaveKeyWithValue(annotation, "true"))
		})
	}
}

func TestPodStillShowsTheSchedulerFoundNoNode(t *testing.T) {
	g := NewWithT(t)
	pod := deploymentPod("web-7d9f-pending")
	pod.Spec.NodeName = ""
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient cpu.", LastTransitionTime: metav1.Now(),
	}}}
	compact := trim.NewTransformer().Pod(pod)
	g.Expect(scaleup.IsUnschedulable(compact.Conditions)).To(BeTrue())
	g.Expect(scaleup.IsUnschedulable(compact.Full().Status.Conditions)).To(BeTrue())
}

// TestCachedPodsAreSimulatedAsWholePods places pods with every constraint
// the simulator honours on nodes that hold pods, once as the API server
// returns them and once as the cache keeps them: each pod must fit the
// same nodes, for the same reasons.
func TestCachedPodsAreSimulatedAsWholePods(t *testing.T) {
	zone := func(name string) st.NodeOption { return st.WithNodeLabels(corev1.LabelTopologyZone, name) }
	nodes := []*corev1.Node{
		st.Node("plain", "4", "8Gi", zone("a")),
		st.Node("tainted", "4", "8Gi", zone("a"), st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
		st.Node("general", "4", "8Gi", zone("b"), st.WithNodeLabels("pool", "general")),
		st.Node("busy", "4", "8Gi", zone("b"), st.WithNodeLabels("pool", "general")),
	}
	db := deploymentPod("db-0")
	db.Labels = map[string]string{"app": "db"}
	db.Spec.NodeName = "busy"
	db.Spec.NodeSelector = nil
	db.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector.MatchLabels = map[string]string{"app": "web"}
	bound := []*corev1.Pod{db, deploymentPod("web-7d9f-a")}
	bound[1].Spec.NodeName = "general"

	pending := func(change func(*corev1.Pod)) *corev1.Pod {
		pod := st.Pod("pending", "500m", "512Mi", st.OwnedBy("rs"))
		change(pod)
		return pod
	}
	tests := map[string]*corev1.Pod{
		"a replica with a sidecar, a host port, anti-affinity and a node selector": func() *corev1.Pod {
			pod := deploymentPod("web-7d9f-b")
			pod.Spec.NodeName = ""
			return pod
		}(),
		"init containers and overhead that fit only an empty node": pending(func(pod *corev1.Pod) {
			pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
			pod.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m")}
		}),
		"a toleration of the taint": pending(func(pod *corev1.Pod) {
			pod.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
		}),
		"required node affinity": pending(func(pod *corev1.Pod) {
			pod.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"b"},
				}}}},
			}}}
		}),
		"pod affinity": pending(func(pod *corev1.Pod) {
			pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}, TopologyKey: corev1.LabelHostname,
			}}}}
		}),
		"labels that an existing pod's anti-affinity keeps away": pending(func(pod *corev1.Pod) {
			pod.Labels = map[string]string{"app": "web"}
		}),
		"a hard topology spread constraint": pending(func(pod *corev1.Pod) {
			pod.Labels = map[string]string{"app": "web"}
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			}}
		}),
		"a host port in use": pending(func(pod *corev1.Pod) {
			pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 9090}}
		}),
		"a node selector": pending(func(pod *corev1.Pod) { pod.Spec.NodeSelector = map[string]string{"pool": "general"} }),
	}
	for name, pod := range tests {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			transformer := trim.NewTransformer()
			var cachedBound []*snapshot.Pod
			for _, pod := range bound {
				cachedBound = append(cachedBound, transformer.Pod(pod))
			}
			cachedPod := transformer.Pod(pod)
			whole := simulator.NewScheduler(context.Background(), snapshot.New(snapshot.Input{Nodes: nodes, Pods: append(bound, pod)}))
			cached := simulator.NewScheduler(context.Background(), snapshot.New(snapshot.Input{Nodes: nodes, CachedPods: append(cachedBound, cachedPod)}))
			g.Expect(cached.Snapshot().PendingPods()).To(HaveLen(1))
			fromCache := cached.Snapshot().PendingPods()[0]

			g.Expect(snapshot.PodRequests(fromCache)).To(Equal(snapshot.PodRequests(pod)))
			for _, node := range nodes {
				g.Expect(cached.Check(fromCache, node.Name)).To(Equal(whole.Check(pod, node.Name)), "on node %s", node.Name)
			}
		})
	}
}

func TestPodsOfOneWorkloadShareTheirCommonParts(t *testing.T) {
	g := NewWithT(t)
	transformer := trim.NewTransformer()
	a, b := deploymentPod("web-7d9f-a"), deploymentPod("web-7d9f-b")
	b.Spec.NodeName = "node-2"
	ca, cb := transformer.Pod(a), transformer.Pod(b)

	g.Expect(ca.Spec).To(BeIdenticalTo(cb.Spec), "replicas on different nodes share their spec")
	g.Expect(&ca.OwnerReferences[0]).To(BeIdenticalTo(&cb.OwnerReferences[0]))
	g.Expect(&ca.Conditions[0]).To(BeIdenticalTo(&cb.Conditions[0]))
	g.Expect(fmt.Sprintf("%p", ca.Labels)).To(Equal(fmt.Sprintf("%p", cb.Labels)))
	g.Expect(ca.Name).NotTo(Equal(cb.Name))
	g.Expect(cb.NodeName).To(Equal("node-2"))

	g.Expect(ca.Spec.Tolerations).To(HaveCap(len(ca.Spec.Tolerations)),
		"an append by a reader must not write into the slice another pod shares")

	other := deploymentPod("api-1")
	other.Labels = map[string]string{"app": "api"}
	co := transformer.Pod(other)
	g.Expect(co.Labels).To(Equal(map[string]string{"app": "api"}))
	g.Expect(fmt.Sprintf("%p", co.Labels)).NotTo(Equal(fmt.Sprintf("%p", ca.Labels)))
}

func TestTransformConvertsPodsAndTrimsNodesAndControllers(t *testing.T) {
	g := NewWithT(t)
	transformer := trim.NewTransformer()

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			Images:      []corev1.ContainerImage{{Names: []string{"web:1"}, SizeBytes: 1 << 20}},
		},
	}
	out, err := transformer.Transform(node)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeIdenticalTo(node))
	g.Expect(node.Status.Images).To(BeNil())
	g.Expect(node.ManagedFields).To(BeNil())
	g.Expect(node.Status.Allocatable).To(HaveKey(corev1.ResourceCPU))

	pod := deploymentPod("web-7d9f-a")
	out, err = transformer.Transform(pod)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeAssignableToTypeOf(&snapshot.Pod{}))
	g.Expect(out.(*snapshot.Pod).Spec.Containers[0].Image).To(BeEmpty())

	replicaSet := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "shop", Name: "web-7d9f", UID: "rs-uid", ResourceVersion: "7",
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9f"},
			Annotations:     map[string]string{"deployment.kubernetes.io/revision": "3"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "deploy-uid", Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
		},
	}
	out, err = transformer.Transform(replicaSet)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(BeIdenticalTo(replicaSet))
	g.Expect(replicaSet).To(Equal(&metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-7d9f", UID: "rs-uid", ResourceVersion: "7"},
	}), "a controller's metadata is kept only to tell that it exists")

	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "a"}}}
	out, err = transformer.Transform(namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.Namespace).Labels).To(HaveKeyWithValue("team", "a"))
}

// BenchmarkTransformPod is the cost of converting one pod as the cache
// receives it.
func BenchmarkTransformPod(b *testing.B) {
	transformer := trim.NewTransformer()
	pods := make([]*corev1.Pod, b.N)
	for i := range pods {
		pods[i] = deploymentPod(fmt.Sprintf("web-7d9f-%d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for _, pod := range pods {
		transformer.Pod(pod)
	}
}

// BenchmarkCachedPodsLiveHeap is the live heap each pod of a cluster costs
// the engine: the cache's object (through the transform, in an indexer
// keyed and indexed by namespace like an informer's store) with the parsed
// form it keeps between loops. The pods are those of the perf
// harness (hack/perf): 30 per node, 50 per controller, with what the API
// server adds to them.
func BenchmarkCachedPodsLiveHeap(b *testing.B) {
	const nodes, podsPerNode, podsPerOwner = 100, 30, 50
	for b.Loop() {
		before := benchmark.HeapAfterGC().HeapAlloc
		transformer := trim.NewTransformer()
		store := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		nodeList := make([]*corev1.Node, nodes)
		for n := range nodes {
			nodeList[n] = st.Node(fmt.Sprintf("node-%d", n), "16", "64Gi")
			for p := range podsPerNode {
				i := n*podsPerNode + p
				compact, _ := transformer.Transform(harnessPod(i, i/podsPerOwner, nodeList[n].Name))
				if err := store.Add(compact); err != nil {
					b.Fatal(err)
				}
			}
		}
		pods := make([]*snapshot.Pod, 0, nodes*podsPerNode)
		for _, obj := range store.List() {
			pods = append(pods, obj.(*snapshot.Pod))
		}
		// The list is dead after this call: the heap counted after it holds
		// what the store and the parsed pods keep.
		snapshot.New(snapshot.Input{Nodes: nodeList, CachedPods: pods})
		after := benchmark.HeapAfterGC().HeapAlloc
		b.ReportMetric(float64(after-before)/(nodes*podsPerNode), "live-B/pod")
		runtime.KeepAlive(store)
	}
}

// BenchmarkSnapshotOfCachedPods is the snapshot an idle loop builds of
// 1,000 nodes and the 30,000 pods of the perf harness, as a cache holds
// them.
func BenchmarkSnapshotOfCachedPods(b *testing.B) {
	const nodes, podsPerNode, podsPerOwner = 1000, 30, 50
	transformer := trim.NewTransformer()
	nodeList := make([]*corev1.Node, nodes)
	var pods []*snapshot.Pod
	for n := range nodes {
		nodeList[n] = st.Node(fmt.Sprintf("node-%d", n), "16", "64Gi")
		for p := range podsPerNode {
			i := n*podsPerNode + p
			pods = append(pods, transformer.Pod(harnessPod(i, i/podsPerOwner, nodeList[n].Name)))
		}
	}
	// An informer's store lists in no particular order.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	snapshot.New(snapshot.Input{Nodes: nodeList, CachedPods: pods})
	b.ReportAllocs()
	for b.Loop() {
		snapshot.New(snapshot.Input{Nodes: nodeList, CachedPods: pods})
	}
}

// harnessPod is pod i of the perf harness as the API server returns it.
func harnessPod(i, owner int, nodeName string) *corev1.Pod {
	ownerName := fmt.Sprintf("owner-%d", owner)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "perf", Name: fmt.Sprintf("pod-%d", i), UID: types.UID(fmt.Sprintf("7d3c1f2e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprintf("%d", 100000+i), CreationTimestamp: metav1.Now(),
			Labels:          map[string]string{"app": ownerName},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: ownerName, UID: types.UID(ownerName), Controller: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "perf"}, {Manager: "kwok"}},
		},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			Tolerations: []corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			DNSPolicy:                     corev1.DNSClusterFirst,
			SchedulerName:                 corev1.DefaultSchedulerName,
			Priority:                      ptr.To[int32](0),
			EnableServiceLinks:            ptr.To(true),
			PreemptionPolicy:              ptr.To(corev1.PreemptLowerPriority),
			Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}}},
			}}}},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10", ImagePullPolicy: corev1.PullIfNotPresent,
				TerminationMessagePath: corev1.TerminationMessagePathDefault, TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("300m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
				}},
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
			}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.1", HostIP: "192.168.0.1", QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "registry.k8s.io/pause:3.10", ImageID: "sha256:abc", ContainerID: "kwok://app"}},
		},
	}
}
