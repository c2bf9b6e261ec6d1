package scaledown_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

const (
	smallID = "MachineDeployment/default/md-small"
	largeID = "MachineDeployment/default/md-large"
	// smallPrice is what a 4-core node of md-small costs an hour.
	smallPrice pricing.Price = 200_000
	tinyID                   = "MachineDeployment/default/md-tiny"
)

// crowded is the cluster the replacement tests start from: four 4-core
// nodes of md-small, a to d, each running one 2.5-core pod, so that no
// pod fits on another node and scale-down keeps them all (62% used); and
// md-large, at zero nodes, whose 8-core template takes three of the pods.
// Three small nodes cost 0.6 an hour, one large node largePrice.
type crowded struct {
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	pdbs       []*policyv1.PodDisruptionBudget
	small      *testGroup
	large      *testGroup
	largePrice pricing.Price
	// tiny, when set, is a third group, of nodes smaller than md-large's.
	tiny *testGroup
}

func newCrowded(largePrice pricing.Price, podOpts map[string][]st.PodOption) *crowded {
	c := &crowded{largePrice: largePrice}
	for _, name := range []string{"a", "b", "c", "d"} {
		c.nodes = append(c.nodes, node(name))
		c.pods = append(c.pods, appPod(name+"-0", "2500m", "", name, "web", podOpts[name]...))
	}
	c.small = newGroup(smallID, c.nodes...)
	c.small.options.Price = ptr.To(smallPrice)
	c.large = &testGroup{NodeGroup: &st.NodeGroup{Name: largeID, Max: 10, Template: st.Node("large", "8", "32Gi")}}
	c.large.options.Price = ptr.To(largePrice)
	return c
}

// snapshot returns the snapshot of the cluster with the groups' templates,
// as the engine builds them before it plans a replacement.
func (c *crowded) snapshot(t *testing.T) *snapshot.Snapshot {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	groups := []nodegroups.NodeGroup{c.small, c.large}
	if c.tiny != nil {
		groups = append(groups, c.tiny)
	}
	snap := snapshot.New(snapshot.Input{
		Nodes: c.nodes, Pods: c.pods, Controllers: st.Controllers(c.pods...), PodDisruptionBudgets: c.pdbs,
		NodeGroups: groups,
	})
	if failed := simulator.SetTemplates(ctx, snap, options().NodeRules); len(failed) > 0 {
		t.Fatalf("templates: %v", failed)
	}
	return snap
}

// replacing are the test options with the policy, no wait, and a budget
// of every node.
func replacing(policy scaledown.ConsolidationPolicy, change ...func(*scaledown.Options)) scaledown.Options {
	return consolidating(append([]func(*scaledown.Options){func(o *scaledown.Options) {
		o.Consolidation.Policy = policy
		o.Consolidation.BalancedThreshold = scaledown.DefaultBalancedThreshold
		o.Groups.MaxNodeProvisionTime = 15 * time.Minute
	}}, change...)...)
}

