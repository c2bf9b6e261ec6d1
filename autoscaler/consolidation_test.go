package autoscaler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// halfEmptyCluster is a group of three 4-core 16Gi nodes, priced 0.2 an
// hour, each half used on one resource at least, so that scale-down keeps
// them all at its default threshold: the first runs 2 cores, the second
// 8Gi, the third both. The pods of the first two fit on the third.
func halfEmptyCluster() (*fakeGroup, []*corev1.Node, []*corev1.Pod) {
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode(), price: ptr.To[pricing.Price](200_000)}
	nodes := group.addNodes(3)
	pods := []*corev1.Pod{
		st.Pod("cpu-0", "2", "", st.OwnedBy("cpu"), st.OnNode(nodes[0].Name)),
		st.Pod("memory-0", "", "8Gi", st.OwnedBy("memory"), st.OnNode(nodes[1].Name)),
		st.Pod("both-0", "2", "", st.OwnedBy("both"), st.OnNode(nodes[2].Name)),
		st.Pod("both-1", "", "8Gi", st.OwnedBy("both"), st.OnNode(nodes[2].Name)),
	}
	return group, nodes, pods
}

// consolidatingConfig turns delete consolidation on, after the default
// wait, with a budget of every node.
func consolidatingConfig(config autoscaler.Config) autoscaler.Config {
	config.Consolidation.Policy = scaledown.ConsolidationDelete
	config.Consolidation.Budget = intstr.FromString("100%")
	return config
}

// evicted are the names of the pods the engine evicted.
func (f *fixture) evicted() []string {
	var names []string
	for _, action := range f.clientset.Actions() {
		if action.GetVerb() == "create" && action.GetSubresource() == "eviction" {
			names = append(names, action.(k8stesting.CreateAction).GetObject().(interface{ GetName() string }).GetName())
		}
	}
	return names
}

func TestConsolidationDrainsTheNodesWhosePodsFitElsewhereOnlyWhenOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[on], func(t *testing.T) {
			g := NewWithT(t)
			group, nodes, pods := halfEmptyCluster()
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
			config := autoscaler.DefaultConfig()
			if on {
				config = consolidatingConfig(config)
			}
			f.apply(t, config)

			f.runOnce(t)
			g.Expect(f.evicted()).To(BeEmpty(), "not before consolidateAfter")
			f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
			status := f.runOnce(t)

			if !on {
				g.Expect(f.evicted()).To(BeEmpty())
				g.Expect(f.groupRecorder.reasons(group.id)).NotTo(ContainElement(autoscaler.EventConsolidation))
				for _, node := range status.Explanation.Nodes {
					g.Expect(node.Kept.Reason).To(Equal(scaledown.ReasonNotUnderutilized), node.Name)
				}
				return
			}
			message := "consolidation: removing nodes " + nodes[1].Name + ", " + nodes[0].Name + " saves 0.4/h"
			g.Expect(f.evicted()).To(ConsistOf("cpu-0", "memory-0"), "both nodes are drained at once")
			g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{group.id, corev1.EventTypeNormal, autoscaler.EventConsolidation, message}))
			g.Expect(status.Explanation.Nodes).To(ConsistOf(
				SatisfyAll(HaveField("Name", nodes[0].Name), HaveField("Removing", true), HaveField("Consolidation", message)),
				SatisfyAll(HaveField("Name", nodes[1].Name), HaveField("Removing", true), HaveField("Consolidation", message)),
				SatisfyAll(HaveField("Name", nodes[2].Name), HaveField("Removing", false), HaveField("Kept.Reason", scaledown.ReasonNotUnderutilized)),
			))
		})
	}
}

