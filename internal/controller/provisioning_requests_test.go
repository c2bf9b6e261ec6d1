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
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

// The envtest API server serves as the workload cluster, with the
// ProvisioningRequest CRD installed.
var _ = Describe("Check-capacity provisioning requests", func() {
	var (
		namespace string
		clock     *clocktesting.FakeClock
		checker   *provisioningRequests
	)
	createRequestOf := func(class, name string, parameters map[string]provisioningv1.Parameter) *provisioningv1.ProvisioningRequest {
		GinkgoHelper()
		request := &provisioningv1.ProvisioningRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: provisioningv1.ProvisioningRequestSpec{
				ProvisioningClassName: class,
				PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: "worker"}, Count: 3}},
				Parameters:            parameters,
			},
		}
		Expect(k8sClient.Create(ctx, request)).To(Succeed())
		return request
	}
	createRequest := func(name string, parameters map[string]provisioningv1.Parameter) *provisioningv1.ProvisioningRequest {
		GinkgoHelper()
		return createRequestOf(provisioningv1.CheckCapacityProvisioningClass, name, parameters)
	}
	statusOf := func(name string) provisioningv1.ProvisioningRequestStatus {
		GinkgoHelper()
		request := &provisioningv1.ProvisioningRequest{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, request)).To(Succeed())
		return request.Status
	}
	conditionsOf := func(name string) []metav1.Condition {
		GinkgoHelper()
		request := &provisioningv1.ProvisioningRequest{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, request)).To(Succeed())
		return request.Status.Conditions
	}
	listRequests := func() []provisioning.Request {
		GinkgoHelper()
		requests, ended, err := checker.ListRequests(ctx)
		Expect(err).NotTo(HaveOccurred())
		// As the engine's Active actuation does once the loop is planned.
		checker.Answer(ctx, ended)
		return requests
	}
	haveCondition := func(conditionType string, status metav1.ConditionStatus, reason string) OmegaMatcher {
		return ContainElement(SatisfyAll(HaveField("Type", conditionType), HaveField("Status", status), HaveField("Reason", reason)))
	}

	BeforeEach(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "provreq-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		clock = clocktesting.NewFakeClock(time.Now())
		checker = newProvisioningRequests(client.NewNamespacedClient(k8sClient, namespace),
			func(context.Context) (client.Client, error) { return k8sClient, nil }, clock)
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "worker"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}})).To(Succeed())
	})

	It("books the capacity found, and ends the booking after 10 minutes", func() {
		request := createRequest("job", nil)

		requests := listRequests()
		Expect(requests).To(ConsistOf(SatisfyAll(HaveField("Booked", false), HaveField("PodSets", ConsistOf(HaveField("Count", int32(3)))))))
		checker.Answer(ctx, []provisioning.Answer{{Namespace: namespace, Name: "job", UID: request.UID, Outcome: provisioning.Found}})
		Expect(conditionsOf("job")).To(SatisfyAll(
			haveCondition(provisioningv1.AcceptedCondition, metav1.ConditionTrue, provisioningv1.AcceptedReason),
			haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsFoundReason)))

		Expect(listRequests()).To(ConsistOf(HaveField("Booked", true)), "its room is kept for its pods")
		clock.Step(bookingTime)
		Expect(listRequests()).To(BeEmpty())
		Expect(conditionsOf("job")).To(haveCondition(provisioningv1.BookingExpiredCondition, metav1.ConditionTrue, provisioningv1.CapacityReservationTimeExpiredReason))
	})

	It("says when the capacity is not found, and fails a request that asked not to be retried", func() {
		retried := createRequest("retried", nil)
		once := createRequest("once", map[string]provisioningv1.Parameter{provisioningv1.NoRetryParameter: "true"})
		Expect(listRequests()).To(HaveLen(2))

		checker.Answer(ctx, []provisioning.Answer{
			{Namespace: namespace, Name: "retried", UID: retried.UID, Outcome: provisioning.NotFound, Message: "1 of the 3 pods fit on no node"},
			{Namespace: namespace, Name: "once", UID: once.UID, Outcome: provisioning.NotFound, Message: "1 of the 3 pods fit on no node"},
		})

		Expect(conditionsOf("retried")).To(haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason))
		Expect(meta.FindStatusCondition(conditionsOf("retried"), provisioningv1.ProvisionedCondition).Message).To(Equal("1 of the 3 pods fit on no node"))
		Expect(conditionsOf("once")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsNotFoundReason))
		Expect(listRequests()).To(ConsistOf(HaveField("Name", "retried")), "a failed request is not checked again")
	})

	It("fails a request whose PodTemplate is missing, and leaves other classes alone", func() {
		missing := &provisioningv1.ProvisioningRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "missing"},
			Spec: provisioningv1.ProvisioningRequestSpec{
				ProvisioningClassName: provisioningv1.CheckCapacityProvisioningClass,
				PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: "nowhere"}, Count: 1}},
			},
		}
		Expect(k8sClient.Create(ctx, missing)).To(Succeed())
		other := &provisioningv1.ProvisioningRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "other"},
			Spec: provisioningv1.ProvisioningRequestSpec{
				ProvisioningClassName: "queued.example.com",
				PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: "worker"}, Count: 1}},
			},
		}
		Expect(k8sClient.Create(ctx, other)).To(Succeed())

		Expect(listRequests()).To(BeEmpty())
		Expect(conditionsOf("missing")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.FailedToCreatePodsReason))
		Expect(conditionsOf("other")).To(BeEmpty())
	})

	It("keeps an atomic scale-up in progress in the status, and says how it ended", func() {
		request := createRequestOf(provisioningv1.BestEffortAtomicScaleUpProvisioningClass, "atomic", nil)
		Expect(listRequests()).To(ConsistOf(HaveField("Class", provisioning.AtomicScaleUp)))

		By("starting a scale-up")
		scaleUp := &provisioning.ScaleUp{Started: clock.Now().UTC().Truncate(time.Second), Groups: map[string]int{"MachineDeployment/ns/a": 2}}
		checker.Answer(ctx, []provisioning.Answer{{Namespace: namespace, Name: "atomic", UID: request.UID,
			Outcome: provisioning.ScalingUp, Message: "Adding 2 to MachineDeployment/ns/a for the 3 pods", ScaleUp: scaleUp}})
		Expect(conditionsOf("atomic")).To(haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.ScaleUpInProgressReason))
		Expect(statusOf("atomic").ProvisioningClassDetails).To(HaveKey(provisioningv1.ScaleUpDetail))
		Eventually(listRequests).Should(ConsistOf(HaveField("ScaleUp", Equal(scaleUp))), "a restarted manager reads it back")

		By("its nodes coming up")
		checker.Answer(ctx, []provisioning.Answer{{Namespace: namespace, Name: "atomic", UID: request.UID, Outcome: provisioning.Provisioned}})
		Expect(conditionsOf("atomic")).To(haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsProvisionedReason))
		Expect(statusOf("atomic").ProvisioningClassDetails).NotTo(HaveKey(provisioningv1.ScaleUpDetail))
		Eventually(listRequests).Should(ConsistOf(SatisfyAll(HaveField("Booked", true), HaveField("ScaleUp", BeNil()))))
	})

	It("fails an atomic request whose scale-up failed, or whose scale-up it can no longer read", func() {
		failed := createRequestOf(provisioningv1.BestEffortAtomicScaleUpProvisioningClass, "failed", nil)
		Expect(listRequests()).To(HaveLen(1))
		checker.Answer(ctx, []provisioning.Answer{{Namespace: namespace, Name: "failed", UID: failed.UID,
			Outcome: provisioning.ScaleUpFailed, Message: "Instance m-1 of MachineDeployment/ns/a failed: no capacity; the nodes it added were removed"}})
		Expect(conditionsOf("failed")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ScaleUpFailedReason))

		garbled := createRequestOf(provisioningv1.BestEffortAtomicScaleUpProvisioningClass, "garbled", nil)
		garbled.Status.ProvisioningClassDetails = map[string]provisioningv1.Detail{provisioningv1.ScaleUpDetail: "{"}
		Expect(k8sClient.Status().Update(ctx, garbled)).To(Succeed())
		Eventually(listRequests).Should(BeEmpty())
		Expect(conditionsOf("garbled")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ScaleUpFailedReason))
	})

	It("fails an atomic request that found no capacity within its ValidUntilSeconds", func() {
		createRequestOf(provisioningv1.BestEffortAtomicScaleUpProvisioningClass, "short", map[string]provisioningv1.Parameter{
			provisioningv1.ValidUntilSecondsParameter: "60"})
		Expect(listRequests()).To(HaveLen(1))

		clock.Step(time.Minute)
		Expect(listRequests()).To(BeEmpty())
		Expect(conditionsOf("short")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ExpiredReason))
	})
})
