package scaledown_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
)

// TestPlanOnSeveralWorkersIsThePlanOnOne plans scale-down, over generated
// clusters of several sizes, with and without DRA devices and volumes,
// with 1, 2 and 3 workers that take every candidate they may, and expects
// the same plan: the unneeded nodes in order, the removals, and why every
// other node stays, in words. The threshold varies, so that some clusters
// have candidates that go among many that stay, and some seeds have a
// node being deleted, whose pods move first, and a disruption budget.
func TestPlanOnSeveralWorkersIsThePlanOnOne(t *testing.T) {
	// Seeds where candidates that go come among several that stay, the
	// case the workers change.
	mixed := 0
	for seed := range uint64(24) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			// Quiet: the plans log every node kept.
			ctx := klog.NewContext(t.Context(), logr.Discard())
			in := generatedClusterOf(clustergen.Options{
				Seed: seed, NodesPerKind: []int{3, 6, 12}[seed%3], PendingPods: 1,
				DRA: seed%2 == 1, Volumes: seed%4 == 2,
			})
			progress := scaledown.Progress{}
			if seed%5 == 1 {
				progress.Deleting = map[string]bool{in.Nodes[len(in.Nodes)/2].Name: true}
			}
			if seed%3 == 1 {
				in.PodDisruptionBudgets = append(in.PodDisruptionBudgets, budgetOver(in, 2))
			}
			var plans []string
			for _, workers := range []int{1, 2, 3} {
				opts := options(func(o *scaledown.Options) {
					o.Groups.ScaleDownUtilizationThreshold = []float64{0.5, 0.7, 0.9, 1}[seed%4]
					o.MaxParallelDrains, o.MaxEmptyBulkDelete = len(in.Nodes), len(in.Nodes)
					o.Workers, o.MinParallelWork = workers, 0
				})
				plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, snapshot.New(in), opts, progress)
				plans = append(plans, describePlan(plan))
				if workers == 1 {
					stayed := 0
					for _, kept := range plan.Kept {
						if kept.Reason == scaledown.ReasonNoPlaceToMovePods || kept.Reason == scaledown.ReasonBlockedByPod {
							stayed++
						}
					}
					t.Logf("%d nodes: %d unneeded, %d candidates stay", len(in.Nodes), len(plan.Unneeded), stayed)
					if len(plan.Unneeded) > 0 && stayed > 1 {
						mixed++
					}
				}
			}
			g.Expect(plans[1]).To(Equal(plans[0]), "2 workers")
			g.Expect(plans[2]).To(Equal(plans[0]), "3 workers")
		})
	}
	if mixed < 16 {
		t.Errorf("only %d of 24 clusters have candidates that go and several that stay", mixed)
	}
}

// budgetOver is a disruption budget that allows allowed disruptions of
// the app of the first pod of in that has one.
func budgetOver(in snapshot.Input, allowed int32) *policyv1.PodDisruptionBudget {
	for _, pod := range in.Pods {
		if app := pod.Labels[clustergen.AppLabel]; app != "" {
			return &policyv1.PodDisruptionBudget{
				ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: pod.Namespace},
				Spec: policyv1.PodDisruptionBudgetSpec{
					MinAvailable: ptr.To(intstr.FromInt32(1)),
					Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{clustergen.AppLabel: app}},
				},
				Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
			}
		}
	}
	panic("no pod of an app")
}

// describePlan says everything a scale-down plan decided, by names.
func describePlan(plan *scaledown.Plan) string {
	var b []byte
	for _, u := range plan.Unneeded {
		b = fmt.Appendf(b, "unneeded %s empty=%v utilization=%v since=%v removableAt=%v\n", u.Node.Name, u.Empty, u.Utilization, u.Since, u.RemovableAt)
	}
	for _, removal := range plan.Empty {
		b = fmt.Appendf(b, "empty %s\n", removal.Node.Name)
	}
	for _, removal := range plan.Drain {
		b = fmt.Appendf(b, "drain %s\n", removal.Node.Name)
	}
	for _, name := range slices.Sorted(maps.Keys(plan.Kept)) {
		b = fmt.Appendf(b, "kept %s: %s: %s\n", name, plan.Kept[name].Reason, plan.Kept[name].Message)
	}
	return string(b)
}

