package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var _ = Describe("Two ClusterAutoscalers for one Cluster", Ordered, func() {
	var (
		fixture *testenv.Fixture
		// first owns the Cluster; second is created after it.
		first, second types.NamespacedName
		firstEngine   *runningEngine
	)

	BeforeAll(func() {
		fixture = newWorkloadCluster(env.Config.Host)
		first = createNamedClusterAutoscaler(fixture, "first")
		expectRunning(first)
		firstEngine = reconciler.engines.get(first)
		Expect(firstEngine).NotTo(BeNil())
		second = createNamedClusterAutoscaler(fixture, "second")
	})

	It("refuses the second, which runs no engine, and leaves the first alone", func() {
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, second)
			g.Expect(ca.Finalizers).To(ContainElement(CleanupFinalizer))
			ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
			g.Expect(ready.Message).To(ContainSubstring("ClusterAutoscaler first already autoscales Cluster " + fixture.Namespace + "/workload"))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
			g.Expect(ca.Status.LastLoopTime).To(BeNil())
			g.Expect(ca.Status.Nodes).To(BeZero())
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(second)).To(BeNil())

		By("warning on the second, naming the first")
		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal(autoscalingv1alpha1.ClusterAlreadyAutoscaledReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Name": Equal(second.Name)}),
				"Note":      ContainSubstring("ClusterAutoscaler " + first.Name + " already autoscales"),
			})))
		}, waitTimeout).Should(Succeed())

		By("looping on with the first's engine")
		expectAnotherLoop(first)
		Expect(reconciler.engines.get(first)).To(BeIdenticalTo(firstEngine))
		Expect(conditions.Get(getClusterAutoscaler(Default, first), autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
	})

	It("leaves the owner's marks when a refused ClusterAutoscaler is deleted", func() {
		third := createNamedClusterAutoscaler(fixture, "third")
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, third)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
		}, waitTimeout).Should(Succeed())

		By("leaving marks as the owner's scale-down would")
		node := fixture.Node("unneeded", "test:///"+fixture.Namespace+"/unneeded")
		machineSet := fixture.MachineSet("steady", 1, nil, nil)
		fixture.Create(ctx, node, machineSet)
		machine := fixture.Machine("marked", machineSet)
		fixture.Create(ctx, machine)
		taintNode(node, nodefacts.DeletionCandidateTaint)
		markForDeletion(machine)

		deleteClusterAutoscaler(third)
		Expect(get(node).Spec.Taints).To(ContainElement(HaveField("Key", nodefacts.DeletionCandidateTaint)))
		Expect(get(machine).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(reconciler.engines.get(first)).To(BeIdenticalTo(firstEngine))
	})

	It("hands the Cluster over to the next ClusterAutoscaler when the owner is deleted", func() {
		deleteClusterAutoscaler(first)
		Expect(reconciler.engines.get(first)).To(BeNil())

		// The manager's sync period is ten hours: only the watch of the
		// deletion explains a take-over.
		expectRunning(second)
		Expect(reconciler.engines.get(second)).NotTo(BeNil())
		ca := getClusterAutoscaler(Default, second)
		Expect(conditions.Get(ca, autoscalingv1alpha1.ConfigurationAppliedCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason))

		deleteClusterAutoscaler(second)
		Expect(reconciler.engines.get(second)).To(BeNil())
	})
})

// expectRunning waits until the ClusterAutoscaler's engine has completed a loop.
func expectRunning(key types.NamespacedName) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ca := getClusterAutoscaler(g, key)
		g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
		g.Expect(ca.Status.LastLoopTime).NotTo(BeNil())
	}, waitTimeout).Should(Succeed())
}

func TestClusterOwner(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 23, 3, 0, 0, 0, time.UTC))
	earlier, later := metav1.NewTime(created.Add(-time.Second)), metav1.NewTime(created.Add(time.Second))
	clusterAutoscaler := func(name string, creation metav1.Time, mutate ...func(*autoscalingv1alpha1.ClusterAutoscaler)) *autoscalingv1alpha1.ClusterAutoscaler {
		ca := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: creation},
			Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "cluster"},
		}
		for _, m := range mutate {
			m(ca)
		}
		return ca
	}
	dryRun := func(ca *autoscalingv1alpha1.ClusterAutoscaler) { ca.Spec.Mode = autoscalingv1alpha1.DryRunMode }
	tests := []struct {
		name   string
		others []*autoscalingv1alpha1.ClusterAutoscaler
		want   string
	}{
		{name: "alone", want: "b"},
		{name: "older", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier)}, want: "z"},
		{name: "newer", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("a", later)}, want: "b"},
		{name: "same second, first name", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("a", created)}, want: "a"},
		{name: "same second, later name", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("c", created)}, want: "b"},
		{name: "older, being deleted", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.DeletionTimestamp = &created
			ca.Finalizers = []string{CleanupFinalizer}
		})}, want: "z"},
		{name: "older, served by another manager", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.Labels = map[string]string{clusterv1.WatchLabel: "theirs"}
		})}, want: "z"},
		{name: "older, of another Cluster", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.Spec.ClusterName = "other"
		})}, want: "b"},
		{name: "older, in DryRun mode", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier, dryRun)}, want: "b"},
		{name: "older, Active beside an older in DryRun mode", others: []*autoscalingv1alpha1.ClusterAutoscaler{
			clusterAutoscaler("z", earlier), clusterAutoscaler("y", metav1.NewTime(earlier.Add(-time.Second)), dryRun),
		}, want: "z"},
		{name: "older, in another namespace", others: []*autoscalingv1alpha1.ClusterAutoscaler{clusterAutoscaler("z", earlier, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.Namespace = "other"
		})}, want: "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
			ca := clusterAutoscaler("b", created)
			objects := []client.Object{ca}
			for _, other := range tt.others {
				objects = append(objects, other)
			}
			r := &ClusterAutoscalerReconciler{
				Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
					WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build(),
				WatchFilterValue: "mine",
			}

			owner, err := r.clusterOwner(context.Background(), ca)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(owner.Name).To(Equal(tt.want))
		})
	}
}
