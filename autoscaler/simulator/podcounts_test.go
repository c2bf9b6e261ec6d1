package simulator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// TestKeptCountsAreTheCountsFromScratch runs, over many seeds, what a
// scale-down pass does to one scheduler: groups prepared, then placed in
// forks with a node removed, committed or reverted, and forgotten; nodes
// added and removed. After every step it asks the counts of terms groups
// (zone and hostname spread, affinity, anti-affinity) from the scheduler
// and from a pass over the snapshot: a group it kept since the start, a
// fresh group of the same terms (kept by signature after the last one was
// forgotten), and a group of terms never seen (counted from the pod index
// and caught up with the changes since), of spreads that count all nodes,
// those of a zone or those without taints.
func TestKeptCountsAreTheCountsFromScratch(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			logger := klog.FromContext(ctx)
			rnd := rand.New(rand.NewPCG(seed, 17))
			app := func() string { return []string{"a", "b", "c"}[rnd.IntN(3)] }
			added := 0
			dedicated := corev1.Taint{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}
			node := func() *corev1.Node {
				name := fmt.Sprintf("n%d", added)
				added++
				node := st.Node(name, "4", "8Gi", st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("z%d", rnd.IntN(3)), corev1.LabelHostname, name))
				if rnd.IntN(3) == 0 {
					node.Spec.Taints = []corev1.Taint{dedicated}
				}
				return node
			}
			// termsPod is a pod of app whose terms, of a kind, select the
			// pods of another app; skew only changes the signature.
			termsPod := func(name, app string, kind, skew int) *corev1.Pod {
				selected := map[string]string{"app": []string{"a", "b", "c"}[(kind+len(app))%3]}
				term := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchLabels: selected}, TopologyKey: corev1.LabelTopologyZone}
				pod := st.Pod(name, "100m", "128Mi", st.OwnedBy(name), st.WithPodLabels("app", app))
				switch kind {
				case 0, 1:
					key := []string{corev1.LabelTopologyZone, corev1.LabelHostname}[kind]
					pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
						MaxSkew: int32(skew), TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: selected},
					}}
					// Which nodes count: spreads of the same keys that
					// count other nodes have other domains.
					switch rnd.IntN(4) {
					case 1:
						pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("z%d", rnd.IntN(3))}
					case 2:
						pod.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
						if rnd.IntN(2) == 0 {
							pod.Spec.Tolerations = []corev1.Toleration{{Key: dedicated.Key, Operator: corev1.TolerationOpExists}}
						}
					case 3:
						pod.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: fmt.Sprintf("z%d", rnd.IntN(3))}
						pod.Spec.TopologySpreadConstraints[0].NodeAffinityPolicy = ptr.To(corev1.NodeInclusionPolicyIgnore)
						pod.Spec.TopologySpreadConstraints[0].NodeTaintsPolicy = ptr.To(corev1.NodeInclusionPolicyHonor)
						pod.Spec.Tolerations = []corev1.Toleration{{Key: dedicated.Key, Operator: corev1.TolerationOpExists}}
					}
					if skew%2 == 0 {
						// No one label required: every identity is looked at.
						pod.Spec.TopologySpreadConstraints[0].LabelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
							Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{selected["app"], "none"},
						}}}
					}
				case 2:
					term.Namespaces = []string{"default", fmt.Sprint("other", skew)}
					pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
				default:
					term.TopologyKey = corev1.LabelHostname
					term.Namespaces = []string{"default", fmt.Sprint("other", skew)}
					pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{term}}}
				}
				return pod
			}
			var nodes []*corev1.Node
			var pods []*corev1.Pod
			for range 6 {
				nodes = append(nodes, node())
			}
			for i := range 30 {
				pod := st.Pod(fmt.Sprintf("p%d", i), "100m", "128Mi", st.OwnedBy("rs-"+app()), st.WithPodLabels("app", app()), st.OnNode(nodes[rnd.IntN(len(nodes))].Name))
				if rnd.IntN(5) == 0 {
					pod.DeletionTimestamp = &metav1.Time{}
				}
				pods = append(pods, pod)
			}
			snap := snapshot.New(snapshot.Input{Nodes: nodes, Pods: pods})
			sched := NewScheduler(ctx, snap)
			sched.Fork()
			var kept []*PodGroup
			for kind := range 4 {
				kept = append(kept, NewPodGroup(termsPod(fmt.Sprint("kept", kind), app(), kind, 1)))
			}
			sched.Prepare(kept...)

			// agree checks the kept counts of groups against counts from
			// scratch over the snapshot as it is.
			agree := func(step int, groups ...*PodGroup) {
				for _, group := range groups {
					cached := sched.cache.partState(group, termsPart)
					fresh := newPodState(group.info, termsPart, 0)
					computeCounts(logger, snap, nil, []*podState{fresh})
					what := fmt.Sprintf("step %d, %s", step, group.Pods[0].Name)
					g.Expect(cached.affinityCounts).To(Equal(fresh.affinityCounts), what)
					g.Expect(cached.antiAffinityCounts).To(Equal(fresh.antiAffinityCounts), what)
					g.Expect(cached.spread).To(HaveLen(len(fresh.spread)), what)
					for i := range fresh.spread {
						g.Expect(cached.spread[i].domains.counts).To(Equal(fresh.spread[i].domains.counts), what)
						g.Expect(cached.spread[i].domains.nodes).To(Equal(fresh.spread[i].domains.nodes), what)
						g.Expect(cached.spread[i].domains.minimum(1)).To(Equal(fresh.spread[i].domains.minimum(1)), what)
					}
				}
			}
			// check asks the kept groups, fresh ones of their terms, and
			// ones of new terms.
			check := func(step int) {
				agree(step, kept...)
				for kind := range 4 {
					again := NewPodGroup(termsPod(fmt.Sprint("again", kind), app(), kind, 1))
					unseen := NewPodGroup(termsPod(fmt.Sprint("unseen", kind), app(), kind, 2+step))
					agree(step, again, unseen)
					sched.Forget([]*PodGroup{again, unseen})
				}
			}
			check(-1)
			for step := range 30 {
				switch op := rnd.IntN(4); {
				case op == 0:
					g.Expect(sched.AddNode(snapshot.NewNodeInfo(node()))).To(Succeed())
				case op == 1 && len(snap.NodeInfos()) > 3:
					g.Expect(sched.RemoveNode(snap.NodeInfos()[rnd.IntN(len(snap.NodeInfos()))].Name())).To(Succeed())
				default:
					// A candidate: its pods prepared before the fork, the
					// node removed in it, the pods placed elsewhere.
					moved := st.Replicas(fmt.Sprintf("s%d-", step), 1+rnd.IntN(4), "100m", "128Mi", st.WithPodLabels("app", app()))
					groups := append(GroupPods(moved), NewPodGroup(termsPod(fmt.Sprint("moved", step), app(), rnd.IntN(4), 1)))
					sched.Prepare(groups...)
					sched.Fork()
					if len(snap.NodeInfos()) > 3 {
						g.Expect(sched.RemoveNode(snap.NodeInfos()[rnd.IntN(len(snap.NodeInfos()))].Name())).To(Succeed())
					}
					sched.ScheduleGroups(groups, ScheduleOptions{})
					check(step)
					if rnd.IntN(2) == 0 {
						sched.Commit()
					} else {
						sched.Revert()
					}
					sched.Forget(groups)
				}
				check(step)
			}
			sched.Revert()
			check(30)
		})
	}
}
