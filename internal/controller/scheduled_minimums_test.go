package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

var _ = Describe("Scheduled minimums", func() {
	It("scale a group up to the minimum of an open window, show it on the group's row, and name a window the manager cannot read", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		group, _ := createGroupAtZero(fixture, "minimums.example.com/cluster")
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		groupID := scalable.ID(scalable.KindMachineDeployment, fixture.Namespace, group.Name)

		ca := getClusterAutoscaler(Default, key)
		original := ca.DeepCopy()
		ca.Spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{
			// A window that opens every minute and stays open an hour is
			// always open.
			{Name: "always", NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{group.Name}},
				Schedule: "* * * * *", Duration: metav1.Duration{Duration: time.Hour}, MinSize: 2},
			{Name: "mars", NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{group.Name}},
				Schedule: "* * * * *", TimeZone: "Mars/Olympus_Mons", Duration: metav1.Duration{Duration: time.Hour}, MinSize: 3},
		}
		Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())

		Eventually(func(g Gomega) {
			g.Expect(get(group).Spec.Replicas).To(HaveValue(BeEquivalentTo(2)), "scaled up to the window's minimum")
		}, waitTimeout).Should(Succeed())
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(ca.Status.NodeGroups).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"ID": Equal(groupID), "MinSize": HaveValue(BeEquivalentTo(2)),
				"ScheduledMinimum": PointTo(MatchFields(IgnoreExtras, Fields{
					"AnnotatedMinSize": BeEquivalentTo(0),
					"Active":           ConsistOf(MatchFields(IgnoreExtras, Fields{"Name": Equal("always"), "MinSize": BeEquivalentTo(2)})),
				})),
			})))
			condition := conditions.Get(ca, autoscalingv1alpha1.ScheduledMinimumsValidCondition)
			g.Expect(condition).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.InvalidScheduledMinimumReason))
			g.Expect(condition.Message).To(ContainSubstring(`scheduled minimum mars is ignored: unknown time zone "Mars/Olympus_Mons"`))
		}, waitTimeout).Should(Succeed())
		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeNormal),
				"Reason":    Equal(autoscalingv1alpha1.ScheduledMinimumWindowOpenedReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Kind": Equal("MachineDeployment"), "Name": Equal(group.Name)}),
				"Note":      ContainSubstring("Scheduled minimum always sets the minimum of " + groupID + " to 2"),
			})))
		}, waitTimeout).Should(Succeed())
	})
})
