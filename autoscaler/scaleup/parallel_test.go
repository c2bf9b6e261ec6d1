package scaleup_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
)

// TestPlanOnSeveralWorkersIsThePlanOnOne plans, over generated clusters,
// with 1, 2 and 3 workers and every round on the workers, and expects the
// same plan: increases, the expanders' choices round by round, where every
// pod goes, and why the others stay pending, group by group. The
// expanders, balancing and the cap on nodes vary by seed; the random
// expander draws from the same seed in every plan. One cluster in three
// has pods with volume claims, and one in three pods with DRA claims,
// which the workers plan too.
func TestPlanOnSeveralWorkersIsThePlanOnOne(t *testing.T) {
	for seed := range uint64(12) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			// Quiet: the plans log every round and template.
			ctx := klog.NewContext(t.Context(), logr.Discard())
			in, pending := generatedScaleUpCluster(seed)
			expanders := [][]string{
				{scaleup.ExpanderLeastWaste, scaleup.ExpanderRandom},
				{scaleup.ExpanderMostPods},
				{scaleup.ExpanderRandom},
				{scaleup.ExpanderPriority, scaleup.ExpanderLeastWaste},
			}[seed%4]
			var plans []string
			for _, workers := range []int{1, 2, 3} {
				s, err := scaleup.New(options(func(o *scaleup.Options) {
					o.Expanders = expanders
					o.Priorities = map[int32][]string{10: {"compute", "general"}, 5: {"zone-b"}}
					o.BalanceSimilarNodeGroups = seed%2 == 0
					o.MaxNodesPerScaleUp = []int{1000, 7}[seed%5/4]
					o.Rand = rand.New(rand.NewPCG(seed, 7))
					o.Workers, o.MinParallelWork = workers, 0
				}))
				g.Expect(err).NotTo(HaveOccurred())
				plan := s.Plan(ctx, snapshot.New(in), scaleup.State{Pods: pending})
				plans = append(plans, describePlan(plan))
				if workers == 1 {
					t.Logf("%d pending pods, %d rounds, %d new nodes, %d pods helped, %d not",
						len(pending), len(plan.Rounds), plan.NewNodes(), len(plan.Helped), len(plan.NoScaleUp))
					g.Expect(plan.Rounds).NotTo(BeEmpty(), "the cluster needs a scale-up")
					g.Expect(plan.NoScaleUp).NotTo(BeEmpty(), "some pods fit no group")
				}
			}
			g.Expect(plans[1]).To(Equal(plans[0]), "2 workers")
			g.Expect(plans[2]).To(Equal(plans[0]), "3 workers")
		})
	}
}

// generatedScaleUpCluster is a cluster of clustergen, one in three with
// volumes and one in three with DRA devices and claims, with a node group
// per pool and zone its nodes are in, and for every other such group an
// empty one in the next zone, like it; and clustergen's pending pods.
func generatedScaleUpCluster(seed uint64) (snapshot.Input, []*corev1.Pod) {
	c := clustergen.Generate(clustergen.Options{Seed: seed, NodesPerKind: 4, PendingPods: 200, Volumes: seed%3 == 1, DRA: seed%3 == 2})
	in := snapshot.Input{
		Namespaces: c.Namespaces, Nodes: c.Nodes, Pods: c.BoundPods,
		CSINodes: c.CSINodes, StorageClasses: c.StorageClasses,
		PersistentVolumes: c.PersistentVolumes, PersistentVolumeClaims: c.PersistentVolumeClaims,
		DeviceClasses: c.DeviceClasses, ResourceSlices: c.ResourceSlices, ResourceClaims: c.ResourceClaims,
	}
	groups := map[string]*st.NodeGroup{}
	var order []string
	for _, node := range c.Nodes {
		name := node.Labels[clustergen.PoolLabel] + "-" + node.Labels[corev1.LabelTopologyZone]
		group := groups[name]
		if group == nil {
			template := node.DeepCopy()
			template.Name, template.Spec.Unschedulable = name, false
			group = &st.NodeGroup{Name: name, Max: 60, Template: template}
			groups[name] = group
			order = append(order, name)
		}
		group.Nodes = append(group.Nodes, node.Name)
		group.Target++
	}
	for i, name := range order {
		in.NodeGroups = append(in.NodeGroups, groups[name])
		if i%2 == 1 {
			continue
		}
		template := groups[name].Template.DeepCopy()
		zone := fmt.Sprintf("zone-%c", 'a'+(i/2)%3)
		template.Name = name + "-empty"
		template.Labels[corev1.LabelTopologyZone] = zone
		in.NodeGroups = append(in.NodeGroups, nodegroups.NodeGroup(&st.NodeGroup{Name: template.Name, Max: 40, Template: template}))
	}
	return in, c.PendingPods
}

// describePlan says everything a plan decided, by names.
func describePlan(plan *scaleup.Plan) string {
	var b []byte
	for _, increase := range plan.Increases {
		b = fmt.Appendf(b, "increase %s +%d\n", increase.Group.ID(), increase.Delta)
	}
	for i, round := range plan.Rounds {
		b = fmt.Appendf(b, "round %d placed %v reused %v\n", i, round.Placed, round.Reused)
	}
	for _, pod := range plan.Helped {
		b = fmt.Appendf(b, "helped %s\n", pod.Name)
	}
	for _, placement := range plan.Absorbed {
		b = fmt.Appendf(b, "absorbed %s on %s\n", placement.Pod.Name, placement.NodeName)
	}
	for _, n := range plan.NoScaleUp {
		b = fmt.Appendf(b, "no scale-up %s %v\n", n.Pod.Name, n.Reasons)
	}
	return fmt.Sprintf("%s nominations %v templateErrors %v", b, plan.Nominations, plan.TemplateErrors)
}