// A budget of 0 in office hours (09:00 to 17:00 UTC; the fixture's clock
// starts at noon) holds consolidation, in Active and DryRun mode alike: no
// eviction, no decision, and each node says which budget keeps it. Once the
// window closes, the nodes go.
func TestConsolidationBudgetWindowHoldsConsolidationUntilItCloses(t *testing.T) {
	officeHours, err := schedule.New("0 9 * * *", "UTC", 8*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, dryRun := range []bool{false, true} {
		t.Run(map[bool]string{false: "Active", true: "DryRun"}[dryRun], func(t *testing.T) {
			g := NewWithT(t)
			group, nodes, pods := halfEmptyCluster()
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
			config := autoscaler.DefaultConfig()
			if dryRun {
				config = dryRunConfig()
			}
			config = consolidatingConfig(config)
			config.Consolidation.Budgets = []scaledown.ScheduledBudget{{Name: "spec.consolidation.budgets[0]", Nodes: intstr.FromInt32(0), Schedule: officeHours}}
			f.apply(t, config)

			f.runOnce(t)
			f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
			status := f.runOnce(t)

			g.Expect(f.evicted()).To(BeEmpty())
			g.Expect(status.Decisions).To(BeEmpty())
			g.Expect(status.Explanation.Nodes).To(HaveLen(3))
			for _, node := range status.Explanation.Nodes {
				g.Expect(node.Kept).To(Equal(scaledown.Decision{Reason: scaledown.ReasonConsolidationBudget,
					Message: `consolidation is held by the disruption budget spec.consolidation.budgets[0] (nodes 0, schedule "0 9 * * *" for 8h0m0s, ` +
						`window 2026-01-01T09:00:00Z to 2026-01-01T17:00:00Z)`}), node.Name)
			}

			f.clock.SetTime(time.Date(2026, time.January, 1, 17, 0, 0, 0, time.UTC))
			status = f.runOnce(t)
			if dryRun {
				g.Expect(status.Decisions).To(ConsistOf(HaveField("Nodes", []string{nodes[0].Name, nodes[1].Name})))
				return
			}
			g.Expect(f.evicted()).To(ConsistOf("cpu-0", "memory-0"))
		})
	}
}

// A DryRun engine records what consolidation would remove, and why, as a
// scale-down decision, and writes nothing: no taint, no eviction, no event.
func TestDryRunRecordsConsolidationAndWritesNothing(t *testing.T) {
	g := NewWithT(t)
	group, nodes, pods := halfEmptyCluster()
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
	config := consolidatingConfig(dryRunConfig())
	f.apply(t, config)

	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	status := f.runOnce(t)

	g.Expect(status.Decisions).To(ConsistOf(SatisfyAll(
		HaveField("Kind", autoscaler.ScaleDownDecision),
		HaveField("Nodes", []string{nodes[0].Name, nodes[1].Name}),
		HaveField("Groups", []autoscaler.GroupDelta{{ID: group.id, Delta: -2}}),
	)))
	g.Expect(status.Decisions[0].Message()).To(Equal("Would remove node(s) " + nodes[0].Name + ", " + nodes[1].Name + " [" + group.id + " -2]: " +
		"consolidation: removing nodes " + nodes[1].Name + ", " + nodes[0].Name + " saves 0.4/h"))
	f.expectNoWrites(g)
	g.Expect(f.scaledDown(t, "consolidation", "DryRun")).To(Equal(2.0), "counted as consolidation, not as unneeded")
	g.Expect(f.scaledDown(t, "underutilized", "DryRun")).To(BeZero())
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(group.decreases).To(BeEmpty())
	g.Expect(f.groupRecorder.events).To(BeEmpty(), "no event on the objects behind node groups")
}

// scaledDown is the scale-down counter of reason and mode.
func (f *fixture) scaledDown(t *testing.T, reason, mode string) float64 {
	t.Helper()
	return f.metricWith(t, "cluster_autoscaler_scaled_down_nodes_total", map[string]string{"reason": reason, "mode": mode})
}

// The nodes consolidation removes are counted under a reason of their own,
// not as the unneeded nodes scale-down removes: an operator tells what
// consolidation costs in disruption from what scale-down does.
func TestConsolidatedNodesAreCountedUnderTheirOwnReason(t *testing.T) {
	g := NewWithT(t)
	group, nodes, pods := halfEmptyCluster()
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
	config := consolidatingConfig(autoscaler.DefaultConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	f.runOnce(t)
	g.Expect(f.evicted()).To(ConsistOf("cpu-0", "memory-0"))

	// The evicted pods end, in the cache and in the API; the drained nodes
	// are deleted.
	for _, name := range f.evicted() {
		ctx := context.Background()
		g.Expect(f.cluster.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})).To(Succeed())
		g.Expect(f.clientset.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{})).To(Succeed())
	}
	f.clock.Step(10 * time.Second)
	f.runOnce(t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[0].Name, nodes[1].Name))
	g.Expect(f.scaledDown(t, "consolidation", "Active")).To(Equal(2.0))
	g.Expect(f.scaledDown(t, "underutilized", "Active")).To(BeZero())
}

