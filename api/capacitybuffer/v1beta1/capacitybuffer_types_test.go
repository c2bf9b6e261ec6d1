package v1beta1_test

import (
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/schematest"
)

// newBuffer returns a valid buffer, changed by mutate.
func newBuffer(mutate func(spec *capacitybufferv1beta1.CapacityBufferSpec)) *capacitybufferv1beta1.CapacityBuffer {
	buffer := &capacitybufferv1beta1.CapacityBuffer{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "buffer-", Namespace: metav1.NamespaceDefault},
		Spec: capacitybufferv1beta1.CapacityBufferSpec{
			PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "chunk"},
			Replicas:       ptr.To[int32](2),
		},
	}
	if mutate != nil {
		mutate(&buffer.Spec)
	}
	return buffer
}

func quantity(s string) resource.Quantity { return resource.MustParse(s) }

var _ = Describe("CapacityBuffer schema", func() {
	DescribeTable("accepts buffers written for the upstream autoscaler unchanged",
		func(file string, check func(spec capacitybufferv1beta1.CapacityBufferSpec)) {
			example := schematest.ReadExample(file)
			created := example.DeepCopy()
			schematest.CreateForTest(ctx, k8sClient, created)

			// The API server drops fields its schema does not know without an
			// error: a field named differently here than upstream would vanish.
			wantSpec := example.Object["spec"].(map[string]any)
			if _, set := wantSpec["provisioningStrategy"]; !set {
				wantSpec["provisioningStrategy"] = capacitybufferv1beta1.ActiveCapacityProvisioningStrategy
			}
			Expect(created.Object["spec"]).To(Equal(wantSpec), "the spec as written, with the default strategy")

			buffer := &capacitybufferv1beta1.CapacityBuffer{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(created), buffer)).To(Succeed())
			Expect(buffer.Spec.ProvisioningStrategy).To(HaveValue(Equal(capacitybufferv1beta1.ActiveCapacityProvisioningStrategy)))
			check(buffer.Spec)
		},
		Entry("a PodTemplate and a number of chunks", "podtemplate-replicas.yaml", func(spec capacitybufferv1beta1.CapacityBufferSpec) {
			Expect(spec.PodTemplateRef).To(Equal(&capacitybufferv1beta1.LocalObjectRef{Name: "web-chunk"}))
			Expect(spec.ScalableRef).To(BeNil())
			Expect(spec.Replicas).To(HaveValue(BeEquivalentTo(3)))
		}),
		Entry("a percentage of a Deployment's replicas, at least one chunk", "scalable-percentage.yaml", func(spec capacitybufferv1beta1.CapacityBufferSpec) {
			Expect(spec.ScalableRef).To(Equal(&capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}))
			Expect(spec.PodTemplateRef).To(BeNil())
			Expect(spec.Percentage).To(HaveValue(BeEquivalentTo(20)))
			Expect(spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
		}),
		Entry("as many chunks of a PodTemplate as fit in limits", "podtemplate-limits.yaml", func(spec capacitybufferv1beta1.CapacityBufferSpec) {
			Expect(spec.PodTemplateRef).To(Equal(&capacitybufferv1beta1.LocalObjectRef{Name: "ci-runner"}))
			Expect(spec.Replicas).To(BeNil())
			Expect(spec.Limits).To(HaveLen(2))
			Expect(spec.Limits.Cpu().Cmp(quantity("40"))).To(BeZero())
			Expect(spec.Limits.Memory().Cmp(quantity("160Gi"))).To(BeZero())
		}),
		Entry("a percentage of a StatefulSet's replicas within limits", "scalable-limits.yaml", func(spec capacitybufferv1beta1.CapacityBufferSpec) {
			Expect(spec.ScalableRef).To(Equal(&capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "StatefulSet", Name: "cache"}))
			Expect(spec.Percentage).To(HaveValue(BeEquivalentTo(50)))
			Expect(spec.Limits).To(HaveLen(1))
			Expect(spec.Limits.Cpu().Cmp(quantity("16"))).To(BeZero())
		}),
	)

	It("accepts a percentage above 100, as upstream does: 200 keeps twice the workload's replicas", func() {
		schematest.CreateForTest(ctx, k8sClient, newBuffer(func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.PodTemplateRef = nil
			spec.ScalableRef = &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}
			spec.Replicas = nil
			spec.Percentage = ptr.To[int32](200)
		}))
	})

	It("keeps another autoscaler's provisioning strategy", func() {
		buffer := newBuffer(func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.ProvisioningStrategy = ptr.To("example.com/standby-capacity")
		})
		schematest.CreateForTest(ctx, k8sClient, buffer)
		Expect(buffer.Spec.ProvisioningStrategy).To(HaveValue(Equal("example.com/standby-capacity")))
	})

	DescribeTable("refuses invalid buffers with a message that says what is wrong",
		func(mutate func(spec *capacitybufferv1beta1.CapacityBufferSpec), message string) {
			err := k8sClient.Create(ctx, newBuffer(mutate))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid: %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("both a PodTemplate and a workload", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.ScalableRef = &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}
		}, "spec: Invalid value: podTemplateRef and scalableRef are mutually exclusive: set one of them"),
		Entry("neither a PodTemplate nor a workload", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.PodTemplateRef = nil
		}, "spec: Invalid value: one of podTemplateRef and scalableRef must be set"),
		Entry("a PodTemplate with a percentage only", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.Replicas = nil
			spec.Percentage = ptr.To[int32](20)
		}, "spec: Invalid value: a buffer with podTemplateRef must set replicas or limits"),
		Entry("a PodTemplate with no number of chunks", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.Replicas = nil
		}, "a buffer with podTemplateRef must set replicas or limits"),
		Entry("negative replicas", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.Replicas = ptr.To[int32](-1)
		}, "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"),
		Entry("a negative percentage", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.PodTemplateRef = nil
			spec.ScalableRef = &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}
			spec.Percentage = ptr.To[int32](-10)
		}, "spec.percentage: Invalid value: -10: spec.percentage in body should be greater than or equal to 0"),
		Entry("a PodTemplate without a name", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.PodTemplateRef.Name = ""
		}, "spec.podTemplateRef.name: Invalid value: \"\": spec.podTemplateRef.name in body should be at least 1 chars long"),
		Entry("a workload without a kind", func(spec *capacitybufferv1beta1.CapacityBufferSpec) {
			spec.PodTemplateRef = nil
			spec.ScalableRef = &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Name: "web"}
		}, "spec.scalableRef.kind: Invalid value: \"\": spec.scalableRef.kind in body should be at least 1 chars long"),
	)

	It("refuses limits that are not quantities", func() {
		buffer := schematest.ReadExample("podtemplate-limits.yaml")
		Expect(unstructured.SetNestedField(buffer.Object, "forty", "spec", "limits", "cpu")).To(Succeed())
		err := k8sClient.Create(ctx, buffer)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.limits.cpu: Invalid value: \"forty\": spec.limits.cpu in body should match"))
	})

	It("takes the autoscaler's answer through the status subresource only, and shows it in kubectl get", func() {
		buffer := schematest.ReadExample("podtemplate-replicas.yaml")
		schematest.CreateForTest(ctx, k8sClient, buffer)
		typed := &capacitybufferv1beta1.CapacityBuffer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(buffer), typed)).To(Succeed())
		generation := typed.Generation

		status := capacitybufferv1beta1.CapacityBufferStatus{
			PodTemplateRef:        &capacitybufferv1beta1.LocalObjectRef{Name: "web-chunk"},
			Replicas:              ptr.To[int32](3),
			PodTemplateGeneration: ptr.To[int64](4),
			ProvisioningStrategy:  ptr.To(capacitybufferv1beta1.ActiveCapacityProvisioningStrategy),
			Conditions: []metav1.Condition{{
				Type: capacitybufferv1beta1.ReadyForProvisioningCondition, Status: metav1.ConditionTrue,
				Reason: capacitybufferv1beta1.AttributesSetSuccessfullyReason, Message: "ready", LastTransitionTime: metav1.Now(),
			}, {
				Type: capacitybufferv1beta1.ProvisioningCondition, Status: metav1.ConditionTrue,
				Reason: capacitybufferv1beta1.FakePodsInjectedReason, LastTransitionTime: metav1.Now(),
			}},
		}

		By("ignoring a status written with the object")
		typed.Status = status
		Expect(k8sClient.Update(ctx, typed)).To(Succeed())
		Expect(typed.Status).To(BeZero())

		By("keeping a status written through the subresource")
		typed.Status = status
		Expect(k8sClient.Status().Update(ctx, typed)).To(Succeed())
		stored := &capacitybufferv1beta1.CapacityBuffer{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(buffer), stored)).To(Succeed())
		Expect(stored.Status.PodTemplateRef).To(Equal(status.PodTemplateRef))
		Expect(stored.Status.Replicas).To(Equal(status.Replicas))
		Expect(stored.Status.PodTemplateGeneration).To(Equal(status.PodTemplateGeneration))
		Expect(stored.Status.ProvisioningStrategy).To(Equal(status.ProvisioningStrategy))
		Expect(stored.Status.Conditions).To(HaveLen(2))
		Expect(stored.Generation).To(Equal(generation), "a status write is no change of the spec")

		By("showing the columns of the upstream CRD")
		table := &metav1.Table{}
		raw, err := clientset.RESTClient().Get().
			AbsPath("/apis", capacitybufferv1beta1.GroupVersion.Group, capacitybufferv1beta1.GroupVersion.Version, "namespaces", buffer.GetNamespace(), "capacitybuffers", buffer.GetName()).
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").
			DoRaw(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(json.Unmarshal(raw, table)).To(Succeed())
		var columns []string
		for _, column := range table.ColumnDefinitions {
			columns = append(columns, column.Name)
		}
		Expect(columns).To(Equal([]string{"Name", "Strategy", "PodTemplate", "Replicas", "ConditionsType", "ConditionsStatus", "ConditionsReason", "Age"}))
		Expect(table.Rows).To(HaveLen(1))
		// A column's JSONPath shows its first match only: the conditions
		// columns show the first condition, as upstream's do.
		Expect(table.Rows[0].Cells[:7]).To(Equal([]any{
			"web-spare", capacitybufferv1beta1.ActiveCapacityProvisioningStrategy, "web-chunk", float64(3),
			capacitybufferv1beta1.ReadyForProvisioningCondition, "True", capacitybufferv1beta1.AttributesSetSuccessfullyReason,
		}))
	})

	It("is found by kubectl as capacitybuffers and cb, in a namespace", func() {
		resources, err := clientset.Discovery().ServerResourcesForGroupVersion(capacitybufferv1beta1.GroupVersion.String())
		Expect(err).NotTo(HaveOccurred())
		var found []metav1.APIResource
		for _, r := range resources.APIResources {
			if r.Kind == "CapacityBuffer" {
				found = append(found, r)
			}
		}
		Expect(found).To(ContainElement(And(
			HaveField("Name", "capacitybuffers"),
			HaveField("ShortNames", []string{"cb"}),
			HaveField("Namespaced", true),
		)))
		Expect(found).To(ContainElement(HaveField("Name", "capacitybuffers/status")))
	})

	It("serves the deprecated v1alpha1 with the same schema, for the clients and the stored objects of upstream's older CRD", func() {
		schematest.ExpectServedAsOlderVersion(ctx, k8sClient, clientset, "podtemplate-replicas.yaml", "autoscaling.x-k8s.io/v1alpha1")
	})

})