func TestConsolidationReplacesNodesByFewerCheaperOnes(t *testing.T) {
	const notUnder, awaiting = scaledown.ReasonNotUnderutilized, scaledown.ReasonAwaitingReplacement
	allKept := map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder, "d": notUnder}
	tests := []struct {
		name       string
		largePrice pricing.Price
		podOpts    map[string][]st.PodOption
		pdbs       []*policyv1.PodDisruptionBudget
		change     func(*crowded)
		opts       scaledown.Options
		progress   scaledown.Progress
		// wantReplaced are the nodes replaced by wantNewNodes large ones;
		// nil when consolidation decides nothing.
		wantReplaced []string
		wantNewNodes int
		wantSavings  pricing.Price
		wantKept     map[string]scaledown.Reason
	}{
		{
			name: "three small nodes go for one large node that costs less than they do", largePrice: 500_000,
			opts:         replacing(scaledown.ConsolidationReplace),
			wantReplaced: []string{"a", "b", "c"}, wantNewNodes: 1, wantSavings: 3*smallPrice - 500_000,
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": awaiting, "c": awaiting, "d": notUnder},
		},
		{
			name: "not when the large node costs as much as the nodes it replaces", largePrice: 3 * smallPrice,
			opts:     replacing(scaledown.ConsolidationReplace),
			wantKept: allKept,
		},
		{
			name: "Delete never replaces", largePrice: 100_000,
			opts:     replacing(scaledown.ConsolidationDelete),
			wantKept: allKept,
		},
		{
			name: "a pod with karpenter.sh/do-not-disrupt=true keeps its node", largePrice: 500_000,
			podOpts:      map[string][]st.PodOption{"a": {withPodAnnotation(scaledown.DoNotDisruptAnnotation, "true")}},
			opts:         replacing(scaledown.ConsolidationReplace),
			wantReplaced: []string{"b", "c", "d"}, wantNewNodes: 1, wantSavings: 3*smallPrice - 500_000,
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": awaiting, "c": awaiting, "d": awaiting},
		},
		{
			name: "a pod with safe-to-evict=false keeps its node", largePrice: 500_000,
			podOpts:      map[string][]st.PodOption{"b": {withPodAnnotation(scaledown.SafeToEvictAnnotation, "false")}},
			opts:         replacing(scaledown.ConsolidationReplace),
			wantReplaced: []string{"a", "c", "d"}, wantNewNodes: 1, wantSavings: 3*smallPrice - 500_000,
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": notUnder, "c": awaiting, "d": awaiting},
		},
		{
			name: "a PodDisruptionBudget that allows no disruption keeps its pod's node", largePrice: 500_000,
			podOpts:      map[string][]st.PodOption{"c": {st.WithPodLabels("app", "db")}},
			pdbs:         []*policyv1.PodDisruptionBudget{dbPDB()},
			opts:         replacing(scaledown.ConsolidationReplace),
			wantReplaced: []string{"a", "b", "d"}, wantNewNodes: 1, wantSavings: 3*smallPrice - 500_000,
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": awaiting, "c": notUnder, "d": awaiting},
		},
		{
			name: "a budget of two nodes cannot replace three", largePrice: 500_000,
			opts:     replacing(scaledown.ConsolidationReplace, func(o *scaledown.Options) { o.Consolidation.Budget = intstr.FromInt32(2) }),
			wantKept: allKept,
		},
		{
			name: "a replacement group at its max size adds no node", largePrice: 500_000,
			change:   func(c *crowded) { c.large.Max = 0 },
			opts:     replacing(scaledown.ConsolidationReplace),
			wantKept: allKept,
		},
		{
			name: "no node beyond the cluster's max nodes, counting those replaced", largePrice: 500_000,
			opts: replacing(scaledown.ConsolidationReplace, func(o *scaledown.Options) {
				o.Consolidation.Limits.MaxNodesTotal = 4
			}),
			wantKept: allKept,
		},
		{
			name: "a group that must not grow replaces nothing", largePrice: 500_000,
			opts:     replacing(scaledown.ConsolidationReplace),
			progress: scaledown.Progress{NotGrowing: map[string]string{largeID: "in backoff after failed scale-up"}},
			wantKept: allKept,
		},
		{
			// Saving 0.1 of 0.8 an hour (12.5%) for 3 of 4 pods (75%)
			// scores 0.17.
			name: "Balanced: not a marginal replacement", largePrice: 500_000,
			opts:     replacing(scaledown.ConsolidationBalanced),
			wantKept: allKept,
		},
		{
			// Saving 0.4 of 0.8 an hour (50%) for 75% of the pods scores
			// 0.67.
			name: "Balanced: a replacement that saves enough for what it disrupts", largePrice: 200_000,
			opts:         replacing(scaledown.ConsolidationBalanced),
			wantReplaced: []string{"a", "b", "c"}, wantNewNodes: 1, wantSavings: 3*smallPrice - 200_000,
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": awaiting, "c": awaiting, "d": notUnder},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			g.Expect(tt.opts.Validate()).To(Succeed())
			c := newCrowded(tt.largePrice, tt.podOpts)
			c.pdbs = tt.pdbs
			if tt.change != nil {
				tt.change(c)
			}
			planner := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now))

			plan := planner.Plan(ctx, c.snapshot(t), tt.opts, tt.progress)

			g.Expect(reasons(plan.Kept)).To(Equal(tt.wantKept), "nodes kept")
			g.Expect(plan.Drain).To(BeEmpty(), "nothing is drained before its replacement is Ready")
			g.Expect(plan.Empty).To(BeEmpty())
			if tt.wantReplaced == nil {
				g.Expect(plan.Consolidation).To(BeNil())
				return
			}
			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(names(plan.Consolidation.Removals)).To(Equal(tt.wantReplaced))
			g.Expect(plan.Consolidation.Replacement).NotTo(BeNil())
			g.Expect(plan.Consolidation.Replacement.String()).To(Equal(fmt.Sprintf("%d × %s", tt.wantNewNodes, largeID)))
			g.Expect(plan.Consolidation.Savings).To(Equal(tt.wantSavings))
		})
	}
}

