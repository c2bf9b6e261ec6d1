package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func dryRunConfig() autoscaler.Config {
	config := autoscaler.DefaultConfig()
	config.DryRun = true
	return config
}

// expectNoWrites fails when the engine wrote to the cluster: a node, a
// pod, an eviction or an event.
func (f *fixture) expectNoWrites(g Gomega) {
	for _, action := range f.clientset.Actions() {
		switch action.GetVerb() {
		case "get", "list", "watch":
		default:
			g.Expect(action).To(BeNil(), "a dry run writes nothing to the cluster")
		}
	}
	g.Expect(f.podEvents()).To(BeEmpty(), "a dry run records no event in the cluster")
}

func TestDryRunPublishesTheScaleUpItWouldMakeOnce(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	pods := st.Replicas("web", 3, "3", "1Gi")
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
	f.apply(t, dryRunConfig())

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty(), "the group keeps its size")
	f.expectNoWrites(g)
	g.Expect(status.DryRun).To(BeTrue())
	g.Expect(status.ScalingActive).To(BeFalse())
	g.Expect(status.Decisions).To(HaveLen(1))
	decision := status.Decisions[0]
	g.Expect(decision.Kind).To(Equal(autoscaler.ScaleUpDecision))
	g.Expect(decision.Time).To(Equal(st.Now))
	g.Expect(decision.Groups).To(Equal([]autoscaler.GroupDelta{{ID: group.id, Delta: 2}}), "as an active engine would: two more 4-cpu nodes")
	g.Expect(decision.Pods).To(HaveLen(2), "one of the three pods fits on the existing node")
	g.Expect(decision.Pods).To(HaveEach(HaveField("Namespace", "default")))
	g.Expect(decision.OldestPod).To(BeTemporally("==", pods[0].CreationTimestamp.Time))
	g.Expect(decision.Message()).To(Equal("Would scale up [MachineDeployment/default/md-0 +2] for 2 pending pod(s)"))
	g.Expect(groupRow(status, group.id).TargetSize).To(Equal(1), "the status shows the group as it is")
	g.Expect(f.metric(t, "cluster_autoscaler_scaled_up_nodes_total", "")).To(BeZero(), "no node was added (mode Active)")
	g.Expect(f.dryRunMetric(t, "cluster_autoscaler_scaled_up_nodes_total")).To(Equal(2.0))
	g.Expect(f.seriesNames(t)).To(ConsistOf("cluster_autoscaler_scaled_up_nodes_total", "cluster_autoscaler_scaled_down_nodes_total",
		"cluster_autoscaler_engine_panics_total", "cluster_autoscaler_errors_total"),
		"the cluster's gauges are those of the autoscaler that acts on it, which may be another engine of the manager")

	f.clock.Step(10 * time.Second)
	status = f.runOnce(t)
	g.Expect(status.Decisions).To(HaveLen(1), "the same pods pending in the same cluster make no new decision")
	g.Expect(f.dryRunMetric(t, "cluster_autoscaler_scaled_up_nodes_total")).To(Equal(2.0))
	f.expectNoWrites(g)
}

func TestDryRunPublishesTheNodesItWouldRemove(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(3)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	moving := st.Pod("web-1", "500m", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[1].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, moving)...)
	f.apply(t, dryRunConfig())

	status := f.runPastUnneededTime(context.Background(), t)

	g.Expect(group.deletedNodes).To(BeEmpty())
	f.expectNoWrites(g)
	g.Expect(status.Decisions).To(HaveLen(1))
	decision := status.Decisions[0]
	g.Expect(decision.Kind).To(Equal(autoscaler.ScaleDownDecision))
	g.Expect(decision.Nodes).To(Equal([]string{nodes[1].Name, nodes[2].Name}), "the empty node, and one to drain")
	g.Expect(decision.Groups).To(Equal([]autoscaler.GroupDelta{{ID: group.id, Delta: -2}}))
	g.Expect(decision.Message()).To(Equal(fmt.Sprintf("Would remove node(s) %s, %s [MachineDeployment/default/md-0 -2]", nodes[1].Name, nodes[2].Name)))
	g.Expect(f.metricWith(t, "cluster_autoscaler_scaled_down_nodes_total", map[string]string{"reason": "underutilized", "mode": "DryRun"})).To(Equal(2.0))

	f.clock.Step(10 * time.Second)
	status = f.runOnce(t)
	g.Expect(status.Decisions).To(HaveLen(1), "planned again, not decided again")
	f.expectNoWrites(g)
}

