package scaledown_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// appPod returns a running pod of the ReplicaSet "app" labelled app=label
// on the node.
func appPod(name, cpu, memory, nodeName, label string, opts ...st.PodOption) *corev1.Pod {
	return st.Pod(name, cpu, memory, append([]st.PodOption{st.OwnedBy("app"), st.OnNode(nodeName), st.WithPodLabels("app", label)}, opts...)...)
}

// halfEmpty are three 4-core 16Gi nodes, each half used on one resource at
// least, so at the threshold 0.5 and kept by scale-down: "a" runs 2 cores,
// "b" 8Gi, "c" 2 cores and 8Gi. Together their pods fill one node: "a" and
// "b" can go, their pods moved onto "c" (directly or through each other).
// The pod of "b" is labelled app=db, the others app=web; bPodOpts change it.
func halfEmpty(bPodOpts ...st.PodOption) cluster {
	return cluster{
		nodes: []*corev1.Node{node("a"), node("b"), node("c")},
		pods: []*corev1.Pod{
			appPod("a-0", "2", "", "a", "web"),
			appPod("b-0", "", "8Gi", "b", "db", bPodOpts...),
			appPod("c-0", "2", "", "c", "web"), appPod("c-1", "", "8Gi", "c", "web"),
		},
	}
}

// consolidating are the test options with delete consolidation on, after
// no wait, with a budget of every node.
func consolidating(change ...func(*scaledown.Options)) scaledown.Options {
	return options(append([]func(*scaledown.Options){func(o *scaledown.Options) {
		o.Consolidation = scaledown.ConsolidationOptions{
			Policy: scaledown.ConsolidationDelete, Budget: intstr.FromString("100%"), MaxSimulations: 100,
		}
	}}, change...)...)
}

// consolidationRemovals plans c with planner and returns the names of the
// nodes its consolidation removes, none when it decides nothing.
func consolidationRemovals(ctx context.Context, planner *scaledown.Planner, opts scaledown.Options) func(cluster) []string {
	return func(c cluster) []string {
		plan := planner.Plan(ctx, c.snapshot(nil), opts, scaledown.Progress{})
		if plan.Consolidation == nil {
			return nil
		}
		return names(plan.Consolidation.Removals)
	}
}

// dbPDB is a budget over the pods labelled app=db, allowing no disruption.
func dbPDB() *policyv1.PodDisruptionBudget {
	budget := pdb("default", 0)
	budget.Spec.Selector.MatchLabels = map[string]string{"app": "db"}
	return budget
}

// A 4-core 16Gi node at the default rates.
const defaultNodePrice = 4*pricing.DefaultPerCPU + 16*pricing.DefaultPerGiB

