package scaleup_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// budget bounds the pending pods a plan takes on.
func budget(pods int) func(*scaleup.Options) {
	return func(o *scaleup.Options) { o.MaxPendingPodsPerLoop = pods }
}

// pendingPods are n pods of cpu each, the i-th created i seconds after the
// first, with opts.
func pendingPods(prefix string, n int, cpu string, opts ...st.PodOption) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		created := st.CreatedAt(st.Now.Add(-time.Hour + time.Duration(i)*time.Second))
		pods[i] = st.Pod(fmt.Sprintf("%s-%02d", prefix, i), cpu, "1Gi", append([]st.PodOption{created}, opts...)...)
	}
	return pods
}

// plannedFor are the pods a plan gave a place, on a node there, on its way
// or new.
func plannedFor(plan *scaleup.Plan) []string {
	placed := make([]*corev1.Pod, 0, len(plan.Absorbed)+len(plan.Helped))
	for _, placement := range plan.Absorbed {
		placed = append(placed, placement.Pod)
	}
	return names(append(placed, plan.Helped...))
}

// A backlog larger than the budget is planned for over several loops, each
// acting on its share, until every pod has a node: the pods planned for
// keep their nodes on their way without counting against the budget.
func TestBacklogIsPlannedForOverLoopsWithinTheBudget(t *testing.T) {
	g := NewWithT(t)
	pods := pendingPods("web", 30, "1")
	r := newReplay(t, options(budget(10)), cluster{groups: []*st.NodeGroup{group("a", 0, 100)}, pods: pods})

	planned := sets.New[string]()
	for loop := 1; loop <= 3; loop++ {
		plan := r.loop()
		g.Expect(plan.Deferred).To(HaveLen(30-10*loop), "loop %d", loop)
		g.Expect(plannedFor(plan)).To(HaveLen(10*loop), "loop %d places the pods planned for before and its share of the backlog", loop)
		planned.Insert(plannedFor(plan)...)
	}
	g.Expect(sets.List(planned)).To(Equal(names(pods)), "every pod has a node after three loops")
	g.Expect(r.loop().Increases).To(BeEmpty(), "the pods planned for keep their nodes")
	g.Expect(r.cluster.groups[0].Target).To(Equal(8), "30 pods of 1 cpu on 4-cpu nodes")
}

// Pods that fit no group do not keep the budget from the others: the pods
// planned for go behind those that waited longer, so that every pod that
// fits gets a node within a bounded number of loops, though the oldest
// pods never fit.
func TestPodsThatFitNowhereDoNotStarveTheBacklog(t *testing.T) {
	g := NewWithT(t)
	tooBig := pendingPods("huge", 15, "8")
	fitting := pendingPods("web", 15, "1")
	for _, pod := range fitting {
		pod.CreationTimestamp.Time = pod.CreationTimestamp.Add(time.Minute)
	}
	r := newReplay(t, options(budget(10)), cluster{groups: []*st.NodeGroup{group("a", 0, 100)}, pods: append(tooBig, fitting...)})

	planned := sets.New[string]()
	for range 3 {
		planned.Insert(plannedFor(r.loop())...)
	}
	g.Expect(sets.List(planned)).To(Equal(names(fitting)))
}

// The budget goes to the pods of highest priority first, however recent:
// no pod waits behind one of lower priority.
func TestBudgetGoesToTheHighestPriorityFirst(t *testing.T) {
	g := NewWithT(t)
	low := pendingPods("low", 20, "1")
	high := pendingPods("high", 5, "1", st.WithPriority(1000))
	for _, pod := range high {
		pod.CreationTimestamp.Time = st.Now.Add(-time.Second)
	}
	r := newReplay(t, options(budget(10)), cluster{groups: []*st.NodeGroup{group("a", 0, 100)}, pods: append(low, high...)})

	for loop := 1; loop <= 3; loop++ {
		plan := r.loop()
		g.Expect(names(plan.Deferred)).NotTo(ContainElement(HavePrefix("high-")), "loop %d", loop)
		if loop == 1 {
			g.Expect(plan.Helped).To(HaveLen(10))
			g.Expect(names(plan.Helped)).To(ContainElements(names(high)))
		}
	}
}

// Without a budget, and with no more candidates than it, nothing waits.
func TestNoBudgetDefersNothing(t *testing.T) {
	pods := pendingPods("web", 30, "1")
	for _, opts := range []scaleup.Options{options(), options(budget(30))} {
		plan := planFor(t, opts, cluster{groups: []*st.NodeGroup{group("a", 0, 100)}, pods: pods}, scaleup.State{})
		NewWithT(t).Expect(plan.Deferred).To(BeEmpty())
		NewWithT(t).Expect(plan.LastPlanned).To(BeNil())
		NewWithT(t).Expect(plan.Helped).To(HaveLen(30))
	}
}
