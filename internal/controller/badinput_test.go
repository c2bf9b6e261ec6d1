package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

var _ = Describe("Bad input", func() {
	It("reports a bad annotation on its group's row and MachineDeployment or MachinePool, and keeps autoscaling the groups", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		fixture.Create(ctx,
			fixture.MachineDeployment("max-only", 0, map[string]string{scalable.MaxSizeAnnotation: "5"}),
			fixture.MachineDeployment("bad-hint", 0, map[string]string{scalable.MaxSizeAnnotation: "3", template.CPUAnnotation: "abc"}),
			fixture.MachineDeployment("bad-size", 0, map[string]string{scalable.MinSizeAnnotation: "one", scalable.MaxSizeAnnotation: "3"}),
			fixture.MachinePool("bad-pool", 0, map[string]string{scalable.MinSizeAnnotation: "4", scalable.MaxSizeAnnotation: "3"}),
		)
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		groupID := func(name string) string { return scalable.ID(scalable.KindMachineDeployment, fixture.Namespace, name) }

		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(ca.Status.NodeGroupCount).To(BeEquivalentTo(2), "the group with a bad hint is still autoscaled")
			g.Expect(ca.Status.NodeGroups).To(ConsistOf(
				MatchFields(IgnoreExtras, Fields{
					"ID": Equal(groupID("max-only")), "MinSize": HaveValue(BeEquivalentTo(0)), "MaxSize": HaveValue(BeEquivalentTo(5)), "Problem": BeEmpty(),
				}),
				MatchFields(IgnoreExtras, Fields{
					"ID": Equal(groupID("bad-hint")), "MaxSize": HaveValue(BeEquivalentTo(3)),
					"Problem": And(ContainSubstring(template.CPUAnnotation), ContainSubstring(`"abc"`), ContainSubstring("cannot scale up from zero")),
				}),
				MatchFields(IgnoreExtras, Fields{
					"ID": Equal(groupID("bad-size")), "MaxSize": BeNil(), "Problem": ContainSubstring(scalable.MinSizeAnnotation),
				}),
				MatchFields(IgnoreExtras, Fields{
					"ID":      Equal(scalable.ID(scalable.KindMachinePool, fixture.Namespace, "bad-pool")),
					"MaxSize": BeNil(), "Problem": ContainSubstring(scalable.MinSizeAnnotation),
				}),
			))
		}, waitTimeout).Should(Succeed())

		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal("InvalidAnnotation"),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Kind": Equal("MachineDeployment"), "Name": Equal("bad-hint")}),
				"Note":      ContainSubstring(template.CPUAnnotation),
			})))
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal("InvalidAnnotation"),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Kind": Equal("MachinePool"), "Name": Equal("bad-pool")}),
				"Note":      ContainSubstring(scalable.MinSizeAnnotation),
			})))
		}, waitTimeout).Should(Succeed())
	})

	It("goes on with the last good configuration while the engine refuses a new one, and says so", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)

		By("applying a good configuration")
		ca := getClusterAutoscaler(Default, key)
		original := ca.DeepCopy()
		ca.Spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		ca.Spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{{Priority: 10, NodeGroupIDPatterns: []string{"MachineDeployment/.*/spot-.*"}}}
		Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())
		good := ca.Generation
		expectConfigurationApplied(key, good)
		engine := reconciler.engines.get(key).engine
		goodConfig := engine.Config()
		Expect(goodConfig.ExpanderPriorities).To(HaveKey(BeEquivalentTo(10)))

		By("storing a pattern the engine refuses, as an earlier version of the CRD accepted it, along with another change")
		withoutPatternValidation(func() error {
			ca := getClusterAutoscaler(Default, key)
			original := ca.DeepCopy()
			ca.Spec.ExpanderPriorities[0].NodeGroupIDPatterns = []string{"MachineDeployment/.*/(spot"}
			ca.Spec.MaxNodesPerScaleUp = ptr.To[int32](1)
			return k8sClient.Patch(ctx, ca, client.MergeFrom(original))
		})
		bad := getClusterAutoscaler(Default, key).Generation
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			applied := conditions.Get(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)
			g.Expect(applied).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidConfigurationReason))
			g.Expect(applied.Message).To(And(ContainSubstring("missing closing )"), ContainSubstring("generation %d", bad), ContainSubstring("goes on with generation %d", good)))
			g.Expect(ca.Status.ObservedGeneration).To(Equal(good))
			g.Expect(ca.Status.LastLoopTime).NotTo(BeNil())
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(key).engine).To(BeIdenticalTo(engine))
		Expect(engine.Config()).To(Equal(goodConfig), "no part of the refused configuration is applied")
		expectAnotherLoop(key)
		ca = getClusterAutoscaler(Default, key)
		Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))

		By("fixing the pattern")
		original = ca.DeepCopy()
		ca.Spec.ExpanderPriorities[0].NodeGroupIDPatterns = []string{"MachineDeployment/.*/(spot|preemptible)-.*"}
		Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())
		expectConfigurationApplied(key, ca.Generation)
		Expect(engine.Config().MaxNodesPerScaleUp).To(Equal(1))
		Expect(engine.Config().ExpanderPriorities).To(Equal(map[int32][]string{10: {"MachineDeployment/.*/(spot|preemptible)-.*"}}))
	})
})

// expectConfigurationApplied waits until the engine runs with generation.
func expectConfigurationApplied(key types.NamespacedName, generation int64) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ca := getClusterAutoscaler(g, key)
		g.Expect(conditions.Get(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason))
		g.Expect(ca.Status.ObservedGeneration).To(Equal(generation))
	}, waitTimeout).Should(Succeed())
}

// withoutPatternValidation runs write while the ClusterAutoscaler CRD does
// not validate node group patterns, as before they were validated at
// admission, and puts the validation back: the object keeps what write
// stored, as it would across an upgrade.
func withoutPatternValidation(write func() error) {
	GinkgoHelper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	key := client.ObjectKey{Name: "clusterautoscalers." + autoscalingv1alpha1.GroupVersion.Group}
	Expect(k8sClient.Get(ctx, key, crd)).To(Succeed())
	validated := crd.DeepCopy()
	// The Properties maps are shared with crd.
	specProperties := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	priorities := specProperties["expanderPriorities"]
	Expect(priorities.XValidations).NotTo(BeEmpty())
	priorities.XValidations = nil
	specProperties["expanderPriorities"] = priorities
	Expect(k8sClient.Update(ctx, crd)).To(Succeed())
	restore := func() {
		Expect(k8sClient.Get(ctx, key, crd)).To(Succeed())
		crd.Spec = validated.Spec
		Expect(k8sClient.Update(ctx, crd)).To(Succeed())
	}
	// Also when write never succeeds.
	DeferCleanup(restore)

	// The API server takes the new schema a moment later.
	Eventually(write, waitTimeout).Should(Succeed())

	restore()
	invalid := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", GenerateName: "invalid-"},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "none", ExpanderPriorities: []autoscalingv1alpha1.ExpanderPriority{
			{Priority: 1, NodeGroupIDPatterns: []string{"("}},
		}},
	}
	Eventually(func() error {
		return k8sClient.Create(ctx, invalid.DeepCopy(), client.DryRunAll)
	}, waitTimeout).Should(MatchError(ContainSubstring("nodeGroupIDPatterns must be regular expressions")), "the validation is back")
}

func deleteClusterAutoscaler(key types.NamespacedName) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}))).To(Succeed())
	expectGone(key)
}