func TestConsolidationRemovesTheNodesWhosePodsFitElsewhere(t *testing.T) {
	const notUnder, held = scaledown.ReasonNotUnderutilized, scaledown.ReasonConsolidationBudget
	tests := []struct {
		name     string
		cluster  cluster
		group    func(*testGroup)
		opts     scaledown.Options
		progress scaledown.Progress
		// wantRemoved are the nodes consolidation drains; nil when it
		// decides nothing.
		wantRemoved []string
		wantKept    map[string]scaledown.Reason
		wantSavings pricing.Price
	}{
		{
			name:     "off, nothing happens: every node is at the threshold",
			cluster:  halfEmpty(),
			opts:     options(),
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder},
		},
		{
			name:     "disabled, nothing happens",
			cluster:  halfEmpty(),
			opts:     consolidating(func(o *scaledown.Options) { o.Consolidation.Policy = scaledown.ConsolidationDisabled }),
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder},
		},
		{
			name:        "on, two of the three half-empty nodes go together",
			cluster:     halfEmpty(),
			opts:        consolidating(),
			wantRemoved: []string{"b", "a"},
			wantKept:    map[string]scaledown.Reason{"c": notUnder},
			wantSavings: 2 * defaultNodePrice,
		},
		{
			name:        "a pod with safe-to-evict=false keeps its node",
			cluster:     halfEmpty(withPodAnnotation(scaledown.SafeToEvictAnnotation, "false")),
			opts:        consolidating(),
			wantRemoved: []string{"a", "c"},
			wantKept:    map[string]scaledown.Reason{"b": notUnder},
			wantSavings: 2 * defaultNodePrice,
		},
		{
			name:        "a pod with karpenter.sh/do-not-disrupt=true keeps its node",
			cluster:     halfEmpty(withPodAnnotation(scaledown.DoNotDisruptAnnotation, "true")),
			opts:        consolidating(),
			wantRemoved: []string{"a", "c"},
			wantKept:    map[string]scaledown.Reason{"b": notUnder},
			wantSavings: 2 * defaultNodePrice,
		},
		{
			name: "a PodDisruptionBudget that allows no disruption keeps its pod's node",
			cluster: func() cluster {
				c := halfEmpty()
				c.pdbs = []*policyv1.PodDisruptionBudget{dbPDB()}
				return c
			}(),
			opts:        consolidating(),
			wantRemoved: []string{"a", "c"},
			wantKept:    map[string]scaledown.Reason{"b": notUnder},
			wantSavings: 2 * defaultNodePrice,
		},
		{
			name:        "the group keeps its min size",
			cluster:     halfEmpty(),
			group:       func(g *testGroup) { g.Min = 2 },
			opts:        consolidating(),
			wantRemoved: []string{"b"},
			wantKept:    map[string]scaledown.Reason{"a": notUnder, "c": notUnder},
			wantSavings: defaultNodePrice,
		},
		{
			name:        "a budget of one node removes one node",
			cluster:     halfEmpty(),
			opts:        consolidating(func(o *scaledown.Options) { o.Consolidation.Budget = intstr.FromInt32(1) }),
			wantRemoved: []string{"b"},
			wantKept:    map[string]scaledown.Reason{"a": notUnder, "c": notUnder},
			wantSavings: defaultNodePrice,
		},
		{
			name:        "a budget in percent of the group is rounded up: 10% of 3 nodes is one",
			cluster:     halfEmpty(),
			opts:        consolidating(func(o *scaledown.Options) { o.Consolidation.Budget = intstr.FromString("10%") }),
			wantRemoved: []string{"b"},
			wantKept:    map[string]scaledown.Reason{"a": notUnder, "c": notUnder},
			wantSavings: defaultNodePrice,
		},
		{
			name:     "a budget of 0 removes nothing",
			cluster:  halfEmpty(),
			opts:     consolidating(func(o *scaledown.Options) { o.Consolidation.Budget = intstr.FromInt32(0) }),
			wantKept: map[string]scaledown.Reason{"a": held, "b": held, "c": held},
		},
		{
			name:     "one simulation per pass tries the first candidate only",
			cluster:  halfEmpty(),
			opts:     consolidating(func(o *scaledown.Options) { o.Consolidation.MaxSimulations = 1 }),
			wantKept: map[string]scaledown.Reason{"a": notUnder, "c": notUnder},
			// "b" runs the pods worth least for its price.
			wantRemoved: []string{"b"},
			wantSavings: defaultNodePrice,
		},
		{
			name:     "nodes that cost nothing save nothing",
			cluster:  halfEmpty(),
			group:    func(g *testGroup) { g.options.Price = ptr.To[pricing.Price](0) },
			opts:     consolidating(),
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder},
		},
		{
			name:     "it waits while nodes are being removed",
			cluster:  cluster{nodes: []*corev1.Node{node("a"), node("b"), node("c"), node("going")}, pods: halfEmpty().pods},
			opts:     consolidating(),
			progress: scaledown.Progress{Deleting: map[string]bool{"going": true}, Draining: 1},
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder, "going": scaledown.ReasonCurrentlyBeingDeleted},
		},
		{
			name: "it waits while scale-down removes an unneeded node",
			cluster: func() cluster {
				c := halfEmpty()
				c.nodes = append(c.nodes, node("idle"))
				return c
			}(),
			opts:     consolidating(),
			wantKept: map[string]scaledown.Reason{"a": notUnder, "b": notUnder, "c": notUnder},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			g.Expect(tt.opts.Validate()).To(Succeed())
			planner := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now))
			snap := tt.cluster.snapshot(tt.group)

			plan := planner.Plan(ctx, snap, tt.opts, tt.progress)

			g.Expect(reasons(plan.Kept)).To(Equal(tt.wantKept), "nodes kept")
			if tt.wantRemoved == nil {
				g.Expect(plan.Consolidation).To(BeNil())
				return
			}
			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(names(plan.Consolidation.Removals)).To(Equal(tt.wantRemoved), "in the order chosen")
			g.Expect(names(plan.Drain)).To(ConsistOf(tt.wantRemoved), "drained through the safe path")
			g.Expect(plan.Empty).To(BeEmpty())
			g.Expect(plan.Consolidation.Savings).To(Equal(tt.wantSavings))
		})
	}
}

