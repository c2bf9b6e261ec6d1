package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
)

// The situations of the upstream autoscaler's own tests of the
// CapacityBuffer status (capacitybuffer/translators/*_test.go,
// processors/capacitybuffer/pod_list_processor.go), each with the
// conditions and fields a user of the upstream autoscaler sees there.
var _ = Describe("CapacityBuffer status as upstream writes it", func() {
	var (
		namespace string
		clock     *clocktesting.FakeClock
		lister    *capacityBuffers
	)
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")},
	}}}}
	createBuffer := func(name string, spec capacitybufferv1beta1.CapacityBufferSpec) {
		GinkgoHelper()
		buffer := &capacitybufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec}
		Expect(k8sClient.Create(ctx, buffer)).To(Succeed())
		// The suite's other engines share the API server: no buffer stays.
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, buffer))).To(Succeed())
		})
	}
	statusOf := func(name string) capacitybufferv1beta1.CapacityBufferStatus {
		GinkgoHelper()
		buffer := &capacitybufferv1beta1.CapacityBuffer{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, buffer)).To(Succeed())
		return buffer.Status
	}
	resolve := func() {
		GinkgoHelper()
		_, err := lister.ListBuffers(ctx)
		Expect(err).NotTo(HaveOccurred())
		lister.WriteStatus(ctx, nil)
	}
	condition := func(status metav1.ConditionStatus, reason string) OmegaMatcher {
		return HaveValue(SatisfyAll(HaveField("Status", status), HaveField("Reason", reason)))
	}

	BeforeEach(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "buffers-parity-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		clock = clocktesting.NewFakeClock(time.Now())
		lister = newCapacityBuffers(client.NewNamespacedClient(k8sClient, namespace),
			func(context.Context) (client.Client, error) { return k8sClient, nil }, clock)
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Template: corev1.PodTemplateSpec{Spec: spec}})).To(Succeed())
	})

	DescribeTable("sets ReadyForProvisioning and Provisioning, with status.replicas and status.podTemplateRef",
		func(bufferSpec capacitybufferv1beta1.CapacityBufferSpec, ready, provisioning OmegaMatcher, replicas *int32, podTemplate *string) {
			createBuffer("buffer", bufferSpec)
			resolve()

			status := statusOf("buffer")
			Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ReadyForProvisioningCondition)).To(ready)
			Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ProvisioningCondition)).To(provisioning)
			Expect(status.Replicas).To(Equal(replicas))
			if podTemplate == nil {
				Expect(status.PodTemplateRef).To(BeNil())
			} else {
				Expect(status.PodTemplateRef).To(HaveValue(HaveField("Name", *podTemplate)))
			}
			Expect(status.ProvisioningStrategy).To(HaveValue(Equal(capacitybufferv1beta1.ActiveCapacityProvisioningStrategy)))
		},
		Entry("replicas of a PodTemplate: ready, its pods injected",
			capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](2)},
			condition(metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason),
			condition(metav1.ConditionTrue, capacitybufferv1beta1.FakePodsInjectedReason), ptr.To[int32](2), ptr.To("web")),
		Entry("zero replicas: ready, and empty",
			capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](0)},
			condition(metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason),
			condition(metav1.ConditionFalse, capacitybufferv1beta1.BufferIsEmptyReason), ptr.To[int32](0), ptr.To("web")),
		Entry("limits alone: as many as fit",
			capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"},
				Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}},
			condition(metav1.ConditionTrue, capacitybufferv1beta1.AttributesSetSuccessfullyReason),
			condition(metav1.ConditionTrue, capacitybufferv1beta1.FakePodsInjectedReason), ptr.To[int32](4), ptr.To("web")),
		Entry("a PodTemplate that does not exist: not ready, no replicas, no template",
			capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "missing"}, Replicas: ptr.To[int32](2)},
			condition(metav1.ConditionFalse, notReadyReason),
			condition(metav1.ConditionFalse, capacitybufferv1beta1.NotReadyForProvisioningReason), nil, nil),
		Entry("limits that name no resource the pods request: not ready, the template but no replicas",
			capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"},
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
			condition(metav1.ConditionFalse, notReadyReason),
			condition(metav1.ConditionFalse, capacitybufferv1beta1.NotReadyForProvisioningReason), nil, ptr.To("web")),
		Entry("a scalableRef to a workload that does not exist: not ready, no replicas, no template",
			capacitybufferv1beta1.CapacityBufferSpec{ScalableRef: &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "missing"},
				Replicas: ptr.To[int32](1)},
			condition(metav1.ConditionFalse, notReadyReason),
			condition(metav1.ConditionFalse, capacitybufferv1beta1.NotReadyForProvisioningReason), nil, nil),
	)

	It("no longer says a buffer holds replicas once it is not ready", func() {
		createBuffer("warm", capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](2)})
		resolve()
		Expect(statusOf("warm").Replicas).To(HaveValue(Equal(int32(2))))

		Expect(k8sClient.Delete(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"}})).To(Succeed())
		clock.Step(bufferResolveInterval)
		resolve()

		status := statusOf("warm")
		Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ReadyForProvisioningCondition)).To(condition(metav1.ConditionFalse, notReadyReason))
		Expect(status.Replicas).To(BeNil(), "upstream clears the replicas of a buffer that is not ready")
		Expect(status.PodTemplateRef).To(BeNil(), "nor does it name a PodTemplate that does not exist")
		Expect(status.PodTemplateGeneration).To(BeNil())
	})
})
