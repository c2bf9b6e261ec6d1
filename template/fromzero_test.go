package template

import (
	"context"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var _ = Describe("FromZero", func() {
	var (
		ctx    context.Context
		f      *envtest.Fixture
		source *fakeSource
	)

	BeforeEach(func() {
		ctx = testContext()
		f = envtest.NewFixture(ctx, k8sClient)
		source = &fakeSource{
			namespace: f.Namespace,
			template:  f.MachineTemplate(map[string]string{clusterv1.MachineDeploymentNameLabel: "md-0"}, "infra-0"),
		}
	})

	// createInfrastructureTemplate creates the infrastructure machine template
	// the source refers to, publishing status as a provider would.
	createInfrastructureTemplate := func(status map[string]any) {
		GinkgoHelper()
		infra := &unstructured.Unstructured{Object: map[string]any{"status": status}}
		infra.SetGroupVersionKind(envtest.InfrastructureMachineTemplate)
		infra.SetNamespace(f.Namespace)
		infra.SetName("infra-0")
		Expect(k8sClient.Create(ctx, infra)).To(Succeed())
	}

	// fromZero builds the template from the source's annotations, parsed
	// as node group discovery parses them.
	fromZero := func() (*corev1.Node, error) {
		GinkgoHelper()
		hints, err := ParseHints(source.ID(), source.annotations)
		Expect(err).NotTo(HaveOccurred())
		return FromZero(ctx, k8sClient, source, hints)
	}

	expectCapacity := func(node *corev1.Node, name corev1.ResourceName, quantity string) {
		GinkgoHelper()
		Expect(node.Status.Capacity).To(HaveKeyWithValue(name, BeComparableTo(resource.MustParse(quantity))))
		Expect(node.Status.Allocatable).To(HaveKeyWithValue(name, BeComparableTo(resource.MustParse(quantity))))
	}

	It("builds a Ready node from the capacity annotations", func() {
		source.annotations = map[string]string{
			CPUAnnotation:           "4",
			MemoryAnnotation:        "16Gi",
			EphemeralDiskAnnotation: "50Gi",
			GPUCountAnnotation:      "2",
			LabelsAnnotation:        "pool=gpu,example.com/tier=batch",
			TaintsAnnotation:        "nvidia.com/gpu=present:NoSchedule",
			CSIDriverAnnotation:     "ebs.csi.aws.com=25",
		}
		source.template.Spec.FailureDomain = "zone-b"
		source.template.Spec.Taints = []clusterv1.MachineTaint{{
			Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute, Propagation: clusterv1.MachineTaintPropagationAlways,
		}}
		source.template.Labels["node-role.kubernetes.io/worker"] = ""
		source.template.Labels["node-restriction.kubernetes.io/pool"] = "gpu"
		source.template.Labels["tier.node.cluster.x-k8s.io/size"] = "large"
		source.template.Labels["node.cluster.x-k8s.io/owner"] = "team-a"
		source.template.Labels["app"] = "not-propagated"

		node, err := fromZero()
		Expect(err).NotTo(HaveOccurred())

		expectCapacity(node, corev1.ResourceCPU, "4")
		expectCapacity(node, corev1.ResourceMemory, "16Gi")
		expectCapacity(node, corev1.ResourceEphemeralStorage, "50Gi")
		expectCapacity(node, DefaultGPUResource, "2")
		expectCapacity(node, corev1.ResourcePods, "110")
		Expect(node.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
		Expect(node.Labels).To(Equal(map[string]string{
			corev1.LabelOSStable:                  "linux",
			corev1.LabelArchStable:                "amd64",
			"beta.kubernetes.io/os":               "linux",
			"beta.kubernetes.io/arch":             "amd64",
			corev1.LabelTopologyZone:              "zone-b",
			"node-role.kubernetes.io/worker":      "",
			"node-restriction.kubernetes.io/pool": "gpu",
			"tier.node.cluster.x-k8s.io/size":     "large",
			"node.cluster.x-k8s.io/owner":         "team-a",
			"pool":                                "gpu",
			"example.com/tier":                    "batch",
		}))
		Expect(node.Spec.Taints).To(ConsistOf(
			corev1.Taint{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoExecute},
			corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule},
		))
		Expect(node.Annotations).To(HaveKeyWithValue(CSIDriverAnnotation, "ebs.csi.aws.com=25"), "the simulator reads the attach limits there")
	})

	It("builds a node from the infrastructure template's status", func() {
		createInfrastructureTemplate(map[string]any{
			"capacity": map[string]any{"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"},
			"nodeInfo": map[string]any{"architecture": "arm64", "operatingSystem": "linux"},
		})

		node, err := fromZero()
		Expect(err).NotTo(HaveOccurred())
		expectCapacity(node, corev1.ResourceCPU, "2")
		expectCapacity(node, corev1.ResourceMemory, "8Gi")
		expectCapacity(node, "nvidia.com/gpu", "1")
		expectCapacity(node, corev1.ResourcePods, "110")
		Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelArchStable, "arm64"))
		Expect(node.Status.NodeInfo.Architecture).To(Equal("arm64"))
	})

	It("lets the annotations win over the infrastructure template", func() {
		createInfrastructureTemplate(map[string]any{
			"capacity": map[string]any{"cpu": "2", "memory": "8Gi", "pods": "30"},
		})
		source.annotations = map[string]string{CPUAnnotation: "8", MaxPodsAnnotation: "250"}

		node, err := fromZero()
		Expect(err).NotTo(HaveOccurred())
		expectCapacity(node, corev1.ResourceCPU, "8")
		expectCapacity(node, corev1.ResourceMemory, "8Gi")
		expectCapacity(node, corev1.ResourcePods, "250")
	})

	It("cannot scale from zero without cpu and memory, and says how to fix it", func() {
		createInfrastructureTemplate(map[string]any{"capacity": map[string]any{"cpu": "2"}})

		_, err := fromZero()
		var cannot *CannotScaleFromZeroError
		Expect(errors.As(err, &cannot)).To(BeTrue(), "got %v", err)
		Expect(cannot.ID).To(Equal(source.ID()))
		Expect(err.Error()).To(And(ContainSubstring(MemoryAnnotation), ContainSubstring("infra-0"), ContainSubstring("status.capacity")))
	})

	It("cannot scale from zero when the infrastructure template is missing and there are no annotations", func() {
		_, err := fromZero()
		var cannot *CannotScaleFromZeroError
		Expect(errors.As(err, &cannot)).To(BeTrue(), "got %v", err)
		Expect(err.Error()).To(ContainSubstring("not found"))
	})

	It("does without an unreadable infrastructure template when the annotations suffice", func() {
		source.template.Spec.InfrastructureRef.APIGroup = "infrastructure.unknown.example.com"
		source.annotations = map[string]string{CPUAnnotation: "1", MemoryAnnotation: "2Gi"}

		node, err := fromZero()
		Expect(err).NotTo(HaveOccurred())
		expectCapacity(node, corev1.ResourceCPU, "1")

		source.annotations = nil
		_, err = fromZero()
		Expect(err).To(MatchError(ContainSubstring("reading the infrastructure template")))
	})
})