func TestConsolidationMessageNamesTheNodesAndTheSavings(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	planner := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now))
	plan := planner.Plan(ctx, halfEmpty().snapshot(func(g *testGroup) { g.options.Price = ptr.To[pricing.Price](192_000) }), consolidating(), scaledown.Progress{})
	g.Expect(plan.Consolidation).NotTo(BeNil())
	g.Expect(plan.Consolidation.Message()).To(Equal("consolidation: removing nodes b, a saves 0.384/h"))
}

// A removal names the pods bound to its node when consolidation chose it,
// the only ones its drain evicts.
func TestConsolidationRemovalsNameThePodsTheyMove(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	planner := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now))
	plan := planner.Plan(ctx, halfEmpty().snapshot(nil), consolidating(), scaledown.Progress{})
	g.Expect(plan.Consolidation).NotTo(BeNil())
	moves := map[string]map[types.UID]bool{}
	for _, removal := range plan.Drain {
		moves[removal.Node.Name] = removal.Moves
	}
	g.Expect(moves).To(Equal(map[string]map[types.UID]bool{"a": {"uid-a-0": true}, "b": {"uid-b-0": true}}))
}

// A node is a candidate once the cluster's nodes and its own pods have
// stayed the same for consolidateAfter; a change starts the wait again.
func TestConsolidationWaitsForTheClusterToSettle(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	planner := scaledown.NewPlanner(clk)
	opts := consolidating(func(o *scaledown.Options) { o.Consolidation.ConsolidateAfter = 5 * time.Minute })
	removed := consolidationRemovals(ctx, planner, opts)

	g.Expect(removed(halfEmpty())).To(BeEmpty(), "the first sight starts the wait")
	clk.Step(4 * time.Minute)
	g.Expect(removed(halfEmpty())).To(BeEmpty())

	// A new pod on "b", which requests nothing: its wait starts again, the
	// others' goes on.
	moved := halfEmpty()
	moved.pods = append(moved.pods, appPod("b-1", "", "", "b", "web"))
	clk.Step(time.Minute)
	g.Expect(removed(moved)).To(Equal([]string{"a", "c"}), "b's pods changed a minute ago")
	clk.Step(5 * time.Minute)
	g.Expect(removed(moved)).To(Equal([]string{"b", "a"}))

	// A node that joins the cluster starts the wait of all.
	grown := moved
	grown.nodes = append(grown.nodes[:3:3], node("d", st.WithTaint("dedicated", "other", corev1.TaintEffectNoSchedule)))
	grown.pods = append(grown.pods[:len(grown.pods):len(grown.pods)], appPod("d-0", "4", "", "d", "web"))
	clk.Step(time.Minute)
	g.Expect(removed(grown)).To(BeEmpty(), "a node joined a minute ago")
	clk.Step(5 * time.Minute)
	g.Expect(removed(grown)).NotTo(BeEmpty())

	// Turned off, it forgets: turned on again, it waits again.
	planner.Plan(ctx, grown.snapshot(nil), options(), scaledown.Progress{})
	g.Expect(removed(grown)).To(BeEmpty(), "turned on again just now")
}