// TestConsolidationOnSeveralWorkersIsTheOneOfOne plans consolidation, by
// deleting and by replacing, over generated clusters where nothing is
// underutilized, with 1, 2 and 3 workers that take every candidate they
// may, and expects the same plan and the same consolidation: the nodes
// removed in order, what they save and the new nodes. The budgets vary,
// so that some groups run out of them while others go on; a large group
// at zero nodes may replace the others' nodes.
func TestConsolidationOnSeveralWorkersIsTheOneOfOne(t *testing.T) {
	// Seeds where consolidation removes nodes and several candidates
	// stay, the case the workers change.
	mixed := 0
	for seed := range uint64(24) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			in := generatedClusterOf(clustergen.Options{
				Seed: seed, NodesPerKind: []int{3, 6, 12}[seed%3], PendingPods: 1,
				DRA: seed%2 == 1, Volumes: seed%4 == 2,
			})
			// Three groups by turns, whose budgets run out apart, and a
			// large one at zero nodes.
			in.NodeGroups = nil
			for i := range 3 {
				group := &st.NodeGroup{Name: fmt.Sprintf("ng-%d", i), Max: 1000}
				for n := i; n < len(in.Nodes); n += 3 {
					group.Nodes = append(group.Nodes, in.Nodes[n].Name)
					group.Target++
				}
				in.NodeGroups = append(in.NodeGroups, group)
			}
			in.NodeGroups = append(in.NodeGroups, &st.NodeGroup{Name: "large", Max: 10, Template: st.Node("large", "16", "64Gi")})
			if seed%3 == 1 {
				in.PodDisruptionBudgets = append(in.PodDisruptionBudgets, budgetOver(in, 2))
			}
			policy := []scaledown.ConsolidationPolicy{scaledown.ConsolidationDelete, scaledown.ConsolidationReplace}[seed/2%2]
			var plans []string
			for _, workers := range []int{1, 2, 3} {
				// The candidates that stay, counted from the log.
				stayed := 0
				ctx := klog.NewContext(t.Context(), funcr.New(func(_, args string) {
					if strings.Contains(args, "Consolidation cannot remove node") {
						stayed++
					}
				}, funcr.Options{Verbosity: 5}))
				opts := options(func(o *scaledown.Options) {
					// Nothing underutilized: consolidation's turn.
					o.Groups.ScaleDownUtilizationThreshold = 0
					o.Consolidation = consolidation(policy)
					o.Consolidation.Budget = []intstr.IntOrString{intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromString("50%"), intstr.FromString("100%")}[seed/3%4]
					o.Workers, o.MinParallelWork = workers, 0
				})
				snap := snapshot.New(in)
				// The generated groups have no template of their own;
				// they fail, and the large group replaces.
				_ = simulator.SetTemplates(ctx, snap, opts.NodeRules)
				plan := scaledown.NewPlanner(clocktesting.NewFakeClock(st.Now)).Plan(ctx, snap, opts, scaledown.Progress{})
				plans = append(plans, describePlan(plan)+describeConsolidation(plan.Consolidation))
				if workers == 1 {
					removed := 0
					if plan.Consolidation != nil {
						removed = len(plan.Consolidation.Removals)
					}
					t.Logf("%d nodes, %s: %d removed, %d candidates stay", len(in.Nodes), policy, removed, stayed)
					if removed > 0 && stayed > 1 {
						mixed++
					}
				}
			}
			g.Expect(plans[1]).To(Equal(plans[0]), "2 workers")
			g.Expect(plans[2]).To(Equal(plans[0]), "3 workers")
		})
	}
	if mixed < 12 {
		t.Errorf("only %d of 24 clusters have nodes consolidated and several candidates that stay", mixed)
	}
}

// describeConsolidation says what a consolidation decided, by names.
func describeConsolidation(c *scaledown.Consolidation) string {
	if c == nil {
		return "no consolidation\n"
	}
	b := fmt.Appendf(nil, "consolidation saves %s\n", c.Savings)
	for _, removal := range c.Removals {
		b = fmt.Appendf(b, "consolidation removes %s\n", removal.Node.Name)
	}
	if r := c.Replacement; r != nil {
		for _, g := range r.Groups {
			b = fmt.Appendf(b, "replaced by %d of %s\n", g.Nodes, g.Group.ID())
		}
		b = fmt.Appendf(b, "replacements cost %s\n", r.Price)
	}
	return string(b)
}
