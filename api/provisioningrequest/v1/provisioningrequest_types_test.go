package v1_test

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningrequestv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/schematest"
)

// newRequest returns a valid check-capacity request, changed by mutate.
func newRequest(mutate func(spec *provisioningrequestv1.ProvisioningRequestSpec)) *provisioningrequestv1.ProvisioningRequest {
	request := &provisioningrequestv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "request-", Namespace: metav1.NamespaceDefault},
		Spec: provisioningrequestv1.ProvisioningRequestSpec{
			ProvisioningClassName: provisioningrequestv1.CheckCapacityProvisioningClass,
			PodSets:               []provisioningrequestv1.PodSet{{PodTemplateRef: provisioningrequestv1.Reference{Name: "worker"}, Count: 2}},
		},
	}
	if mutate != nil {
		mutate(&request.Spec)
	}
	return request
}

func podSets(n int) []provisioningrequestv1.PodSet {
	sets := make([]provisioningrequestv1.PodSet, n)
	for i := range sets {
		sets[i] = provisioningrequestv1.PodSet{PodTemplateRef: provisioningrequestv1.Reference{Name: "worker"}, Count: 1}
	}
	return sets
}

var _ = Describe("ProvisioningRequest schema", func() {
	DescribeTable("accepts requests written for the upstream autoscaler unchanged",
		func(file string, want provisioningrequestv1.ProvisioningRequestSpec) {
			example := schematest.ReadExample(file)
			created := example.DeepCopy()
			schematest.CreateForTest(ctx, k8sClient, created)

			// The API server drops fields its schema does not know without an
			// error: a field named differently here than upstream would vanish.
			Expect(created.Object["spec"]).To(Equal(example.Object["spec"]), "the spec as written")

			request := &provisioningrequestv1.ProvisioningRequest{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(created), request)).To(Succeed())
			Expect(request.Spec).To(Equal(want))
		},
		Entry("check-capacity for two podSets", "check-capacity.yaml", provisioningrequestv1.ProvisioningRequestSpec{
			ProvisioningClassName: provisioningrequestv1.CheckCapacityProvisioningClass,
			PodSets: []provisioningrequestv1.PodSet{
				{PodTemplateRef: provisioningrequestv1.Reference{Name: "training-worker"}, Count: 4},
				{PodTemplateRef: provisioningrequestv1.Reference{Name: "training-ps"}, Count: 1},
			},
			Parameters: map[string]provisioningrequestv1.Parameter{provisioningrequestv1.NoRetryParameter: "true"},
		}),
		Entry("best-effort-atomic-scale-up for one podSet", "best-effort-atomic-scale-up.yaml", provisioningrequestv1.ProvisioningRequestSpec{
			ProvisioningClassName: provisioningrequestv1.BestEffortAtomicScaleUpProvisioningClass,
			PodSets:               []provisioningrequestv1.PodSet{{PodTemplateRef: provisioningrequestv1.Reference{Name: "batch-worker"}, Count: 8}},
			Parameters:            map[string]provisioningrequestv1.Parameter{provisioningrequestv1.ValidUntilSecondsParameter: "3600"},
		}),
	)

	It("accepts the classes of other provisioners", func() {
		schematest.CreateForTest(ctx, k8sClient, newRequest(func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.ProvisioningClassName = "queued-provisioning.gke.io"
		}))
	})

	DescribeTable("refuses invalid requests with a message that says what is wrong",
		func(mutate func(spec *provisioningrequestv1.ProvisioningRequestSpec), message string) {
			err := k8sClient.Create(ctx, newRequest(mutate))
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid: %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("no podSets", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets = nil
		}, "spec.podSets: Required value"),
		Entry("empty podSets", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets = []provisioningrequestv1.PodSet{}
		}, "spec.podSets: Invalid value: 0: spec.podSets in body should have at least 1 items"),
		Entry("more than 32 podSets", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets = podSets(33)
		}, "spec.podSets: Too many: 33: must have at most 32 items"),
		Entry("a podSet of no pods", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets[0].Count = 0
		}, "spec.podSets[0].count: Invalid value: 0: spec.podSets[0].count in body should be greater than or equal to 1"),
		Entry("a PodTemplate name that is no object name", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets[0].PodTemplateRef.Name = "Training_Worker"
		}, "spec.podSets[0].podTemplateRef.name: Invalid value: \"Training_Worker\": spec.podSets[0].podTemplateRef.name in body should match"),
		Entry("no class", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.ProvisioningClassName = ""
		}, "spec.provisioningClassName: Invalid value: \"\": spec.provisioningClassName in body should match"),
		Entry("a class that is no DNS subdomain", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.ProvisioningClassName = "Check-Capacity"
		}, "spec.provisioningClassName: Invalid value: \"Check-Capacity\": spec.provisioningClassName in body should match"),
		Entry("a parameter longer than 255 characters", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.Parameters = map[string]provisioningrequestv1.Parameter{"note": provisioningrequestv1.Parameter(strings.Repeat("a", 256))}
		}, "spec.parameters.note: Too long: may not be more than 255 bytes"),
	)

	DescribeTable("refuses changes to the spec, which is immutable",
		func(change func(spec *provisioningrequestv1.ProvisioningRequestSpec), message string) {
			request := newRequest(func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
				spec.Parameters = map[string]provisioningrequestv1.Parameter{provisioningrequestv1.NoRetryParameter: "true"}
			})
			schematest.CreateForTest(ctx, k8sClient, request)
			change(&request.Spec)
			err := k8sClient.Update(ctx, request)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "refused as invalid: %v", err)
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a podSet's count", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets[0].Count = 3
		}, "podSets are immutable: create a new ProvisioningRequest instead"),
		Entry("a podSet added", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.PodSets = append(spec.PodSets, provisioningrequestv1.PodSet{PodTemplateRef: provisioningrequestv1.Reference{Name: "ps"}, Count: 1})
		}, "podSets are immutable: create a new ProvisioningRequest instead"),
		Entry("the class", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.ProvisioningClassName = provisioningrequestv1.BestEffortAtomicScaleUpProvisioningClass
		}, "provisioningClassName is immutable: create a new ProvisioningRequest instead"),
		Entry("a parameter", func(spec *provisioningrequestv1.ProvisioningRequestSpec) {
			spec.Parameters[provisioningrequestv1.NoRetryParameter] = "false"
		}, "parameters are immutable: create a new ProvisioningRequest instead"),
	)

	It("takes changes to the metadata", func() {
		request := newRequest(nil)
		schematest.CreateForTest(ctx, k8sClient, request)
		request.Labels = map[string]string{"team": "training"}
		Expect(k8sClient.Update(ctx, request)).To(Succeed())
	})

	It("takes the autoscaler's answer through the status subresource only", func() {
		request := newRequest(nil)
		schematest.CreateForTest(ctx, k8sClient, request)
		generation := request.Generation
		status := provisioningrequestv1.ProvisioningRequestStatus{
			Conditions: []metav1.Condition{{
				Type: provisioningrequestv1.AcceptedCondition, Status: metav1.ConditionTrue,
				Reason: provisioningrequestv1.AcceptedReason, Message: "accepted", LastTransitionTime: metav1.Now(),
			}, {
				Type: provisioningrequestv1.ProvisionedCondition, Status: metav1.ConditionTrue,
				Reason: provisioningrequestv1.CapacityIsFoundReason, Message: "capacity is found", LastTransitionTime: metav1.Now(),
			}},
			ProvisioningClassDetails: map[string]provisioningrequestv1.Detail{"note": "booked"},
		}

		By("ignoring a status written with the object")
		request.Status = status
		Expect(k8sClient.Update(ctx, request)).To(Succeed())
		Expect(request.Status).To(BeZero())

		By("keeping a status written through the subresource")
		request.Status = status
		Expect(k8sClient.Status().Update(ctx, request)).To(Succeed())
		stored := &provisioningrequestv1.ProvisioningRequest{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(request), stored)).To(Succeed())
		Expect(stored.Status.Conditions).To(HaveLen(2))
		Expect(stored.Status.Conditions[1]).To(And(
			HaveField("Type", provisioningrequestv1.ProvisionedCondition),
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", provisioningrequestv1.CapacityIsFoundReason),
		))
		Expect(stored.Status.ProvisioningClassDetails).To(Equal(status.ProvisioningClassDetails))
		Expect(stored.Generation).To(Equal(generation), "a status write is no change of the spec")
	})

	It("is found by kubectl as provisioningrequests, provreq and provreqs, in a namespace", func() {
		resources, err := clientset.Discovery().ServerResourcesForGroupVersion(provisioningrequestv1.GroupVersion.String())
		Expect(err).NotTo(HaveOccurred())
		Expect(resources.APIResources).To(ContainElement(And(
			HaveField("Name", "provisioningrequests"),
			HaveField("Kind", "ProvisioningRequest"),
			HaveField("ShortNames", []string{"provreq", "provreqs"}),
			HaveField("Namespaced", true),
		)))
		Expect(resources.APIResources).To(ContainElement(HaveField("Name", "provisioningrequests/status")))
	})

	It("serves the deprecated v1beta1 with the same schema, for the clients and the stored objects of upstream's older CRD", func() {
		schematest.ExpectServedAsOlderVersion(ctx, k8sClient, clientset, "check-capacity.yaml", "autoscaling.x-k8s.io/v1beta1")
	})
})