func TestConsolidationOptionsAreValidated(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*scaledown.ConsolidationOptions)
		wantErr string
	}{
		{name: "valid", change: func(*scaledown.ConsolidationOptions) {}},
		{name: "off needs nothing else", change: func(o *scaledown.ConsolidationOptions) {
			*o = scaledown.ConsolidationOptions{Policy: scaledown.ConsolidationDisabled}
		}},
		{name: "an unknown policy", change: func(o *scaledown.ConsolidationOptions) { o.Policy = "Shrink" }, wantErr: "consolidation policy must be"},
		{name: "a negative wait", change: func(o *scaledown.ConsolidationOptions) { o.ConsolidateAfter = -time.Second }, wantErr: "consolidateAfter"},
		{name: "no simulation", change: func(o *scaledown.ConsolidationOptions) { o.MaxSimulations = 0 }, wantErr: "at least 1 simulation"},
		{name: "a budget that is no number", change: func(o *scaledown.ConsolidationOptions) { o.Budget = intstr.FromString("many") }, wantErr: "neither a number nor a percentage"},
		{name: "a budget over 100%", change: func(o *scaledown.ConsolidationOptions) { o.Budget = intstr.FromString("101%") }, wantErr: "from 0% to 100%"},
		{name: "a negative budget", change: func(o *scaledown.ConsolidationOptions) { o.Budget = intstr.FromInt32(-1) }, wantErr: "from 0% to 100%"},
		{name: "a scheduled budget over 100%", change: func(o *scaledown.ConsolidationOptions) {
			o.Budgets = []scaledown.ScheduledBudget{{Name: "budgets[0]", Nodes: intstr.FromString("101%")}}
		}, wantErr: `the consolidation budget budgets[0] "101%" is`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := consolidating()
			tt.change(&opts.Consolidation)
			err := opts.Validate()
			if tt.wantErr == "" {
				NewWithT(t).Expect(err).NotTo(HaveOccurred())
				return
			}
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}

// A group's own budget replaces the ClusterAutoscaler's for its nodes
// only: with halfEmpty's "a" and "b" in a group of their own, a budget of
// 0 there keeps them, and the pods of "c", in another group, move onto
// them; a group's budget of every node consolidates it when the
// ClusterAutoscaler's budget is 0.
func TestConsolidationBudgetOfAGroup(t *testing.T) {
	const held = scaledown.ReasonConsolidationBudget
	tests := []struct {
		name                 string
		clusterBudget, ownAB intstr.IntOrString
		wantRemoved          []string
		wantKept             map[string]scaledown.Reason
		wantHeldBy           string
	}{
		{
			name:          "a group's budget of 0 keeps its nodes while another group's are consolidated",
			clusterBudget: intstr.FromString("100%"), ownAB: intstr.FromInt32(0),
			wantRemoved: []string{"c"},
			wantKept:    map[string]scaledown.Reason{"a": held, "b": held},
			wantHeldBy:  "consolidation is held by the disruption budget the group's consolidation-budget annotation (nodes 0)",
		},
		{
			name:          "a group's budget of every node consolidates it despite the ClusterAutoscaler's 0",
			clusterBudget: intstr.FromInt32(0), ownAB: intstr.FromString("100%"),
			wantRemoved: []string{"b", "a"},
			wantKept:    map[string]scaledown.Reason{"c": held},
			wantHeldBy:  "consolidation is held by the disruption budget spec.consolidation.budget (nodes 0)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			c := halfEmpty()
			ab := newGroup("ng-ab", c.nodes[0], c.nodes[1])
			ab.options.ConsolidationBudget = &tt.ownAB
			snap := snapshot.New(snapshot.Input{
				Nodes: c.nodes, Pods: c.pods, Controllers: st.Controllers(c.pods...),
				NodeGroups: []nodegroups.NodeGroup{ab, newGroup("ng-c", c.nodes[2])},
			})
			opts := consolidating(func(o *scaledown.Options) { o.Consolidation.Budget = tt.clusterBudget })
			g.Expect(opts.Validate()).To(Succeed())

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, snap, opts, scaledown.Progress{})

			g.Expect(reasons(plan.Kept)).To(Equal(tt.wantKept), "nodes kept")
			for name := range tt.wantKept {
				g.Expect(plan.Kept[name].Message).To(Equal(tt.wantHeldBy), name)
			}
			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(names(plan.Consolidation.Removals)).To(Equal(tt.wantRemoved))
		})
	}
}