func TestDryRunPlansBesideAnotherAutoscalerAndLeavesItsTaintsAlone(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(2, st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)
	f.apply(t, dryRunConfig())

	status := f.runOnce(t)

	g.Expect(status.OtherAutoscaler).To(ContainSubstring("did not place"), "the other autoscaler is reported")
	g.Expect(status.Decisions).To(ContainElement(HaveField("Kind", autoscaler.ScaleUpDecision)), "and the dry run plans all the same")
	g.Expect(group.increases).To(BeEmpty())
	g.Expect(f.tainted(t, nodes[0].Name)).To(BeTrue(), "its taint is never touched")
	f.expectNoWrites(g)
}

// An Active and a DryRun ClusterAutoscaler of one Cluster are two engines
// of one manager: the marks of the Active one look like the DryRun one's
// own leftovers, and must stay.
func TestDryRunLeavesTheMarksOfTheActiveEngineBesideIt(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2, func(node *corev1.Node) {
		node.Annotations = map[string]string{scaledown.TaintedAnnotation: "true"}
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: nodefacts.ToBeDeletedTaint, Value: "1767268800", Effect: corev1.TaintEffectNoSchedule})
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	f.apply(t, dryRunConfig())

	f.runPastUnneededTime(context.Background(), t)

	g.Expect(f.tainted(t, nodes[0].Name)).To(BeTrue(), "the Active engine's drain goes on")
	f.expectNoWrites(g)
}

func TestDryRunLeavesFailedAndUnregisteredInstancesToTheActiveAutoscaler(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://unregistered", State: nodegroups.InstanceCreating})
	group.target++
	f := newFixture(t, []*fakeGroup{group})
	f.apply(t, dryRunConfig())

	f.runOnce(t)
	f.clock.Step(16 * time.Minute)
	f.runOnce(t)

	g.Expect(group.deletedInstances).To(BeEmpty(), "an active engine would remove it; a dry run does not")
	g.Expect(group.decreases).To(BeEmpty())
}

func TestLeavingActiveModeGivesBackTheDrainsInProgressAndActingAgainClearsTheDecisions(t *testing.T) {
	g := NewWithT(t)
	f, group, nodes := drainingFixture(t)

	f.apply(t, dryRunConfig())
	f.clock.Step(10 * time.Second)
	status := f.runOnce(t)

	g.Expect(f.tainted(t, nodes[1].Name)).To(BeFalse(), "no node stays tainted while nothing drives its drain")
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(status.Decisions).NotTo(BeEmpty(), "the dry run would drain the node again")

	f.apply(t, autoscaler.DefaultConfig())
	status = f.runOnce(t)
	g.Expect(status.DryRun).To(BeFalse())
	g.Expect(status.Decisions).To(BeEmpty())
}

// A node the Active engine handed to its group is still followed once the
// engine runs dry: it keeps its taint while its group removes it, and is
// given back, taint and mark removed, when its group does not.
func TestLeavingActiveModeStillFollowsTheNodesHandedOver(t *testing.T) {
	g := NewWithT(t)
	f, group, handedOver := handOverAnUnneededNode(t)

	f.apply(t, dryRunConfig())
	f.clock.Step(10 * time.Second)
	f.runOnce(t)
	g.Expect(f.tainted(t, handedOver)).To(BeTrue(), "no pod lands on a node its group is removing")

	status := setReplicasBackUntilGivenBack(t, f, group, handedOver)
	expectGivenBack(t, f, group, handedOver, status)
	g.Expect(group.decreases).To(BeEmpty(), "a dry run lowers no replicas")
	g.Expect(group.deletedNodes).To(Equal([]string{handedOver}), "and removes nothing")
}

// seriesNames are the names of the metrics that have series.
func (f *fixture) seriesNames(t *testing.T) []string {
	t.Helper()
	families, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, family := range families {
		if len(family.GetMetric()) > 0 {
			names = append(names, family.GetName())
		}
	}
	return names
}

// dryRunMetric returns the value of a counter of the fixture's cluster
// with mode="DryRun".
func (f *fixture) dryRunMetric(t *testing.T, name string) float64 {
	t.Helper()
	return f.metricWith(t, name, map[string]string{"mode": "DryRun"})
}
