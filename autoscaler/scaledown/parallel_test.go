package scaledown_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
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
