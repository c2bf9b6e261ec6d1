package simulator_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func placements(result simulator.ScheduleResult) map[string]string {
	placed := map[string]string{}
	for _, p := range result.Scheduled {
		placed[p.Pod.Name] = p.NodeName
	}
	return placed
}

func TestSchedulePods(t *testing.T) {
	zone := func(z string) st.NodeOption { return st.WithNodeLabels(zoneKey, z) }
	tests := []struct {
		name              string
		nodes             []*corev1.Node
		pods              []*corev1.Pod
		filter            func(*snapshot.NodeInfo) bool
		fromNode          int
		wantPlaced        map[string]string
		wantUnschedulable []string
		wantMessage       string
	}{
		{
			name:       "first fit fills nodes in order",
			nodes:      []*corev1.Node{st.Node("n1", "2", "4Gi"), st.Node("n2", "2", "4Gi")},
			pods:       st.Replicas("web", 3, "1", "1Gi"),
			wantPlaced: map[string]string{"web-0": "n1", "web-1": "n1", "web-2": "n2"},
		},
		{
			name:              "what does not fit is reported with the reasons per node",
			nodes:             []*corev1.Node{st.Node("n1", "2", "4Gi"), st.Node("n2", "2", "4Gi", st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule))},
			pods:              st.Replicas("web", 3, "1", "1Gi"),
			wantPlaced:        map[string]string{"web-0": "n1", "web-1": "n1"},
			wantUnschedulable: []string{"web-2"},
			wantMessage:       "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}.",
		},
		{
			name:              "filtered nodes are left out",
			nodes:             []*corev1.Node{st.Node("n1", "2", "4Gi"), st.Node("n2", "2", "4Gi")},
			pods:              st.Replicas("web", 1, "1", "1Gi"),
			filter:            func(n *snapshot.NodeInfo) bool { return n.Name() != "n1" },
			wantPlaced:        map[string]string{"web-0": "n2"},
			wantUnschedulable: nil,
		},
		{
			name:       "the nodes before the first one to try are left out",
			nodes:      []*corev1.Node{st.Node("n1", "2", "4Gi", zone("a")), st.Node("n2", "2", "4Gi", zone("a")), st.Node("n3", "2", "4Gi", zone("b"))},
			pods:       st.Replicas("web", 2, "2", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")),
			fromNode:   1,
			wantPlaced: map[string]string{"web-0": "n2", "web-1": "n3"},
		},
		{
			name:  "anti-affinity between replicas takes effect as they are placed",
			nodes: []*corev1.Node{st.Node("n1", "4", "8Gi"), st.Node("n2", "4", "8Gi")},
			pods: st.Replicas("web", 3, "1", "1Gi", st.WithPodLabels("app", "web"),
				requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "web"))),
			wantPlaced:        map[string]string{"web-0": "n1", "web-1": "n2"},
			wantUnschedulable: []string{"web-2"},
			wantMessage:       "0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules.",
		},
		{
			name:  "topology spread takes effect as replicas are placed",
			nodes: []*corev1.Node{st.Node("n1", "8", "8Gi", zone("a")), st.Node("n2", "8", "8Gi", zone("b"))},
			pods: st.Replicas("web", 4, "1", "1Gi", st.WithPodLabels("app", "web"),
				zoneSpreadConstraint("app", "web")),
			wantPlaced: map[string]string{"web-0": "n1", "web-1": "n2", "web-2": "n1", "web-3": "n2"},
		},
		{
			name:  "pod affinity is satisfied by a replica placed earlier",
			nodes: []*corev1.Node{st.Node("n1", "1", "8Gi", zone("a")), st.Node("n2", "1", "8Gi", zone("b")), st.Node("n3", "1", "8Gi", zone("a"))},
			pods: st.Replicas("web", 3, "1", "1Gi", st.WithPodLabels("app", "web"),
				requiredPodAffinity(podAffinityTerm(zoneKey, "app", "web"))),
			wantPlaced:        map[string]string{"web-0": "n1", "web-1": "n3"},
			wantUnschedulable: []string{"web-2"},
			wantMessage:       "0/3 nodes are available: 2 Insufficient cpu, 1 node(s) didn't match pod affinity rules.",
		},
		{
			name:  "pods whose affinity a later pod satisfies are tried again",
			nodes: []*corev1.Node{st.Node("n1", "4", "8Gi", zone("a")), st.Node("n2", "4", "8Gi", zone("b"))},
			pods: append(st.Replicas("web", 2, "1", "1Gi", requiredPodAffinity(podAffinityTerm(zoneKey, "app", "db"))),
				st.Pod("db", "1", "1Gi", st.WithPodLabels("app", "db"), st.WithNodeSelector(zoneKey, "b"))),
			wantPlaced: map[string]string{"db": "n2", "web-0": "n2", "web-1": "n2"},
		},
		{
			name: "pods whose spread a later pod evens out are tried again",
			nodes: []*corev1.Node{
				st.Node("n1", "4", "8Gi", zone("a")),
				st.Node("n2", "4", "8Gi", zone("b"), st.WithTaint("dedicated", "batch", corev1.TaintEffectNoSchedule)),
				st.Node("old", "4", "8Gi", zone("a")),
			},
			pods: slices.Concat(
				st.Replicas("running", 2, "1", "1Gi", st.WithPodLabels("app", "web"), st.OnNode("old")),
				st.Replicas("web", 2, "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")),
				st.Replicas("batch", 3, "1", "1Gi", st.WithPodLabels("app", "web"), st.WithNodeSelector(zoneKey, "b"),
					st.WithToleration("dedicated", "batch", corev1.TaintEffectNoSchedule))),
			wantPlaced: map[string]string{
				"running-0": "old", "running-1": "old", "batch-0": "n2", "batch-1": "n2", "batch-2": "n2", "web-0": "n1", "web-1": "n1",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			snap := snapshot.New(snapshot.Input{Nodes: tt.nodes})
			result := simulator.NewScheduler(ctx, snap).SchedulePods(tt.pods, simulator.ScheduleOptions{NodeFilter: tt.filter, FromNode: tt.fromNode})
			g.Expect(placements(result)).To(Equal(tt.wantPlaced))
			var unschedulable []string
			for _, u := range result.Unschedulable {
				unschedulable = append(unschedulable, u.Pod.Name)
				g.Expect(u.Message()).To(Equal(tt.wantMessage))
			}
			g.Expect(unschedulable).To(Equal(tt.wantUnschedulable))
			for pod, node := range tt.wantPlaced {
				g.Expect(podNamesOn(snap, node)).To(ContainElement(pod), "placed pods stay in the snapshot")
			}
		})
	}
}