// officeHours is a window from 09:00 to 17:00 UTC every day: st.Now, at
// noon, is inside it.
func officeHours(t *testing.T) *schedule.Schedule {
	t.Helper()
	windows, err := schedule.New("0 9 * * *", "UTC", 8*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return windows
}

// A budget of nodes "0" inside a window holds consolidation while the
// window is open, names itself on the nodes it holds, and lets go once the
// window closes.
func TestConsolidationBudgetWindowHoldsConsolidationWhileOpen(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	planner := scaledown.NewPlanner(clk)
	snap := halfEmpty().snapshot(nil)
	opts := consolidating(func(o *scaledown.Options) {
		o.Consolidation.Budgets = []scaledown.ScheduledBudget{{Name: "budgets[0]", Nodes: intstr.FromInt32(0), Schedule: officeHours(t)}}
	})
	g.Expect(opts.Validate()).To(Succeed())

	plan := planner.Plan(ctx, snap, opts, scaledown.Progress{})
	g.Expect(plan.Consolidation).To(BeNil(), "inside the window")
	held := scaledown.ReasonConsolidationBudget
	g.Expect(reasons(plan.Kept)).To(Equal(map[string]scaledown.Reason{"a": held, "b": held, "c": held}))
	g.Expect(plan.Kept["a"].Message).To(Equal(`consolidation is held by the disruption budget budgets[0] (nodes 0, schedule "0 9 * * *" for 8h0m0s, ` +
		`window 2026-01-01T09:00:00Z to 2026-01-01T17:00:00Z)`))

	clk.SetTime(time.Date(2026, time.January, 1, 17, 0, 0, 0, time.UTC))
	plan = planner.Plan(ctx, snap, opts, scaledown.Progress{})
	g.Expect(plan.Consolidation).NotTo(BeNil(), "once the window has closed")
	g.Expect(names(plan.Consolidation.Removals)).To(Equal([]string{"b", "a"}))
}

// A budget that selects node groups holds only theirs: with halfEmpty's
// "a" and "b" in a group "ng-ab" and "c" in "ng-c", an open window of 0
// for ng-ab, by name or by its labels, keeps a and b, and the pods of c
// move onto them.
func TestConsolidationBudgetOfSelectedGroups(t *testing.T) {
	for name, groups := range map[string]*scaledown.GroupSelector{
		"by name":   {Names: map[string]bool{"ng-ab": true}},
		"by labels": {Labels: labels.SelectorFromSet(labels.Set{"tier": "frontend"})},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			c := halfEmpty()
			ab := newGroup("ng-ab", c.nodes[0], c.nodes[1])
			ab.GroupLabels = map[string]string{"tier": "frontend"}
			snap := snapshot.New(snapshot.Input{
				Nodes: c.nodes, Pods: c.pods, Controllers: st.Controllers(c.pods...),
				NodeGroups: []nodegroups.NodeGroup{ab, newGroup("ng-c", c.nodes[2])},
			})
			opts := consolidating(func(o *scaledown.Options) {
				o.Consolidation.Budgets = []scaledown.ScheduledBudget{{Name: "budgets[0]", Nodes: intstr.FromInt32(0), Schedule: officeHours(t), Groups: groups}}
			})
			g.Expect(opts.Validate()).To(Succeed())

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, snap, opts, scaledown.Progress{})

			held := scaledown.ReasonConsolidationBudget
			g.Expect(reasons(plan.Kept)).To(Equal(map[string]scaledown.Reason{"a": held, "b": held}), "nodes kept")
			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(names(plan.Consolidation.Removals)).To(Equal([]string{"c"}))
		})
	}
}

