package controller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

func TestExplanationOfALoop(t *testing.T) {
	g := NewWithT(t)
	since := time.Date(2026, 3, 1, 10, 0, 0, 500, time.UTC)
	reasons := map[string][]string{"MachineDeployment/ns/b": {"max node group size reached"}, "MachineDeployment/ns/a": {"Insufficient cpu"}}
	loop := autoscaler.Status{Time: since.Add(time.Minute), Explanation: autoscaler.Explanation{
		PendingPods: []autoscaler.PendingPods{
			{Outcome: autoscaler.TriggeredScaleUp, NodeGroup: "MachineDeployment/ns/a", Pods: pods("web", 25)},
			{Outcome: autoscaler.NotTriggerScaleUp, Reasons: reasons, Pods: pods("huge", 1)},
		},
		Nodes: []autoscaler.NodeDecision{
			{Name: "a-0", NodeGroup: "MachineDeployment/ns/a", Removing: true, UnneededSince: since, Measured: true, Utilization: 0.104},
			{Name: "a-1", NodeGroup: "MachineDeployment/ns/a", Kept: scaledown.Decision{Reason: scaledown.ReasonNotUnderutilized, Message: "utilization 0.80 is not below the threshold 0.50"}, Measured: true, Utilization: 0.8},
			{Name: "b-0", NodeGroup: "MachineDeployment/ns/b", Removing: true, Consolidation: "consolidation: removing nodes b-0 saves 0.2/h", Measured: true, Utilization: 0.5},
			{Name: "outside", Kept: scaledown.Decision{Reason: scaledown.ReasonNotAutoscaled, Message: "node belongs to no autoscaled node group"}},
		},
	}}

	explanation := explanationOf(loop)

	g.Expect(explanation.PendingPods).To(HaveExactElements(
		MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(autoscalingv1alpha1.PendingPodsTriggeredScaleUp), "NodeGroup": Equal("MachineDeployment/ns/a"),
			"Count": BeEquivalentTo(25), "Pods": And(HaveLen(maxExplainedPodNames), ContainElement("ns/web-0")),
		}),
		MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(autoscalingv1alpha1.PendingPodsNotTriggerScaleUp), "Count": BeEquivalentTo(1), "Pods": Equal([]string{"ns/huge-0"}),
			"NodeGroupReasons": Equal([]autoscalingv1alpha1.NodeGroupReasons{
				{NodeGroup: "MachineDeployment/ns/a", Reasons: []string{"Insufficient cpu"}},
				{NodeGroup: "MachineDeployment/ns/b", Reasons: []string{"max node group size reached"}},
			}),
		}),
	))
	g.Expect(explanation.OmittedPods).To(BeEquivalentTo(5), "the pods of a group beyond those named")
	g.Expect(explanation.Nodes).To(Equal([]autoscalingv1alpha1.NodeExplanation{
		{Name: "a-0", NodeGroup: "MachineDeployment/ns/a", ScaleDown: autoscalingv1alpha1.NodeRemoving, UtilizationPercent: ptr.To[int32](10),
			UnneededSince: &metav1.Time{Time: since.Truncate(time.Second)}},
		{Name: "a-1", NodeGroup: "MachineDeployment/ns/a", ScaleDown: autoscalingv1alpha1.NodeKept, UtilizationPercent: ptr.To[int32](80),
			Reason: "NotUnderutilized", Message: "utilization 0.80 is not below the threshold 0.50"},
		{Name: "b-0", NodeGroup: "MachineDeployment/ns/b", ScaleDown: autoscalingv1alpha1.NodeRemoving, UtilizationPercent: ptr.To[int32](50),
			Reason: "Consolidation", Message: "consolidation: removing nodes b-0 saves 0.2/h"},
		{Name: "outside", ScaleDown: autoscalingv1alpha1.NodeKept, Reason: "NotAutoscaled", Message: "node belongs to no autoscaled node group"},
	}))
	g.Expect(explanation.OmittedNodes).To(BeZero())
}

// Thousands of nodes and pending workloads cost a bounded write: the
// explanation leaves out the busiest nodes first, which nobody asks about
// to learn why they stay, and the pods beyond its room.
func TestExplanationOfALargeClusterStaysWithinItsSize(t *testing.T) {
	g := NewWithT(t)
	var loop autoscaler.Status
	for i := range 3000 {
		loop.Explanation.PendingPods = append(loop.Explanation.PendingPods, autoscaler.PendingPods{
			Outcome: autoscaler.NotTriggerScaleUp, Pods: pods(fmt.Sprintf("app-%d", i), 2),
			Reasons: map[string][]string{"MachineDeployment/ns/a": {"Insufficient cpu"}},
		})
	}
	for i := range 10000 {
		decision := autoscaler.NodeDecision{Name: fmt.Sprintf("node-%05d", i), NodeGroup: "MachineDeployment/ns/a", Measured: true,
			Utilization: float64(i%100) / 100, Kept: scaledown.Decision{Reason: scaledown.ReasonNotUnderutilized, Message: "utilization is not below the threshold"}}
		if i%50 == 0 {
			decision.Utilization = 0.1
			decision.Kept = scaledown.Decision{Reason: scaledown.ReasonNotUnneededLongEnough, Message: "unneeded since a while"}
		}
		loop.Explanation.Nodes = append(loop.Explanation.Nodes, decision)
	}

	explanation := explanationOf(loop)

	data, err := json.Marshal(explanation)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(len(data)).To(BeNumerically("<=", maxExplanationBytes))
	g.Expect(explanation.OmittedPods).To(BeEquivalentTo(6000 - 2*len(explanation.PendingPods)))
	g.Expect(explanation.PendingPods).NotTo(BeEmpty())
	g.Expect(explanation.OmittedNodes).To(BeEquivalentTo(10000 - len(explanation.Nodes)))
	g.Expect(explanation.Nodes).To(ContainElement(HaveField("Name", "node-09950")), "the unneeded nodes stay")
	g.Expect(explanation.Nodes).NotTo(ContainElement(HaveField("UtilizationPercent", HaveValue(BeEquivalentTo(99)))), "the busiest go first")
}

func pods(prefix string, n int) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", prefix, i)}})
	}
	return out
}