func podNamesOn(snap *snapshot.Snapshot, node string) []string {
	return podNames(snap.NodeInfo(node))
}

func podNames(nodeInfo *snapshot.NodeInfo) []string {
	var names []string
	for _, pod := range nodeInfo.Pods() {
		names = append(names, pod.Pod.Name)
	}
	return names
}

func TestSchedulerSeesChangesMadeBehindItsBack(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	snap := snapshot.New(snapshot.Input{Nodes: []*corev1.Node{st.Node("n1", "4", "8Gi"), st.Node("n2", "4", "8Gi")}})
	sched := simulator.NewScheduler(ctx, snap)
	web := st.Pod("web-1", "1", "1Gi", st.WithPodLabels("app", "web"), requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "web")))
	g.Expect(sched.Check(web, "n1")).To(BeNil())

	snap.Fork()
	g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("web-0", "", "", st.WithPodLabels("app", "web"))), "n1")).To(Succeed())
	g.Expect(sched.Check(web, "n1")).To(Equal([]string{simulator.ReasonPodAntiAffinity}))
	snap.Revert()
	g.Expect(sched.Check(web, "n1")).To(BeNil())
}

func TestGroupPods(t *testing.T) {
	different := st.Pod("web-x", "2", "1Gi", st.OwnedBy("web"))
	relabelled := st.Pod("web-y", "1", "1Gi", st.OwnedBy("web"), st.WithPodLabels("pod-template-hash", "new"))
	tests := []struct {
		name       string
		pods       []*corev1.Pod
		wantGroups [][]string
	}{
		{
			name:       "replicas of one owner form one group",
			pods:       st.Replicas("web", 3, "1", "1Gi"),
			wantGroups: [][]string{{"web-0", "web-1", "web-2"}},
		},
		{
			name:       "pods without a controller are alone",
			pods:       []*corev1.Pod{st.Pod("a", "1", "1Gi"), st.Pod("b", "1", "1Gi")},
			wantGroups: [][]string{{"a"}, {"b"}},
		},
		{
			name:       "different requests or labels split an owner's pods",
			pods:       append(st.Replicas("web", 2, "1", "1Gi"), different, relabelled),
			wantGroups: [][]string{{"web-0", "web-1"}, {"web-x"}, {"web-y"}},
		},
		{
			name:       "different owners with the same spec are apart",
			pods:       append(st.Replicas("web", 1, "1", "1Gi"), st.Replicas("api", 1, "1", "1Gi")...),
			wantGroups: [][]string{{"web-0"}, {"api-0"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var got [][]string
			for _, group := range simulator.GroupPods(tt.pods) {
				var names []string
				for _, pod := range group.Pods {
					names = append(names, pod.Name)
				}
				got = append(got, names)
			}
			g.Expect(got).To(Equal(tt.wantGroups))
		})
	}
}

func TestDaemonSetPods(t *testing.T) {
	daemonSet := func(name string, mutate func(*corev1.PodSpec)) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		ds.Spec.Template.Spec.Containers = st.Pod("x", "100m", "100Mi").Spec.Containers
		if mutate != nil {
			mutate(&ds.Spec.Template.Spec)
		}
		return ds
	}
	daemonSets := []*appsv1.DaemonSet{
		daemonSet("everywhere", nil),
		daemonSet("gpu-only", func(spec *corev1.PodSpec) { spec.NodeSelector = map[string]string{"gpu": "true"} }),
		daemonSet("tolerates-gpu", func(spec *corev1.PodSpec) {
			spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
		}),
	}
	tests := []struct {
		name string
		node *corev1.Node
		want []string
	}{
		{name: "plain node", node: st.Node("n", "4", "8Gi"), want: []string{"everywhere-n", "tolerates-gpu-n"}},
		{
			name: "tainted gpu node",
			node: st.Node("n", "4", "8Gi", st.WithNodeLabels("gpu", "true"), st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
			want: []string{"tolerates-gpu-n"},
		},
		{
			name: "cordoned node still gets daemon pods",
			node: st.Node("n", "4", "8Gi", st.Unschedulable(), st.WithTaint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule)),
			want: []string{"everywhere-n", "tolerates-gpu-n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			var names []string
			for _, pod := range simulator.DaemonSetPods(ctx, tt.node, daemonSets) {
				names = append(names, pod.Name)
			}
			g.Expect(names).To(Equal(tt.want))
			info := simulator.TemplateNodeInfo(ctx, tt.node, daemonSets)
			g.Expect(info.Requested().MilliCPU).To(Equal(int64(100 * len(tt.want))))
		})
	}
}