// The example: three half-empty 4-core nodes, whose pods need two
// of them, go for one 8-core node that costs less than two small ones:
// deleting one small node saves 0.2 an hour, replacing the three 0.3.
// Delete deletes; Replace replaces, saving more.
func TestReplacementWinsWhenItSavesMoreThanDeleting(t *testing.T) {
	for _, policy := range []scaledown.ConsolidationPolicy{scaledown.ConsolidationDelete, scaledown.ConsolidationReplace} {
		t.Run(string(policy), func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			c := newCrowded(300_000, nil)
			c.nodes, c.pods = c.nodes[:3], nil
			for _, node := range c.nodes {
				c.pods = append(c.pods, appPod(node.Name+"-0", "2", "", node.Name, "web"))
			}
			c.small = newGroup(smallID, c.nodes...)
			c.small.options.Price = ptr.To(smallPrice)

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, c.snapshot(t), replacing(policy), scaledown.Progress{})

			g.Expect(plan.Consolidation).NotTo(BeNil())
			if policy == scaledown.ConsolidationDelete {
				g.Expect(plan.Consolidation.Replacement).To(BeNil())
				g.Expect(names(plan.Drain)).To(Equal([]string{"a"}))
				g.Expect(plan.Consolidation.Savings).To(Equal(smallPrice))
				return
			}
			g.Expect(plan.Consolidation.Replacement).NotTo(BeNil())
			g.Expect(plan.Consolidation.Replacement.Nodes()).To(Equal(1))
			g.Expect(names(plan.Consolidation.Removals)).To(Equal([]string{"a", "b", "c"}))
			g.Expect(plan.Consolidation.Savings).To(Equal(3*smallPrice - 300_000))
			g.Expect(plan.Drain).To(BeEmpty())
		})
	}
}

func TestReplacementMessageNamesTheNodesTheNewNodesAndTheSavings(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, newCrowded(500_000, nil).snapshot(t), replacing(scaledown.ConsolidationReplace), scaledown.Progress{})
	g.Expect(plan.Consolidation).NotTo(BeNil())
	g.Expect(plan.Consolidation.Message()).To(Equal("consolidation: replacing nodes a, b, c with 1 × " + largeID + " saves 0.1/h"))
}

// withTiny adds md-tiny, whose 3-core nodes at 0.15 an hour each take one
// of the 2.5-core pods, and prices md-large's 8-core nodes, which take
// three, at 0.4: md-large alone replaces a, b and c (0.6) by one node
// (saving 0.2, the fourth pod would need a second one), md-tiny alone
// replaces each node by a cheaper one (saving 0.2 too), and one large node
// for three pods and one tiny node for the fourth save 0.25.
func withTiny(c *crowded) *crowded {
	c.tiny = &testGroup{NodeGroup: &st.NodeGroup{Name: tinyID, Max: 10, Template: st.Node("tiny", "3", "4Gi")}}
	c.tiny.options.Price = ptr.To(pricing.Price(150_000))
	return c
}

// Replace mixes groups when a mix saves more than any group alone: the
// pods that pack well on large nodes take them, the rest small ones.
// Balanced mixes them too when the mix saves enough: 0.25 of the 0.8 the
// nodes cost for all their pods scores 0.31.
func TestReplacementMixesGroupsWhenThatSavesMore(t *testing.T) {
	const mixed = "consolidation: replacing nodes a, b, c, d with 1 × " + largeID + " and 1 × " + tinyID + " saves 0.25/h"
	for _, tt := range []struct {
		name        string
		policy      scaledown.ConsolidationPolicy
		threshold   float64
		wantMessage string
	}{
		{name: "Replace", policy: scaledown.ConsolidationReplace, wantMessage: mixed},
		{name: "Balanced at 0.3", policy: scaledown.ConsolidationBalanced, threshold: 0.3, wantMessage: mixed},
		{name: "not Balanced at 0.5", policy: scaledown.ConsolidationBalanced, threshold: 0.5},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			c := withTiny(newCrowded(400_000, nil))
			opts := replacing(tt.policy, func(o *scaledown.Options) { o.Consolidation.BalancedThreshold = tt.threshold })

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{})

			g.Expect(plan.Drain).To(BeEmpty(), "nothing is drained before the new nodes are Ready")
			if tt.wantMessage == "" {
				g.Expect(plan.Consolidation).To(BeNil())
				return
			}
			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(plan.Consolidation.Message()).To(Equal(tt.wantMessage))
		})
	}
}