// Where several budgets apply at once, the smallest wins; a percentage is
// of the group's target size, rounded up, as the budget's.
func TestConsolidationSmallestBudgetThatAppliesWins(t *testing.T) {
	closed, err := schedule.New("0 18 * * *", "UTC", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		budgets     []scaledown.ScheduledBudget
		wantRemoved []string
	}{
		{
			name:        "no budget but the ClusterAutoscaler's 100%",
			wantRemoved: []string{"b", "a"},
		},
		{
			name:        "a budget at all times of 1",
			budgets:     []scaledown.ScheduledBudget{{Name: "always", Nodes: intstr.FromInt32(1)}},
			wantRemoved: []string{"b"},
		},
		{
			name: "an open window of 1 under a budget at all times of 2",
			budgets: []scaledown.ScheduledBudget{
				{Name: "always", Nodes: intstr.FromInt32(2)},
				{Name: "office", Nodes: intstr.FromInt32(1), Schedule: officeHours(t)},
			},
			wantRemoved: []string{"b"},
		},
		{
			name:        "a closed window of 0",
			budgets:     []scaledown.ScheduledBudget{{Name: "evening", Nodes: intstr.FromInt32(0), Schedule: closed}},
			wantRemoved: []string{"b", "a"},
		},
		{
			name:        "an open window of 10% of 3 nodes: one",
			budgets:     []scaledown.ScheduledBudget{{Name: "office", Nodes: intstr.FromString("10%"), Schedule: officeHours(t)}},
			wantRemoved: []string{"b"},
		},
		{
			name:        "an open window of 34% of 3 nodes: two",
			budgets:     []scaledown.ScheduledBudget{{Name: "office", Nodes: intstr.FromString("34%"), Schedule: officeHours(t)}},
			wantRemoved: []string{"b", "a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			opts := consolidating(func(o *scaledown.Options) { o.Consolidation.Budgets = tt.budgets })
			g.Expect(opts.Validate()).To(Succeed())

			plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, halfEmpty().snapshot(nil), opts, scaledown.Progress{})

			g.Expect(plan.Consolidation).NotTo(BeNil())
			g.Expect(names(plan.Consolidation.Removals)).To(Equal(tt.wantRemoved))
		})
	}
}

// A consolidation whose saving was taken back, as when the pods it evicted
// came back elsewhere than simulated and a scale-up bought nodes for them,
// is not decided again for the same pods from a cluster that costs as
// much: that would go round for ever. The same nodes as when it decided
// (nothing was done: DryRun, a failure) and another workload may decide
// again, and so may the same pods an hour later.
func TestConsolidationIsNotDecidedAgainWhenItsSavingWasTakenBack(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	planner := scaledown.NewPlanner(clk)
	opts := consolidating(func(o *scaledown.Options) { o.Consolidation.ConsolidateAfter = 5 * time.Minute })
	removed := consolidationRemovals(ctx, planner, opts)
	// The same pods on three other nodes of the same price, as a
	// scale-up brings them back.
	again := func(suffix string, extra ...*corev1.Pod) cluster {
		c := cluster{}
		for _, n := range halfEmpty().nodes {
			c.nodes = append(c.nodes, node(n.Name+suffix))
		}
		for _, p := range halfEmpty().pods {
			c.pods = append(c.pods, appPod(p.Name+suffix, p.Spec.Containers[0].Resources.Requests.Cpu().String(),
				p.Spec.Containers[0].Resources.Requests.Memory().String(), p.Spec.NodeName+suffix, p.Labels["app"]))
		}
		c.pods = append(c.pods, extra...)
		return c
	}

	g.Expect(removed(halfEmpty())).To(BeEmpty(), "the first sight starts the wait")
	clk.Step(5 * time.Minute)
	g.Expect(removed(halfEmpty())).To(Equal([]string{"b", "a"}))
	g.Expect(removed(halfEmpty())).To(Equal([]string{"b", "a"}), "nothing was done: the same decision")

	taken := again("-2")
	g.Expect(removed(taken)).To(BeEmpty(), "the new nodes start the wait")
	clk.Step(5 * time.Minute)
	g.Expect(removed(taken)).To(BeEmpty(), "the same pods on nodes that cost as much")

	grown := again("-3", appPod("c-2", "", "", "c-3", "web"))
	g.Expect(removed(grown)).To(BeEmpty(), "the new nodes start the wait")
	clk.Step(5 * time.Minute)
	g.Expect(removed(grown)).To(Equal([]string{"b-3", "a-3"}), "another pod: another workload")

	later := again("-4")
	g.Expect(removed(later)).To(BeEmpty(), "the new nodes start the wait")
	clk.Step(time.Hour)
	g.Expect(removed(later)).To(Equal([]string{"b-4", "a-4"}), "an hour later")
}