func TestSetTemplates(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	dedicated := st.WithTaint("dedicated", "x", corev1.TaintEffectNoSchedule)
	deleting := st.Node("deleting", "8", "16Gi", st.WithNodeLabels("pool", "a"),
		st.WithTaint(nodefacts.ToBeDeletedTaint, "", corev1.TaintEffectNoSchedule), dedicated)
	starting := st.Node("starting", "4", "8Gi", st.WithNodeLabels("pool", "a"), dedicated,
		st.WithTaint(nodefacts.ClusterAPIUninitializedTaint, "", corev1.TaintEffectNoSchedule),
		st.WithTaint(nodefacts.StartupTaintPrefix+"cni", "", corev1.TaintEffectNoSchedule),
		st.WithTaint(corev1.TaintNodeMemoryPressure, "", corev1.TaintEffectNoSchedule))
	withMembers := &st.NodeGroup{Name: "with-members", Max: 5, Target: 2, Nodes: []string{"deleting", "starting"}}
	fromZero := &st.NodeGroup{Name: "from-zero", Max: 5, Template: st.Node("t", "16", "64Gi", dedicated,
		st.WithTaint(nodefacts.StatusTaintPrefix+"gpu-health", "", corev1.TaintEffectNoSchedule))}
	noTemplate := &st.NodeGroup{Name: "no-template", Max: 5}
	onStarting := st.OnNode("starting")
	terminating := func(pod *corev1.Pod) { pod.DeletionTimestamp = &metav1.Time{Time: st.Now} }
	daemonSetPod := func(pod *corev1.Pod) {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "gone", UID: "uid-ds-gone", Controller: ptr.To(true)}}
	}
	snap := snapshot.New(snapshot.Input{
		Nodes: []*corev1.Node{deleting, starting},
		Pods: []*corev1.Pod{
			st.Pod("custom-agent", "200m", "", st.CustomDaemonSetPod("agent"), onStarting),
			st.Pod("custom-agent-old", "200m", "", st.CustomDaemonSetPod("agent"), onStarting, terminating),
			st.Pod("deleted-daemonset-agent", "300m", "", daemonSetPod, onStarting),
			st.Pod("web", "1", "", st.OwnedBy("web"), onStarting),
		},
		NodeGroups: []nodegroups.NodeGroup{withMembers, fromZero, noTemplate},
	})

	failed := simulator.SetTemplates(ctx, snap, nodefacts.Rules{})

	g.Expect(failed).To(HaveKey("no-template"))
	g.Expect(failed).To(HaveLen(1))
	fromMember := snap.Template("with-members").Node()
	g.Expect(fromMember.Labels).To(HaveKeyWithValue("pool", "a"), "copied from a member")
	g.Expect(fromMember.Labels[corev1.LabelHostname]).To(Equal(fromMember.Name))
	g.Expect(fromMember.Status.Allocatable.Cpu().String()).To(Equal("4"), "the member being deleted is skipped")
	g.Expect(fromMember.Spec.Taints).To(Equal([]corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}),
		"startup and condition taints are dropped")
	g.Expect(podNames(snap.Template("with-members"))).To(ConsistOf("custom-agent"),
		"a new node runs the pods of the member's custom DaemonSets; DaemonSet pods come from DaemonSets, none here")
	fromGroup := snap.Template("from-zero").Node()
	g.Expect(fromGroup.Status.Allocatable.Cpu().String()).To(Equal("16"))
	g.Expect(fromGroup.Spec.Taints).To(Equal([]corev1.Taint{{Key: "dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}}),
		"status taints are dropped from what the group publishes too")
	g.Expect(snap.Template("no-template")).To(BeNil())
}

func TestSchedulerForkRevertAndCommit(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	snap := snapshot.New(snapshot.Input{Nodes: []*corev1.Node{st.Node("n1", "4", "8Gi"), st.Node("n2", "4", "8Gi")}})
	sched := simulator.NewScheduler(ctx, snap)
	web := simulator.GroupPods(st.Replicas("web", 3, "1", "1Gi", st.WithPodLabels("app", "web"),
		requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "web"))))[0]
	sched.Prepare(web)

	sched.Fork()
	g.Expect(sched.PlaceOn(web, web.Pods[0], "n1")).To(BeNil())
	g.Expect(sched.CheckGroup(web, "n1")).To(Equal([]string{simulator.ReasonExistingAntiAffinity}))
	sched.Revert()
	g.Expect(sched.CheckGroup(web, "n1")).To(BeNil(), "the placement is gone with the fork")
	g.Expect(snap.NodeInfo("n1").Pods()).To(BeEmpty())

	sched.Fork()
	g.Expect(sched.PlaceOn(web, web.Pods[0], "n1")).To(BeNil())
	sched.Commit()
	sched.Fork()
	g.Expect(sched.PlaceOn(web, web.Pods[1], "n2")).To(BeNil())
	g.Expect(sched.CheckGroup(web, "n2")).NotTo(BeNil())
	sched.Revert()
	g.Expect(sched.CheckGroup(web, "n1")).To(Equal([]string{simulator.ReasonExistingAntiAffinity}), "the committed placement stays")
	g.Expect(sched.CheckGroup(web, "n2")).To(BeNil(), "the reverted one does not")
}