// A mixed replacement drains the nodes it replaces once the new nodes of
// every group are Ready: a Ready large node does not make up for the tiny
// one.
func TestMixedReplacementWaitsForTheNewNodesOfEveryGroup(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	opts := replacing(scaledown.ConsolidationReplace)
	c := withTiny(newCrowded(400_000, nil))
	decidedOn := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{})
	g.Expect(decidedOn.Consolidation).NotTo(BeNil())
	r := &scaledown.Replacing{Consolidation: decidedOn.Consolidation, Started: st.Now.Add(-5 * time.Minute), Before: map[string]bool{}}

	c.large.Target, c.large.Nodes = 1, []string{"large-0"}
	c.tiny.Target = 1
	c.nodes = append(c.nodes, st.Node("large-0", "8", "32Gi"))
	plan := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{Replacing: r})
	g.Expect(plan.Replacing).NotTo(BeNil())
	g.Expect(plan.Replacing.Ready).To(BeFalse())
	g.Expect(plan.Replacing.Message()).To(HaveSuffix("waiting for the new nodes to be Ready (1 of 2)"))
	g.Expect(plan.Drain).To(BeEmpty())

	c.tiny.Nodes = []string{"tiny-0"}
	c.nodes = append(c.nodes, st.Node("tiny-0", "3", "4Gi"))
	plan = scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{Replacing: r})
	g.Expect(plan.Replacing.Abandoned).To(BeEmpty())
	g.Expect(plan.Replacing.Ready).To(BeTrue())
	g.Expect(names(plan.Drain)).To(ConsistOf("a", "b", "c", "d"))
}

// Balanced lets through the deletions that save enough: two of halfEmpty's
// three nodes, two thirds of the cost for half of the pods.
func TestBalancedConsolidationDeletesWhatSavesEnough(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	opts := replacing(scaledown.ConsolidationBalanced)
	plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, halfEmpty().snapshot(nil), opts, scaledown.Progress{})
	g.Expect(plan.Consolidation).NotTo(BeNil())
	g.Expect(names(plan.Drain)).To(ConsistOf("a", "b"))

	opts.Consolidation.BalancedThreshold = 2
	plan = scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, halfEmpty().snapshot(nil), opts, scaledown.Progress{})
	g.Expect(plan.Consolidation).To(BeNil(), "1.33 is below a threshold of 2")
}