// crowdedSmallNodes are four 4-core nodes of md-small, priced 0.2 an hour,
// each running one 2.5-core pod that fits on no other, and md-large, at
// zero nodes, whose 8-core nodes cost 0.5 an hour and take three of the
// pods: three small nodes go for one large one, saving 0.1 an hour.
func crowdedSmallNodes() (small, large *fakeGroup, nodes []*corev1.Node, pods []*corev1.Pod) {
	small = &fakeGroup{id: "MachineDeployment/default/md-small", max: 10, template: templateNode(), price: ptr.To[pricing.Price](200_000)}
	large = &fakeGroup{id: "MachineDeployment/default/md-large", max: 10, template: st.Node("large-template", "8", "32Gi"), price: ptr.To[pricing.Price](500_000)}
	nodes = small.addNodes(4)
	for i, node := range nodes {
		pods = append(pods, st.Pod(fmt.Sprintf("web-%d", i), "2500m", "", st.OwnedBy("web"), st.OnNode(node.Name)))
	}
	return small, large, nodes, pods
}

// replacingConfig turns replace consolidation on, after the default wait,
// with a budget of every node.
func replacingConfig(config autoscaler.Config) autoscaler.Config {
	config = consolidatingConfig(config)
	config.Consolidation.Policy = scaledown.ConsolidationReplace
	return config
}

// A replacement asks for its new node first, drains nothing while the
// node has not registered or is not Ready, and drains the nodes it
// replaces once it is.
func TestReplacementDrainsTheReplacedNodesOnceTheNewNodeIsReady(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	small, large, nodes, pods := crowdedSmallNodes()
	f := newFixture(t, []*fakeGroup{small, large}, objects(nodes, pods...)...)
	config := replacingConfig(autoscaler.DefaultConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)

	status := f.runOnce(t)
	decided := "consolidation: replacing nodes " + nodes[0].Name + ", " + nodes[1].Name + ", " + nodes[2].Name + " with 1 × " + large.id + " saves 0.1/h"
	g.Expect(large.increases).To(Equal([]int{1}), "the new node is asked for first")
	g.Expect(f.evicted()).To(BeEmpty())
	g.Expect(small.deletedNodes).To(BeEmpty())
	for _, id := range []string{small.id, large.id} {
		g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{id, corev1.EventTypeNormal, autoscaler.EventConsolidation, decided}))
	}
	g.Expect(status.Explanation.Nodes).To(ContainElement(SatisfyAll(
		HaveField("Name", nodes[0].Name), HaveField("Removing", false),
		HaveField("Kept.Reason", scaledown.ReasonAwaitingReplacement), HaveField("Consolidation", ContainSubstring(decided)))))

	// The node's Machine exists, the node has not registered.
	f.clock.Step(time.Minute)
	status = f.runOnce(t)
	g.Expect(f.evicted()).To(BeEmpty(), "not before the new node is there")
	g.Expect(status.Explanation.Nodes).To(ContainElement(SatisfyAll(
		HaveField("Name", nodes[0].Name), HaveField("Consolidation", decided+": waiting for the new nodes to be Ready (0 of 1)"))))
	g.Expect(large.increases).To(Equal([]int{1}), "no second replacement meanwhile")

	// It registers, not Ready yet.
	newNode := st.Node("large-0", "8", "32Gi", func(n *corev1.Node) {
		n.CreationTimestamp = metav1.NewTime(f.clock.Now())
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(f.clock.Now())}}
	})
	large.instances = append(large.instances, nodegroups.Instance{ID: "fake://large-0", NodeName: "large-0", State: nodegroups.InstanceRunning, Removable: true})
	g.Expect(f.cluster.Create(ctx, newNode)).To(Succeed())
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(f.evicted()).To(BeEmpty(), "not before the new node is Ready")

	// It is Ready.
	newNode.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(f.clock.Now())}}
	g.Expect(f.cluster.Status().Update(ctx, newNode)).To(Succeed())
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(f.evicted()).To(ConsistOf("web-0", "web-1", "web-2"))
	g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{small.id, corev1.EventTypeNormal, autoscaler.EventConsolidation,
		decided + ": the new nodes are Ready, draining the nodes replaced"}))
}

