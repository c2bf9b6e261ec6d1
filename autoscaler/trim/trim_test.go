package trim_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
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
			},
			TerminationGracePeriodSeconds: ptr.To[int64](30),
		},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			PodIP:  "10.0.0.7",
			HostIP: "192.168.0.1",
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
	trimmed := pod.DeepCopy()
	trim.NewTransformer().Pod(trimmed)

	g.Expect(snapshot.PodRequests(trimmed)).To(Equal(snapshot.PodRequests(pod)), "requests, with the sidecar's")
	g.Expect(snapshot.NewPodInfo(trimmed).HostPorts).To(Equal(snapshot.NewPodInfo(pod).HostPorts))
	g.Expect(snapshot.NewPodInfo(trimmed).RequiredAntiAffinityTerms).To(HaveLen(1))
	g.Expect(trimmed.Spec.NodeSelector).To(Equal(pod.Spec.NodeSelector))
	g.Expect(trimmed.Spec.Tolerations).To(Equal(pod.Spec.Tolerations))
	g.Expect(trimmed.Spec.Priority).To(Equal(pod.Spec.Priority))
	g.Expect(trimmed.Spec.TerminationGracePeriodSeconds).To(Equal(pod.Spec.TerminationGracePeriodSeconds))
	g.Expect(trimmed.OwnerReferences).To(Equal(pod.OwnerReferences), "a pod without its controller could not be moved")
	g.Expect(trimmed.Labels).To(Equal(pod.Labels), "selectors of PDBs, affinity and spreading match labels")
	g.Expect(trimmed.Annotations).To(Equal(map[string]string{scaledown.SafeToEvictLocalVolumesAnnotation: "scratch"}))
	g.Expect(trimmed.Spec.Volumes).To(HaveLen(2), "the emptyDir and hostPath volumes, which block a move")
	g.Expect(trimmed.Spec.Volumes[1].HostPath).To(Equal(pod.Spec.Volumes[1].HostPath))
	g.Expect(trimmed.Status.Phase).To(Equal(corev1.PodRunning))
	g.Expect(trimmed.Name).To(Equal(pod.Name))
	g.Expect(trimmed.UID).To(Equal(pod.UID))
	g.Expect(trimmed.CreationTimestamp).To(Equal(pod.CreationTimestamp))

	g.Expect(trimmed.ManagedFields).To(BeNil())
	g.Expect(trimmed.Status.ContainerStatuses).To(BeNil())
	g.Expect(trimmed.Spec.Containers[0].Image).To(BeEmpty())
	g.Expect(trimmed.Spec.Containers[0].Env).To(BeNil())
	g.Expect(trimmed.Spec.Containers[0].Ports).To(HaveLen(1), "only the host port matters to scheduling")
}

func TestPodStillShowsTheSchedulerFoundNoNode(t *testing.T) {
	g := NewWithT(t)
	pod := deploymentPod("web-7d9f-pending")
	pod.Spec.NodeName = ""
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient cpu.", LastTransitionTime: metav1.Now(),
	}}}
	trim.NewTransformer().Pod(pod)
	g.Expect(scaleup.IsUnschedulable(pod)).To(BeTrue())
}

func TestPodsOfOneWorkloadShareTheirCommonParts(t *testing.T) {
	g := NewWithT(t)
	transformer := trim.NewTransformer()
	a, b := deploymentPod("web-7d9f-a"), deploymentPod("web-7d9f-b")
	transformer.Pod(a)
	transformer.Pod(b)

	g.Expect(&a.Spec.Containers[0]).To(BeIdenticalTo(&b.Spec.Containers[0]))
	g.Expect(&a.Spec.Tolerations[0]).To(BeIdenticalTo(&b.Spec.Tolerations[0]))
	g.Expect(&a.OwnerReferences[0]).To(BeIdenticalTo(&b.OwnerReferences[0]))
	g.Expect(a.Spec.Affinity).To(BeIdenticalTo(b.Spec.Affinity))
	g.Expect(fmt.Sprintf("%p", a.Labels)).To(Equal(fmt.Sprintf("%p", b.Labels)))
	g.Expect(a.Name).NotTo(Equal(b.Name))

	g.Expect(a.Spec.Tolerations).To(HaveCap(len(a.Spec.Tolerations)),
		"an append by a reader must not write into the slice another pod shares")

	other := deploymentPod("api-1")
	other.Labels = map[string]string{"app": "api"}
	transformer.Pod(other)
	g.Expect(other.Labels).To(Equal(map[string]string{"app": "api"}))
	g.Expect(fmt.Sprintf("%p", other.Labels)).NotTo(Equal(fmt.Sprintf("%p", a.Labels)))
}

func TestTransformTrimsPodsAndNodesOnly(t *testing.T) {
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
	g.Expect(out.(*corev1.Pod).Spec.Containers[0].Image).To(BeEmpty())

	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "a"}}}
	out, err = transformer.Transform(namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.(*corev1.Namespace).Labels).To(HaveKeyWithValue("team", "a"))
}

// BenchmarkTransformPod is the cost of trimming one pod as the cache
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