// The replacement under way: the nodes it replaces are kept while its new
// node is not Ready, drained once it is, and left alone when it is not
// Ready within maxNodeProvisionTime or they can no longer go.
func TestReplacementDrainsOnlyOnceTheNewNodesAreReady(t *testing.T) {
	const awaiting = scaledown.ReasonAwaitingReplacement
	youngNotReady := func(n *corev1.Node) {
		n.CreationTimestamp.Time = st.Now.Add(-time.Minute)
		notReady(n)
	}
	tests := []struct {
		name string
		// newNode, when set, is the new node of md-large, registered.
		newNode *corev1.Node
		newPods []*corev1.Pod
		// started is how long before now the new node was asked for.
		started     time.Duration
		removeNodeD bool
		wantDrained []string
		wantKept    map[string]scaledown.Reason
		wantAbandon string
	}{
		{
			name: "no new node yet: it waits", started: time.Minute,
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": awaiting, "c": awaiting},
		},
		{
			name: "a new node registered but not Ready: it waits", started: 5 * time.Minute,
			newNode:  st.Node("large-0", "8", "32Gi", youngNotReady),
			wantKept: map[string]scaledown.Reason{"a": awaiting, "b": awaiting, "c": awaiting, "large-0": scaledown.ReasonReplacementUnderWay},
		},
		{
			name: "the new node is Ready: the replaced nodes are drained", started: 5 * time.Minute,
			newNode:     st.Node("large-0", "8", "32Gi"),
			wantDrained: []string{"a", "b", "c"},
			wantKept:    map[string]scaledown.Reason{"large-0": scaledown.ReasonReplacementUnderWay},
		},
		{
			name: "no Ready node within maxNodeProvisionTime: abandoned, nothing drained", started: 15 * time.Minute,
			newNode:     st.Node("large-0", "8", "32Gi", youngNotReady),
			wantAbandon: "0 of its 1 new node(s) Ready 15m0s after they were asked for (maxNodeProvisionTime)",
			wantKept:    map[string]scaledown.Reason{"large-0": scaledown.ReasonReplacementUnderWay},
		},
		{
			name: "the new node Ready, but a pod that forbids disruption came to a replaced node: abandoned", started: 5 * time.Minute,
			newNode:     st.Node("large-0", "8", "32Gi"),
			newPods:     []*corev1.Pod{appPod("a-1", "100m", "", "a", "web", withPodAnnotation(scaledown.DoNotDisruptAnnotation, "true"))},
			wantAbandon: "node a can no longer go: a pod on it is annotated karpenter.sh/do-not-disrupt=true",
			wantKept:    map[string]scaledown.Reason{"large-0": scaledown.ReasonReplacementUnderWay},
		},
		{
			name: "the new node Ready but taken by other pods: abandoned", started: 5 * time.Minute,
			newNode:     st.Node("large-0", "8", "32Gi"),
			newPods:     []*corev1.Pod{appPod("other-0", "7", "", "large-0", "other")},
			wantAbandon: "node a can no longer go: pod default/a-0 fits on no other node: 0/4 nodes are available: 4 Insufficient cpu.",
			wantKept:    map[string]scaledown.Reason{"large-0": scaledown.ReasonReplacementUnderWay},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			clk := clocktesting.NewFakeClock(st.Now)
			opts := replacing(scaledown.ConsolidationReplace)
			c := newCrowded(500_000, nil)
			decidedOn := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{})
			g.Expect(decidedOn.Consolidation).NotTo(BeNil())
			r := &scaledown.Replacing{Consolidation: decidedOn.Consolidation, Started: st.Now.Add(-tt.started), Before: map[string]bool{}}

			c.large.Target = 1
			if tt.newNode != nil {
				c.nodes = append(c.nodes, tt.newNode)
				c.large.Nodes = []string{tt.newNode.Name}
			}
			c.pods = append(c.pods, tt.newPods...)
			plan := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{Replacing: r})

			g.Expect(plan.Replacing).NotTo(BeNil())
			g.Expect(plan.Consolidation).To(BeNil(), "no other consolidation while one is under way")
			g.Expect(plan.Replacing.Abandoned).To(Equal(tt.wantAbandon))
			g.Expect(plan.Replacing.Ready).To(Equal(tt.wantDrained != nil))
			g.Expect(names(plan.Drain)).To(ConsistOf(tt.wantDrained))
			for _, removal := range plan.Drain {
				g.Expect(removal.ByConsolidation).To(BeTrue())
			}
			kept := reasons(plan.Kept)
			delete(kept, "d")
			if tt.wantAbandon != "" {
				// The nodes it was to replace are kept as before it.
				for _, name := range []string{"a", "b", "c"} {
					g.Expect(kept).To(HaveKeyWithValue(name, scaledown.ReasonNotUnderutilized))
					delete(kept, name)
				}
			}
			g.Expect(kept).To(Equal(tt.wantKept))
		})
	}
}

// A replacement drains the nodes it replaces only when their pods are
// still those it was decided on for consolidateAfter: a pod that came to
// one while the new node came up (kube-scheduler placed it there) would
// be moved at once. The day on the local stack saw three such pods
// evicted a second after they were bound (docs/cost.md).
func TestReplacementIsAbandonedWhenPodsCameToAReplacedNodeWithinConsolidateAfter(t *testing.T) {
	for _, came := range []bool{false, true} {
		t.Run(fmt.Sprintf("a pod came: %v", came), func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			clk := clocktesting.NewFakeClock(st.Now)
			opts := replacing(scaledown.ConsolidationReplace, func(o *scaledown.Options) { o.Consolidation.ConsolidateAfter = 10 * time.Minute })
			c := newCrowded(500_000, nil)
			planner := scaledown.NewPlanner(clk)
			g.Expect(planner.Plan(ctx, c.snapshot(t), opts, scaledown.Progress{}).Consolidation).To(BeNil(), "the cluster has not stayed the same long enough")
			clk.Step(10 * time.Minute)
			decidedOn := planner.Plan(ctx, c.snapshot(t), opts, scaledown.Progress{})
			g.Expect(decidedOn.Consolidation).NotTo(BeNil())
			g.Expect(decidedOn.Consolidation.Replacement).NotTo(BeNil())
			r := &scaledown.Replacing{Consolidation: decidedOn.Consolidation, Started: clk.Now(), Before: map[string]bool{}}

			clk.Step(time.Minute)
			c.large.Target, c.large.Nodes = 1, []string{"large-0"}
			c.nodes = append(c.nodes, st.Node("large-0", "8", "32Gi"))
			if came {
				c.pods = append(c.pods, appPod("a-1", "100m", "", "a", "web"))
			}
			plan := planner.Plan(ctx, c.snapshot(t), opts, scaledown.Progress{Replacing: r})

			g.Expect(plan.Replacing).NotTo(BeNil())
			if came {
				g.Expect(plan.Replacing.Abandoned).To(Equal("node a can no longer go: its pods changed within consolidateAfter (10m0s)"))
				g.Expect(plan.Drain).To(BeEmpty())
				return
			}
			g.Expect(plan.Replacing.Abandoned).To(BeEmpty())
			g.Expect(names(plan.Drain)).To(ConsistOf("a", "b", "c"))
		})
	}
}