// A replacement whose new node is not Ready within maxNodeProvisionTime
// is abandoned: the nodes it was to replace are left as they were, and
// the events say why.
func TestReplacementIsAbandonedWhenTheNewNodeIsNotReadyInTime(t *testing.T) {
	g := NewWithT(t)
	small, large, nodes, pods := crowdedSmallNodes()
	f := newFixture(t, []*fakeGroup{small, large}, objects(nodes, pods...)...)
	config := replacingConfig(autoscaler.DefaultConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	f.runOnce(t)
	g.Expect(large.increases).To(Equal([]int{1}))

	f.clock.Step(config.MaxNodeProvisionTime)
	status := f.runOnce(t)

	g.Expect(f.evicted()).To(BeEmpty())
	g.Expect(small.deletedNodes).To(BeEmpty())
	var abandoned []string
	for _, e := range f.groupRecorder.events {
		if e.groupID == small.id && e.eventType == corev1.EventTypeWarning && e.reason == autoscaler.EventConsolidationAbandoned {
			abandoned = append(abandoned, e.message)
		}
	}
	g.Expect(abandoned).To(ConsistOf(ContainSubstring("abandoned, 0 of its 1 new node(s) Ready 15m0s after they were asked for (maxNodeProvisionTime)")))
	g.Expect(status.Explanation.Nodes).To(ContainElement(SatisfyAll(
		HaveField("Name", nodes[0].Name), HaveField("Kept.Reason", scaledown.ReasonNotUnderutilized), HaveField("Consolidation", ContainSubstring("abandoned")))))
}

// A DryRun engine records the replacement it would make, and asks for no
// node.
func TestDryRunRecordsAReplacementAndWritesNothing(t *testing.T) {
	g := NewWithT(t)
	small, large, nodes, pods := crowdedSmallNodes()
	f := newFixture(t, []*fakeGroup{small, large}, objects(nodes, pods...)...)
	config := replacingConfig(dryRunConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	status := f.runOnce(t)

	names := nodes[0].Name + ", " + nodes[1].Name + ", " + nodes[2].Name
	g.Expect(status.Decisions).To(HaveLen(1))
	g.Expect(status.Decisions[0].Message()).To(Equal("Would replace node(s) " + names + " [" + large.id + " +1, " + small.id + " -3]: " +
		"consolidation: replacing nodes " + names + " with 1 × " + large.id + " saves 0.1/h"))
	f.expectNoWrites(g)
	g.Expect(large.increases).To(BeEmpty())
	g.Expect(f.groupRecorder.events).To(BeEmpty())
}

// withTinyNodes prices md-large at 0.4 an hour and adds md-tiny, whose
// 3-core nodes at 0.15 take one of the 2.5-core pods: one large node for
// three pods and one tiny node for the fourth replace the four small
// nodes, saving 0.25 an hour, more than either group alone (0.2).
func withTinyNodes(large *fakeGroup) *fakeGroup {
	large.price = ptr.To[pricing.Price](400_000)
	return &fakeGroup{id: "MachineDeployment/default/md-tiny", max: 10, template: st.Node("tiny-template", "3", "4Gi"), price: ptr.To[pricing.Price](150_000)}
}

// A replacement by nodes of two groups asks each for its nodes, and takes
// back those it asked for when another group refuses to grow: no node is
// drained for a replacement that is only half there.
func TestMixedReplacementAsksEachGroupAndTakesBackWhenOneRefuses(t *testing.T) {
	g := NewWithT(t)
	small, large, nodes, pods := crowdedSmallNodes()
	tiny := withTinyNodes(large)
	f := newFixture(t, []*fakeGroup{small, large, tiny}, objects(nodes, pods...)...)
	config := replacingConfig(dryRunConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	status := f.runOnce(t)

	names := nodes[0].Name + ", " + nodes[1].Name + ", " + nodes[2].Name + ", " + nodes[3].Name
	g.Expect(status.Decisions).To(HaveLen(1))
	g.Expect(status.Decisions[0].Message()).To(Equal("Would replace node(s) " + names + " [" + large.id + " +1, " + small.id + " -4, " + tiny.id + " +1]: " +
		"consolidation: replacing nodes " + names + " with 1 × " + large.id + " and 1 × " + tiny.id + " saves 0.25/h"))

	small, large, nodes, pods = crowdedSmallNodes()
	tiny = withTinyNodes(large)
	tiny.increaseErr = errors.New("the infrastructure is out of tiny nodes")
	f = newFixture(t, []*fakeGroup{small, large, tiny}, objects(nodes, pods...)...)
	config = replacingConfig(autoscaler.DefaultConfig())
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(config.Consolidation.ConsolidateAfter + time.Second)
	f.runOnce(t)

	g.Expect(large.increases).To(Equal([]int{1}))
	g.Expect(large.decreases).To(Equal([]int{1}), "the large node is taken back")
	g.Expect(large.target).To(BeZero())
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(f.evicted()).To(BeEmpty())
	g.Expect(small.deletedNodes).To(BeEmpty())
}
