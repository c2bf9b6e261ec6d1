package controller

import (
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	gomegatypes "github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

var _ = Describe("A DryRun ClusterAutoscaler", func() {
	It("publishes what it would do, changes nothing, and lives beside the Active one of its Cluster until it becomes Active itself", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		group, nodeSelector := createGroupAtZero(fixture, "dryrun.example.com/cluster")
		shadow := createNamedClusterAutoscaler(fixture, "shadow")
		DeferCleanup(deleteClusterAutoscaler, shadow)
		setMode(shadow, autoscalingv1alpha1.DryRunMode)
		expectRunning(shadow)
		groupID := "MachineDeployment/" + fixture.Namespace + "/md-0"

		By("deciding a scale-up for a pending pod, without carrying it out")
		pendingPod(fixture.Namespace, nodeSelector)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, shadow)
			g.Expect(decisionsIn(fixture.Namespace, ca)).To(HaveExactElements(MatchFields(IgnoreExtras, Fields{
				"Kind":       Equal(autoscalingv1alpha1.ScaleUpDecision),
				"NodeGroups": Equal([]autoscalingv1alpha1.NodeGroupDelta{{ID: groupID, Delta: 1}}),
				"Pods":       Equal([]string{fixture.Namespace + "/pending"}),
				"PodCount":   BeEquivalentTo(1),
			})))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.DryRunReason))
		}, waitTimeout).Should(Succeed())
		expectEvent(fixture.Namespace, shadow, corev1.EventTypeNormal, autoscalingv1alpha1.WouldScaleUpReason, Equal("Would scale up ["+groupID+" +1] for 1 pending pod(s)"))
		expectAnotherLoop(shadow)
		Expect(get(group).Spec.Replicas).To(HaveValue(BeZero()), "the group keeps its size")
		Expect(decisionsIn(fixture.Namespace, getClusterAutoscaler(Default, shadow))).To(HaveLen(1), "the same decision is not published again")

		By("not refusing an Active ClusterAutoscaler of the same Cluster, though older")
		active := createNamedClusterAutoscaler(fixture, "active")
		DeferCleanup(deleteClusterAutoscaler, active)
		expectRunning(active)
		Eventually(func(g Gomega) {
			g.Expect(get(group).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)), "the Active one scales the group up")
		}, waitTimeout).Should(Succeed())
		expectAnotherLoop(shadow)
		Expect(conditions.Get(getClusterAutoscaler(Default, shadow), autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))

		By("owning the Cluster once Active, with no restart: the younger one is refused")
		engine := reconciler.engines.get(shadow)
		setMode(shadow, autoscalingv1alpha1.ActiveMode)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, active)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
		}, waitTimeout).Should(Succeed())
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, shadow)
			g.Expect(ca.Status.DryRunDecisions).To(BeEmpty())
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition).Reason).NotTo(Equal(autoscalingv1alpha1.DryRunReason))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(shadow)).To(BeIdenticalTo(engine))
		Expect(reconciler.engines.get(active)).To(BeNil())

		By("saying what becomes of what it placed when it runs dry again")
		setMode(shadow, autoscalingv1alpha1.DryRunMode)
		expectEvent(fixture.Namespace, shadow, corev1.EventTypeNormal, autoscalingv1alpha1.DryRunReason, Equal("Cluster "+fixture.Namespace+"/"+fixture.Cluster.Name+
			" is no longer autoscaled, only planned for: the drains in progress are given back; the nodes already handed to their groups keep their taint while their Machines go, and are given back if they are still there after 5m0s"))
		Expect(reconciler.engines.get(shadow)).To(BeIdenticalTo(engine), "the same engine goes on, and follows what it handed over")
	})

	It("publishes the answer it would give a ProvisioningRequest once", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		createGroupAtZero(fixture, "dryrun-answers.example.com/cluster")
		// Not found, and tried again: the Active engines of the other specs,
		// which serve this API server too, answer the request as well, but
		// do not end it. That DryRun gives no answer is proven without them
		// (TestADryRunLoopWritesNothingButItsOwnStatus).
		createRequestForAPodThatFitsNowhere(fixture.Namespace, "once", provisioningv1.CheckCapacityProvisioningClass)
		shadow := createNamedClusterAutoscaler(fixture, "shadow")
		DeferCleanup(deleteClusterAutoscaler, shadow)
		setMode(shadow, autoscalingv1alpha1.DryRunMode)
		requestName := fixture.Namespace + "/once"

		Eventually(func(g Gomega) {
			g.Expect(decisionsIn(fixture.Namespace, getClusterAutoscaler(g, shadow))).To(HaveExactElements(MatchFields(IgnoreExtras, Fields{
				"Kind":                Equal(autoscalingv1alpha1.AnswerDecision),
				"ProvisioningRequest": Equal(requestName),
				"Answer": PointTo(MatchFields(IgnoreExtras, Fields{
					"ConditionType": Equal(provisioningv1.ProvisionedCondition),
					"Status":        Equal(metav1.ConditionFalse),
					"Reason":        Equal(provisioningv1.CapacityIsNotFoundReason),
					"Message":       Equal("1 of the 1 pods fit on no node of the cluster as it is"),
				})),
			})))
		}, waitTimeout).Should(Succeed())
		// The same event tells the answers to the other specs' requests.
		expectEvent(fixture.Namespace, shadow, corev1.EventTypeNormal, autoscalingv1alpha1.WouldAnswerProvisioningRequestReason,
			ContainSubstring("Would set Provisioned=False (CapacityIsNotFound) on ProvisioningRequest "+requestName+": 1 of the 1 pods fit on no node of the cluster as it is"))
		expectAnotherLoop(shadow)
		Expect(decisionsIn(fixture.Namespace, getClusterAutoscaler(Default, shadow))).To(HaveLen(1), "the same answer is not published again")
	})
})

