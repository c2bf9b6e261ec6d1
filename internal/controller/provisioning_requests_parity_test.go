package controller

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

// The situations of the upstream autoscaler's own tests of the
// ProvisioningRequest conditions (processors/provreq/processor_test.go,
// provisioningrequest/checkcapacity/provisioningclass.go), each with the
// condition a user of the upstream autoscaler sees there.
var _ = Describe("ProvisioningRequest conditions as upstream sets them", func() {
	var (
		namespace string
		clock     *clocktesting.FakeClock
		requests  *provisioningRequests
	)
	newLister := func() *provisioningRequests {
		return newProvisioningRequests(client.NewNamespacedClient(k8sClient, namespace),
			func(context.Context) (client.Client, error) { return k8sClient, nil }, clock)
	}
	create := func(class, name string, parameters map[string]provisioningv1.Parameter) *provisioningv1.ProvisioningRequest {
		GinkgoHelper()
		request := &provisioningv1.ProvisioningRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
			Spec: provisioningv1.ProvisioningRequestSpec{
				ProvisioningClassName: class,
				PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: "worker"}, Count: 2}},
				Parameters:            parameters,
			},
		}
		Expect(k8sClient.Create(ctx, request)).To(Succeed())
		return request
	}
	get := func(name string) (*provisioningv1.ProvisioningRequest, error) {
		request := &provisioningv1.ProvisioningRequest{}
		return request, k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, request)
	}
	conditionsOf := func(name string) []metav1.Condition {
		GinkgoHelper()
		request, err := get(name)
		Expect(err).NotTo(HaveOccurred())
		return request.Status.Conditions
	}
	// list lists as the engine does and, as its Active actuation, writes
	// the ends of the requests it no longer serves.
	list := func() []provisioning.Request {
		GinkgoHelper()
		listed, ended, err := requests.ListRequests(ctx)
		Expect(err).NotTo(HaveOccurred())
		requests.Answer(ctx, ended)
		return listed
	}
	answer := func(request *provisioningv1.ProvisioningRequest, outcome provisioning.Outcome) {
		requests.Answer(ctx, []provisioning.Answer{{Namespace: namespace, Name: request.Name, UID: request.UID, Outcome: outcome, Message: string(outcome)}})
	}
	haveCondition := func(conditionType string, status metav1.ConditionStatus, reason string) OmegaMatcher {
		return ContainElement(SatisfyAll(HaveField("Type", conditionType), HaveField("Status", status), HaveField("Reason", reason)))
	}

	BeforeEach(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "provreq-parity-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		clock = clocktesting.NewFakeClock(time.Now())
		requests = newLister()
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "worker"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}})).To(Succeed())
	})

	It("says what Accepted means, as upstream's AcceptedMsg does", func() {
		request := create(provisioningv1.CheckCapacityProvisioningClass, "job", nil)
		Expect(list()).To(HaveLen(1))
		answer(request, provisioning.NotFound)

		accepted := meta.FindStatusCondition(conditionsOf("job"), provisioningv1.AcceptedCondition)
		Expect(accepted).To(HaveValue(SatisfyAll(HaveField("Status", metav1.ConditionTrue), HaveField("Reason", provisioningv1.AcceptedReason))))
		Expect(accepted.Message).NotTo(BeEmpty())
	})

	It("retries an atomic request that found no capacity even with noRetry, which upstream reads for check-capacity only", func() {
		atomic := create(provisioningv1.BestEffortAtomicScaleUpProvisioningClass, "atomic", map[string]provisioningv1.Parameter{provisioningv1.NoRetryParameter: "true"})
		Expect(list()).To(HaveLen(1))
		answer(atomic, provisioning.NotFound)

		Expect(conditionsOf("atomic")).To(haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason))
		Expect(meta.FindStatusCondition(conditionsOf("atomic"), provisioningv1.FailedCondition)).To(BeNil())
		Expect(list()).To(ConsistOf(HaveField("Name", "atomic")), "it is tried again")
	})

	It("fails a booked request whose pods can no longer be built with FailedToBookCapacity", func() {
		request := create(provisioningv1.CheckCapacityProvisioningClass, "booked", nil)
		Expect(list()).To(HaveLen(1))
		answer(request, provisioning.Found)
		Expect(k8sClient.Delete(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "worker"}})).To(Succeed())

		// A restarted manager reads the request's pods anew.
		requests = newLister()
		Eventually(list).Should(BeEmpty())
		Expect(conditionsOf("booked")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.FailedToBookCapacityReason))
	})

	It("deletes a request 7 days after it was provisioned or failed, and no other", func() {
		booked := create(provisioningv1.CheckCapacityProvisioningClass, "booked", nil)
		failed := create(provisioningv1.CheckCapacityProvisioningClass, "failed", map[string]provisioningv1.Parameter{provisioningv1.NoRetryParameter: "true"})
		Expect(list()).To(HaveLen(2))
		answer(booked, provisioning.Found)
		answer(failed, provisioning.NotFound)
		Expect(conditionsOf("failed")).To(haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsNotFoundReason))
		// Another autoscaler's request, failed as long ago: not ours to delete.
		other := create("queued.example.com", "other", nil)
		other.Status.Conditions = []metav1.Condition{{Type: provisioningv1.FailedCondition, Status: metav1.ConditionTrue, Reason: "Failed",
			LastTransitionTime: metav1.NewTime(clock.Now())}}
		Expect(k8sClient.Status().Update(ctx, other)).To(Succeed())

		clock.Step(bookingTime)
		Expect(list()).To(BeEmpty())
		Expect(conditionsOf("booked")).To(haveCondition(provisioningv1.BookingExpiredCondition, metav1.ConditionTrue, provisioningv1.CapacityReservationTimeExpiredReason))
		fresh := create(provisioningv1.CheckCapacityProvisioningClass, "fresh", nil)
		Expect(list()).To(HaveLen(1))
		answer(fresh, provisioning.NotFound)

		clock.Step(terminalRequestTTL - bookingTime - time.Minute)
		Expect(list()).To(ConsistOf(HaveField("Name", "fresh")))
		Expect(get("booked")).Error().NotTo(HaveOccurred(), "not yet")
		Expect(get("failed")).Error().NotTo(HaveOccurred(), "not yet")

		clock.Step(2 * time.Minute)
		list()
		_, err := get("booked")
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "7 days after Provisioned=True: %v", err)
		_, err = get("failed")
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "7 days after Failed=True: %v", err)
		Expect(get("other")).Error().NotTo(HaveOccurred())
		// Created 7 days ago, answered since: it expires, and stays.
		Expect(conditionsOf("fresh")).To(SatisfyAll(
			haveCondition(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason),
			haveCondition(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ExpiredReason)))
	})
})