// A policy that no longer replaces does not follow the replacement under
// way: the actuation forgets it, and the new node is left to scale-down.
func TestReplacementIsNotFollowedOnceThePolicyNoLongerReplaces(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	c := newCrowded(500_000, nil)
	decidedOn := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), replacing(scaledown.ConsolidationReplace), scaledown.Progress{})
	g.Expect(decidedOn.Consolidation).NotTo(BeNil())
	r := &scaledown.Replacing{Consolidation: decidedOn.Consolidation, Started: st.Now, Before: map[string]bool{}}
	c.large.Target, c.large.Nodes = 1, []string{"large-0"}
	c.nodes = append(c.nodes, st.Node("large-0", "8", "32Gi"))

	plan := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), replacing(scaledown.ConsolidationDelete), scaledown.Progress{Replacing: r})

	g.Expect(plan.Replacing).To(BeNil())
	g.Expect(plan.Drain).To(BeEmpty(), "the nodes it was to replace are not drained")
	g.Expect(names(plan.Empty)).To(ConsistOf("large-0"), "the new node is empty capacity, which Delete removes")
}

// A replacement whose first node's pods go, in the simulation, to
// another node it replaces is carried out: the pod placed there is no pod
// waiting for that node. Three 4-core nodes at 0.2, none below the
// threshold: a runs 1 core and 8Gi, which fits beside b's or c's 2.5
// cores; b's and c's pods fit nowhere else. Deleting a saves 0.2;
// replacing the three by one 8-core node at 0.3 saves 0.3.
func TestReplacementWhosePodsMoveOntoAnotherReplacedNodeIsCarriedOut(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	opts := replacing(scaledown.ConsolidationReplace)
	c := &crowded{largePrice: 300_000}
	for _, name := range []string{"a", "b", "c"} {
		c.nodes = append(c.nodes, node(name))
	}
	c.pods = []*corev1.Pod{appPod("a-0", "1", "8Gi", "a", "web"), appPod("b-0", "2500m", "", "b", "web"), appPod("c-0", "2500m", "", "c", "web")}
	c.small = newGroup(smallID, c.nodes...)
	c.small.options.Price = ptr.To(smallPrice)
	c.large = &testGroup{NodeGroup: &st.NodeGroup{Name: largeID, Max: 10, Template: st.Node("large", "8", "32Gi")}}
	c.large.options.Price = ptr.To(c.largePrice)

	decidedOn := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{})
	g.Expect(decidedOn.Consolidation).NotTo(BeNil())
	g.Expect(decidedOn.Consolidation.Replacement).NotTo(BeNil())
	g.Expect(names(decidedOn.Consolidation.Removals)).To(ConsistOf("a", "b", "c"))

	r := &scaledown.Replacing{Consolidation: decidedOn.Consolidation, Started: st.Now.Add(-5 * time.Minute), Before: map[string]bool{}}
	c.large.Target, c.large.Nodes = 1, []string{"large-0"}
	c.nodes = append(c.nodes, st.Node("large-0", "8", "32Gi"))
	plan := scaledown.NewPlanner(clk).Plan(ctx, c.snapshot(t), opts, scaledown.Progress{Replacing: r})

	g.Expect(plan.Replacing).NotTo(BeNil())
	g.Expect(plan.Replacing.Abandoned).To(BeEmpty())
	g.Expect(plan.Replacing.Ready).To(BeTrue())
	g.Expect(names(plan.Drain)).To(ConsistOf("a", "b", "c"))
}