// setMode sets the mode of a ClusterAutoscaler.
func setMode(key types.NamespacedName, mode autoscalingv1alpha1.Mode) {
	GinkgoHelper()
	ca := getClusterAutoscaler(Default, key)
	original := ca.DeepCopy()
	ca.Spec.Mode = mode
	Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())
}

// expectEvent waits for an event of type eventType and reason on a
// ClusterAutoscaler, whose note matches note.
func expectEvent(namespace string, regarding types.NamespacedName, eventType, reason string, note gomegatypes.GomegaMatcher) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
			"Type":      Equal(eventType),
			"Reason":    Equal(reason),
			"Regarding": MatchFields(IgnoreExtras, Fields{"Kind": Equal("ClusterAutoscaler"), "Name": Equal(regarding.Name)}),
			"Note":      note,
		})))
	}, waitTimeout).Should(Succeed())
}

// decisionsIn are the DryRun decisions of ca but the answers to the
// requests of other namespaces: every engine of this suite serves the one
// API server, and so the requests of every spec.
func decisionsIn(namespace string, ca *autoscalingv1alpha1.ClusterAutoscaler) []autoscalingv1alpha1.DryRunDecision {
	var decisions []autoscalingv1alpha1.DryRunDecision
	for _, decision := range ca.Status.DryRunDecisions {
		if decision.ProvisioningRequest == "" || strings.HasPrefix(decision.ProvisioningRequest, namespace+"/") {
			decisions = append(decisions, decision)
		}
	}
	return decisions
}

// createRequestForAPodThatFitsNowhere creates a ProvisioningRequest of the
// class for one pod of 1,000 cpus, which no node and no group can take,
// and its PodTemplate.
func createRequestForAPodThatFitsNowhere(namespace, name, class string) *provisioningv1.ProvisioningRequest {
	GinkgoHelper()
	template := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name + "-pod"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000")}}}}}}}
	Expect(k8sClient.Create(ctx, template)).To(Succeed())
	request := &provisioningv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: provisioningv1.ProvisioningRequestSpec{
			ProvisioningClassName: class,
			PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: template.Name}, Count: 1}},
		},
	}
	Expect(k8sClient.Create(ctx, request)).To(Succeed())
	return request
}