func TestSchedulerRemoveNodeIsLikeRebuilding(t *testing.T) {
	zone := func(z string) st.NodeOption { return st.WithNodeLabels(zoneKey, z) }
	nodes := func() []*corev1.Node {
		return []*corev1.Node{
			st.Node("a1", "8", "16Gi", zone("a")), st.Node("a2", "8", "16Gi", zone("a")),
			st.Node("b1", "8", "16Gi", zone("b")), st.Node("c1", "8", "16Gi", zone("c")),
		}
	}
	web := func(name, node string, opts ...st.PodOption) *corev1.Pod {
		return st.Pod(name, "1", "1Gi", append([]st.PodOption{st.OwnedBy("web"), st.WithPodLabels("app", "web"), st.OnNode(node)}, opts...)...)
	}
	loner := requiredPodAntiAffinity(podAffinityTerm(zoneKey, "app", "web"))
	// Groups whose state depends on where web pods are: spread over zones,
	// anti-affinity to them, affinity to them (being web pods too, they may
	// start anywhere when there are none), kept away by a web pod's
	// anti-affinity, and neither.
	groups := func() []*simulator.PodGroup {
		return simulator.GroupPods(slices.Concat(
			st.Replicas("spread", 2, "1", "1Gi", st.WithPodLabels("app", "web"), zoneSpreadConstraint("app", "web")),
			st.Replicas("anti", 2, "1", "1Gi", st.WithPodLabels("app", "anti"), requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "web"))),
			st.Replicas("near", 2, "1", "1Gi", st.WithPodLabels("app", "web"), requiredPodAffinity(podAffinityTerm(zoneKey, "app", "web"))),
			st.Replicas("plain", 2, "1", "1Gi", st.WithPodLabels("app", "web")),
		))
	}
	tests := []struct {
		name string
		pods []*corev1.Pod
		// change is what the scheduler does before removing the node.
		change func(g *WithT, sched *simulator.Scheduler, groups []*simulator.PodGroup)
		remove string
	}{
		{
			name:   "a node with matching pods in a zone that keeps other nodes",
			pods:   []*corev1.Pod{web("w1", "a1"), web("w2", "a2"), web("w3", "b1")},
			remove: "a1",
		},
		{
			name:   "the last node of a zone, whose domain goes",
			pods:   []*corev1.Pod{web("w1", "a1"), web("w2", "b1")},
			remove: "c1",
		},
		{
			name:   "the node of the only pods that affinity can join",
			pods:   []*corev1.Pod{web("w1", "b1"), web("w2", "b1")},
			remove: "b1",
		},
		{
			name:   "a node whose pod keeps others away with its anti-affinity",
			pods:   []*corev1.Pod{web("w1", "a1", loner), web("w2", "b1")},
			remove: "a1",
		},
		{
			name: "a node that the scheduler added, with pods it placed",
			pods: []*corev1.Pod{web("w1", "a1")},
			change: func(g *WithT, sched *simulator.Scheduler, groups []*simulator.PodGroup) {
				g.Expect(sched.AddNode(snapshot.NewNodeInfo(st.Node("c2", "8", "16Gi", zone("c")),
					snapshot.NewPodInfo(web("w2", "c2", loner))))).To(Succeed())
				g.Expect(sched.PlaceOn(groups[0], groups[0].Pods[0], "b1")).To(BeNil())
				g.Expect(sched.PlaceOn(groups[2], groups[2].Pods[0], "a1")).To(BeNil())
			},
			remove: "c2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			snap := snapshot.New(snapshot.Input{Nodes: nodes(), Pods: tt.pods})
			groups := groups()
			sched := simulator.NewScheduler(ctx, snap)
			sched.Prepare(groups...)
			if tt.change != nil {
				tt.change(g, sched, groups)
			}
			before := verdicts(sched, groups)

			sched.Fork()
			g.Expect(sched.RemoveNode(tt.remove)).To(Succeed())
			g.Expect(snap.NodeInfo(tt.remove)).To(BeNil())
			g.Expect(verdicts(sched, groups)).To(Equal(verdicts(simulator.NewScheduler(ctx, snap), groups)))
			sched.Revert()
			g.Expect(verdicts(sched, groups)).To(Equal(before))
			g.Expect(verdicts(sched, groups)).To(Equal(verdicts(simulator.NewScheduler(ctx, snap), groups)))
		})
	}
}

