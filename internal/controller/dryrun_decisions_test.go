package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

func TestDryRunDecisionsArePublishedOnceAndBounded(t *testing.T) {
	g := NewWithT(t)
	recorder := record.NewFakeRecorder(200)
	r := &ClusterAutoscalerReconciler{Recorder: recorder}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	decision := func(i int) autoscaler.Decision {
		return autoscaler.Decision{
			Kind: autoscaler.ScaleUpDecision, Time: start.Add(time.Duration(i) * time.Second),
			Groups: []autoscaler.GroupDelta{{ID: "MachineDeployment/ns/md-0", Delta: i + 1}},
			Pods:   []types.NamespacedName{{Namespace: "ns", Name: fmt.Sprintf("web-%d", i)}},
		}
	}
	loop := autoscaler.Status{DryRun: true, Decisions: []autoscaler.Decision{decision(0), decision(1)}}

	r.publishDecisions(ca, loop)
	r.publishDecisions(ca, loop)

	g.Expect(ca.Status.DryRunDecisions).To(HaveLen(2), "a reconcile that sees the same loop again adds nothing")
	g.Expect(ca.Status.DryRunDecisions[1]).To(Equal(autoscalingv1alpha1.DryRunDecision{
		Time: *statusTime(start.Add(time.Second)), Kind: autoscalingv1alpha1.ScaleUpDecision,
		NodeGroups: []autoscalingv1alpha1.NodeGroupDelta{{ID: "MachineDeployment/ns/md-0", Delta: 2}},
		Pods:       []string{"ns/web-1"}, PodCount: 1,
	}))
	g.Expect(recorder.Events).To(HaveLen(1), "the new decisions of a kind are told together")
	g.Expect(<-recorder.Events).To(Equal("Normal WouldScaleUp Would scale up [MachineDeployment/ns/md-0 +1] for 1 pending pod(s); " +
		"Would scale up [MachineDeployment/ns/md-0 +2] for 1 pending pod(s)"))

	// Reconciles that skipped loops keep the last 50, as the engine does.
	loop.Decisions = nil
	for i := range 60 {
		loop.Decisions = append(loop.Decisions, decision(i))
	}
	r.publishDecisions(ca, loop)
	g.Expect(ca.Status.DryRunDecisions).To(HaveLen(50))
	g.Expect(ca.Status.DryRunDecisions[49].Time.Time).To(Equal(start.Add(59 * time.Second)))
	g.Expect(ca.Status.DryRunDecisions[0].Time.Time).To(Equal(start.Add(10 * time.Second)))

	r.publishDecisions(ca, autoscaler.Status{})
	g.Expect(ca.Status.DryRunDecisions).To(BeEmpty(), "an Active loop empties the list")
}

func TestDryRunAnswersToManyRequestsLeaveRoomForScaleUpsAndScaleDowns(t *testing.T) {
	g := NewWithT(t)
	r := &ClusterAutoscalerReconciler{Recorder: record.NewFakeRecorder(200)}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	scaleUp := autoscaler.Decision{Kind: autoscaler.ScaleUpDecision, Time: start,
		Groups: []autoscaler.GroupDelta{{ID: "MachineDeployment/ns/md-0", Delta: 1}}, Pods: []types.NamespacedName{{Namespace: "ns", Name: "web"}}}
	loop := autoscaler.Status{DryRun: true, Decisions: []autoscaler.Decision{scaleUp}}
	for i := range 60 {
		loop.Decisions = append(loop.Decisions, autoscaler.Decision{Kind: autoscaler.AnswerDecision, Time: start, Request: fmt.Sprintf("ns/job-%d", i),
			Answer: &provisioning.Condition{Type: provisioningv1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: provisioningv1.CapacityIsFoundReason}})
	}

	r.publishDecisions(ca, loop)

	kinds := map[autoscalingv1alpha1.DecisionKind]int{}
	for _, decision := range ca.Status.DryRunDecisions {
		kinds[decision.Kind]++
	}
	g.Expect(kinds).To(Equal(map[autoscalingv1alpha1.DecisionKind]int{autoscalingv1alpha1.ScaleUpDecision: 1, autoscalingv1alpha1.AnswerDecision: 25}),
		"the scale-up stays, with the last 25 answers")
	g.Expect(ca.Status.DryRunDecisions[len(ca.Status.DryRunDecisions)-1].ProvisioningRequest).To(Equal("ns/job-59"))
}

func TestDryRunAnswersNameTheRequestAndTheCondition(t *testing.T) {
	g := NewWithT(t)
	recorder := record.NewFakeRecorder(10)
	r := &ClusterAutoscalerReconciler{Recorder: recorder}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	start := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	answer := autoscaler.Decision{
		Kind: autoscaler.AnswerDecision, Time: start, Request: "ns/job",
		Answer: &provisioning.Condition{Type: provisioningv1.ProvisionedCondition, Status: metav1.ConditionTrue,
			Reason: provisioningv1.CapacityIsFoundReason, Message: strings.Repeat("x", 20000)},
	}

	r.publishDecisions(ca, autoscaler.Status{DryRun: true, Decisions: []autoscaler.Decision{answer}})

	g.Expect(ca.Status.DryRunDecisions).To(Equal([]autoscalingv1alpha1.DryRunDecision{{
		Time: *statusTime(start), Kind: autoscalingv1alpha1.AnswerDecision, ProvisioningRequest: "ns/job",
		Answer: &autoscalingv1alpha1.ProvisioningRequestAnswer{ConditionType: provisioningv1.ProvisionedCondition, Status: metav1.ConditionTrue,
			Reason: provisioningv1.CapacityIsFoundReason, Message: strings.Repeat("x", maxAnswerMessage-3) + "..."},
	}}))
	g.Expect(<-recorder.Events).To(HavePrefix("Normal WouldAnswerProvisioningRequest Would set Provisioned=True (CapacityIsFound) on ProvisioningRequest ns/job: xxx"))
}

func TestEveryNewDryRunDecisionOfAReconcileIsToldInTheEvents(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	clientset := kubefake.NewClientset()
	broadcaster := newEventBroadcaster(t.Context(), clientset.CoreV1())
	t.Cleanup(broadcaster.Shutdown)
	r := &ClusterAutoscalerReconciler{Recorder: broadcaster.NewRecorder(scheme, corev1.EventSource{Component: autoscalingv1alpha1.EventSource})}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shadow", UID: "1", ResourceVersion: "7"}}
	answer := func(request string) autoscaler.Decision {
		return autoscaler.Decision{Kind: autoscaler.AnswerDecision, Time: time.Now(), Request: request,
			Answer: &provisioning.Condition{Type: provisioningv1.ProvisionedCondition, Status: metav1.ConditionFalse,
				Reason: provisioningv1.CapacityIsNotFoundReason, Message: "1 of the 1 pods fit on no node of the cluster as it is"}}
	}

	r.publishDecisions(ca, autoscaler.Status{DryRun: true, Decisions: []autoscaler.Decision{answer("team-a/job"), answer("team-b/job")}})

	g.Eventually(func(g Gomega) {
		list, err := clientset.CoreV1().Events("ns").List(t.Context(), metav1.ListOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		var messages []string
		for _, event := range list.Items {
			messages = append(messages, event.Message)
		}
		joined := strings.Join(messages, "\n")
		g.Expect(joined).To(ContainSubstring("on ProvisioningRequest team-a/job: 1 of the 1 pods fit"))
		g.Expect(joined).To(ContainSubstring("on ProvisioningRequest team-b/job: 1 of the 1 pods fit"))
	}).Should(Succeed())
}
