package autoscaler_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A loop explains each pending pod: the group it grew, the node it waits
// for, or why each group cannot help.
func TestALoopExplainsWhatItDidForEachPendingPod(t *testing.T) {
	g := NewWithT(t)
	small := &fakeGroup{id: "MachineDeployment/default/small", max: 10, template: templateNode()}
	full := &fakeGroup{id: "MachineDeployment/default/full", max: 1, template: st.Node("template", "16", "64Gi")}
	nodes := small.addNodes(1)
	nodes = append(nodes, full.addNodes(1, st.Unschedulable())...)
	running := st.Pod("running-0", "3", "1Gi", st.OwnedBy("running"), st.OnNode(nodes[0].Name))
	waiting := st.Pod("fits-0", "1", "1Gi", st.OwnedBy("fits"))
	scaling := st.Replicas("web", 2, "3", "1Gi")
	huge := st.Replicas("huge", 2, "8", "1Gi")
	f := newFixture(t, []*fakeGroup{small, full}, objects(nodes, append(append(scaling, huge...), waiting, running)...)...)

	status := f.runOnce(t)

	g.Expect(small.increases).To(Equal([]int{2}))
	g.Expect(status.Explanation.PendingPods).To(ConsistOf(
		MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(autoscaler.TriggeredScaleUp), "NodeGroup": Equal(small.id),
			"Pods": ConsistOf(podNamed("web-0"), podNamed("web-1")),
		}),
		MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(autoscaler.WaitForNode), "Node": Equal(nodes[0].Name),
			"Pods": ConsistOf(podNamed("fits-0")),
		}),
		MatchFields(IgnoreExtras, Fields{
			"Outcome": Equal(autoscaler.NotTriggerScaleUp),
			"Pods":    ConsistOf(podNamed("huge-0"), podNamed("huge-1")),
			"Reasons": And(
				HaveKeyWithValue(small.id, ContainElement(ContainSubstring("Insufficient cpu"))),
				HaveKeyWithValue(full.id, ContainElement(ContainSubstring("max node group size reached"))),
			),
		}),
	))
}

// A loop explains, for each node, whether scale-down removes it, and why
// not: the utilization it was judged on, since when it is unneeded.
func TestALoopExplainsTheScaleDownOfEachNode(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(3)
	outside := st.Node("outside", "4", "16Gi")
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	light := st.Pod("light-0", "1", "1Gi", st.OwnedBy("light"), st.OnNode(nodes[1].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(append(nodes, outside), busy, light)...)

	first := f.runOnce(t)
	unneededSince := f.clock.Now()

	g.Expect(first.Explanation.Nodes).To(HaveExactElements(
		node(nodes[0].Name, group.id, scaledown.ReasonNotUnderutilized, 0.75),
		node(nodes[1].Name, group.id, scaledown.ReasonNotUnneededLongEnough, 0.25),
		node(nodes[2].Name, group.id, scaledown.ReasonNotUnneededLongEnough, 0),
		MatchFields(IgnoreExtras, Fields{"Name": Equal("outside"), "NodeGroup": BeEmpty(), "Measured": BeFalse(),
			"Kept": HaveField("Reason", scaledown.ReasonNotAutoscaled)}),
	))
	g.Expect(first.Explanation.Nodes[1].UnneededSince).To(Equal(unneededSince))

	f.clock.Step(10*time.Minute + time.Second)
	second := f.runOnce(t)

	g.Expect(second.Explanation.Nodes).To(ContainElement(MatchFields(IgnoreExtras, Fields{
		"Name": Equal(nodes[2].Name), "Removing": BeTrue(), "UnneededSince": Equal(unneededSince),
	})), "the empty node goes")
}

func podNamed(name string) OmegaMatcher {
	return PointTo(MatchFields(IgnoreExtras, Fields{"ObjectMeta": HaveField("Name", name)}))
}

func node(name, group string, reason scaledown.Reason, utilization float64) OmegaMatcher {
	return MatchFields(IgnoreExtras, Fields{
		"Name": Equal(name), "NodeGroup": Equal(group), "Removing": BeFalse(),
		"Kept": HaveField("Reason", reason), "Measured": BeTrue(), "Utilization": BeNumerically("~", utilization, 0.01),
	})
}