// verdicts are the reasons each group does not fit each node.
func verdicts(sched *simulator.Scheduler, groups []*simulator.PodGroup) map[string][]string {
	result := map[string][]string{}
	for _, group := range groups {
		for _, nodeInfo := range sched.Snapshot().NodeInfos() {
			result[group.Pods[0].OwnerReferences[0].Name+" on "+nodeInfo.Name()] = sched.CheckGroup(group, nodeInfo.Name())
		}
	}
	return result
}

// TestSchedulerAgreesWithARebuiltOneOnPodsWithoutOwners places pods
// without owners, as a batch system or Karpenter's benchmark creates them,
// one at a time and adds and removes nodes, and after every change asks
// the long-lived scheduler and, for each group, one built from scratch on
// the same snapshot the same questions. Such pods are each a group of their own: groups with
// the same labels and terms share their counts, whatever they request,
// and spread minimums follow every change.
func TestSchedulerAgreesWithARebuiltOneOnPodsWithoutOwners(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	rnd := rand.New(rand.NewPCG(7, 11))
	pick := func(values ...string) string { return values[rnd.IntN(len(values))] }
	hostnameSpread := func(kv ...string) st.PodOption {
		return func(pod *corev1.Pod) {
			zoneSpreadConstraint(kv...)(pod)
			pod.Spec.TopologySpreadConstraints[0].TopologyKey = corev1.LabelHostname
		}
	}
	// A pod of one of the benchmark's kinds, with random labels and requests.
	randomPod := func(i int) *corev1.Pod {
		label := pick("a", "b", "c")
		opts := []st.PodOption{st.WithPodLabels("app", label)}
		switch rnd.IntN(5) {
		case 1:
			opts = append(opts, zoneSpreadConstraint("app", pick("a", "b", "c")))
		case 2:
			opts = append(opts, hostnameSpread("app", pick("a", "b", "c")))
		case 3:
			opts = append(opts, requiredPodAffinity(podAffinityTerm(zoneKey, "app", label)))
		case 4:
			opts = []st.PodOption{st.WithPodLabels("app", "loner"), requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", "loner"))}
		}
		return st.Pod(fmt.Sprintf("p%d", i), pick("100m", "500m", "1"), pick("256Mi", "1Gi"), opts...)
	}
	node := func(i int) *corev1.Node {
		return st.Node(fmt.Sprintf("n%d", i), "4", "8Gi", st.WithNodeLabels(zoneKey, pick("z1", "z2", "z3"), corev1.LabelHostname, fmt.Sprintf("n%d", i)))
	}
	var nodes []*corev1.Node
	for i := range 4 {
		nodes = append(nodes, node(i))
	}
	snap := snapshot.New(snapshot.Input{Nodes: nodes})
	var pods []*corev1.Pod
	for i := range 60 {
		pods = append(pods, randomPod(i))
	}
	groups := simulator.GroupPods(pods)
	g.Expect(groups).To(HaveLen(len(pods)), "pods without owners are groups of their own")
	sched := simulator.NewScheduler(ctx, snap)
	sched.Prepare(groups...)

	// verdicts are the reasons each group does not fit each node, from
	// sched or, without it, from a scheduler of its own for each group.
	verdicts := func(sched *simulator.Scheduler) map[string][]string {
		result := map[string][]string{}
		for _, group := range groups {
			groupSched := sched
			if groupSched == nil {
				groupSched = simulator.NewScheduler(ctx, snap)
			}
			for _, nodeInfo := range snap.NodeInfos() {
				result[group.Pods[0].Name+" on "+nodeInfo.Name()] = groupSched.CheckGroup(group, nodeInfo.Name())
			}
		}
		return result
	}
	added := len(nodes)
	for step, group := range groups {
		switch {
		case step%10 == 9:
			sched.Fork()
			g.Expect(sched.RemoveNode(sched.Snapshot().NodeInfos()[0].Name())).To(Succeed())
			g.Expect(verdicts(sched)).To(Equal(verdicts(nil)), "step %d, a node removed in a fork", step)
			sched.Revert()
		case step%7 == 6:
			g.Expect(sched.AddNode(snapshot.NewNodeInfo(node(added)))).To(Succeed())
			added++
		}
		for _, nodeInfo := range snap.NodeInfos() {
			if sched.PlaceOn(group, group.Pods[0], nodeInfo.Name()) == nil {
				break
			}
		}
		g.Expect(verdicts(sched)).To(Equal(verdicts(nil)), "step %d", step)
	}
}

// TestBranchesSimulateAsTheSchedulerWould runs the same simulations, each
// in a fork with a node added, on a scheduler and on two branches of it on
// goroutines of their own: the branches place every pod where the
// scheduler does, and leave it, and its snapshot, as they were. Run with
// -race, it also tells that the branches write nothing they share.
func TestBranchesSimulateAsTheSchedulerWould(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	rnd := rand.New(rand.NewPCG(3, 5))
	pick := func(values ...string) string { return values[rnd.IntN(len(values))] }
	node := func(name, zone string) *corev1.Node {
		return st.Node(name, "4", "8Gi", st.WithNodeLabels(zoneKey, zone, corev1.LabelHostname, name))
	}
	pod := func(i int) *corev1.Pod {
		label := pick("a", "b", "c")
		opts := []st.PodOption{st.WithPodLabels("app", label)}
		switch i % 4 {
		case 1:
			opts = append(opts, zoneSpreadConstraint("app", label))
		case 2:
			opts = append(opts, requiredPodAffinity(podAffinityTerm(zoneKey, "app", label)))
		case 3:
			opts = append(opts, requiredPodAntiAffinity(podAffinityTerm(corev1.LabelHostname, "app", label)))
		}
		return st.Pod(fmt.Sprintf("p%d", i), pick("100m", "500m", "1"), pick("256Mi", "1Gi"), opts...)
	}
	var nodes []*corev1.Node
	for i := range 5 {
		nodes = append(nodes, node(fmt.Sprintf("n%d", i), pick("z1", "z2", "z3")))
	}
	sched := simulator.NewScheduler(ctx, snapshot.New(snapshot.Input{Nodes: nodes}))
	var placed, pending []*corev1.Pod
	for i := range 40 {
		placed = append(placed, pod(i))
		pending = append(pending, pod(100+i))
	}
	// The branches start from a fork with pods and a node added, as a
	// plan's rounds leave it.
	sched.Fork()
	sched.SchedulePods(placed, simulator.ScheduleOptions{})
	groups := simulator.GroupPods(pending)
	sched.Prepare(groups...)
	sched.Fork()
	g.Expect(sched.AddNode(snapshot.NewNodeInfo(node("added", "z1")))).To(Succeed())
	simulate := func(sched *simulator.Scheduler, i int) map[string]string {
		sched.Fork()
		defer sched.Revert()
		g.Expect(sched.AddNode(snapshot.NewNodeInfo(node(fmt.Sprintf("new-%d", i), fmt.Sprintf("z%d", i%3+1))))).To(Succeed())
		return placements(sched.ScheduleGroups(groups[i%len(groups):], simulator.ScheduleOptions{}))
	}
	const simulations = 12
	// The branches first: what they derive, the scheduler has not.
	got := make([]map[string]string, simulations)
	var wg sync.WaitGroup
	for b, branch := range sched.Branches(2, groups) {
		wg.Go(func() {
			for i := b; i < simulations; i += 2 {
				got[i] = simulate(branch, i)
			}
		})
	}
	wg.Wait()
	before := sched.Snapshot().NodeInfos()
	var want []map[string]string
	for i := range simulations {
		want = append(want, simulate(sched, i))
	}
	g.Expect(got).To(Equal(want))
	g.Expect(sched.Snapshot().NodeInfos()).To(Equal(before), "the scheduler's snapshot is as it was")
}
