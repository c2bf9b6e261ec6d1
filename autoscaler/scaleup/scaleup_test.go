package scaleup_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// cluster is the state a test plans a scale-up on.
type cluster struct {
	nodes      []*corev1.Node
	pods       []*corev1.Pod
	groups     []*st.NodeGroup
	daemonSets []*appsv1.DaemonSet
	// dra are the DRA objects: slices, device classes, claims and claim
	// templates.
	dra snapshot.Input
}

func (c cluster) snapshot() *snapshot.Snapshot {
	groups := make([]nodegroups.NodeGroup, 0, len(c.groups))
	for _, group := range c.groups {
		groups = append(groups, group)
	}
	return snapshot.New(snapshot.Input{
		Nodes: c.nodes, Pods: c.pods, NodeGroups: groups, DaemonSets: c.daemonSets,
		ResourceSlices: c.dra.ResourceSlices, DeviceClasses: c.dra.DeviceClasses,
		ResourceClaims: c.dra.ResourceClaims, ResourceClaimTemplates: c.dra.ResourceClaimTemplates,
	})
}

func options(mutate ...func(*scaleup.Options)) scaleup.Options {
	opts := scaleup.Options{
		PriorityCutoff:     -10,
		MaxNodesPerScaleUp: 1000,
		Expanders:          []string{scaleup.ExpanderMostPods},
		Clock:              clocktesting.NewFakePassiveClock(st.Now),
		Rand:               rand.New(rand.NewPCG(1, 2)),
	}
	for _, m := range mutate {
		m(&opts)
	}
	return opts
}

func planFor(t *testing.T, opts scaleup.Options, c cluster, state scaleup.State) *scaleup.Plan {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	s, err := scaleup.New(opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	snap := c.snapshot()
	before := len(snap.NodeInfos())
	plan := s.Plan(ctx, snap, state)
	NewWithT(t).Expect(snap.NodeInfos()).To(HaveLen(before), "planning must not change the snapshot")
	return plan
}

func increases(plan *scaleup.Plan) map[string]int {
	result := map[string]int{}
	for _, increase := range plan.Increases {
		result[increase.Group.ID()] = increase.Delta
	}
	return result
}

func names(pods []*corev1.Pod) []string {
	result := []string{}
	for _, pod := range pods {
		result = append(result, pod.Name)
	}
	return result
}

// group returns a node group of 4-cpu, 8Gi nodes with its template.
func group(name string, target, max int, opts ...st.NodeOption) *st.NodeGroup {
	return &st.NodeGroup{Name: name, Max: max, Target: target, Template: st.Node(name+"-template", "4", "8Gi", opts...)}
}

// twoPools has two empty groups of 4-cpu nodes, pools a (at most maxA
// nodes) and b (at most 10), 3 pods of 3 cpu for a and 2 for b.
func twoPools(maxA int) cluster {
	return cluster{
		groups: []*st.NodeGroup{group("a", 0, maxA, st.WithNodeLabels("pool", "a")), group("b", 0, 10, st.WithNodeLabels("pool", "b"))},
		pods: append(st.Replicas("web", 3, "3", "1Gi", st.WithNodeSelector("pool", "a")),
			st.Replicas("db", 2, "3", "1Gi", st.WithNodeSelector("pool", "b"))...),
	}
}

// members adds n registered nodes to g, like its template.
func members(g *st.NodeGroup, n int) []*corev1.Node {
	var nodes []*corev1.Node
	for i := range n {
		node := g.Template.DeepCopy()
		node.Name = fmt.Sprintf("%s-%d", g.Name, i)
		node.Labels[corev1.LabelHostname] = node.Name
		nodes = append(nodes, node)
		g.Nodes = append(g.Nodes, node.Name)
	}
	return nodes
}

// gpuLimit bounds the devices of the test DRA driver, st.GPUDriver.
func gpuLimit(max int64) func(*scaleup.Options) {
	return func(o *scaleup.Options) {
		o.Limits.GPUs = map[corev1.ResourceName]scaleup.Range{st.GPUDriver: {Max: max}}
	}
}

// withGPUs gives c a device class of the test driver, a claim template
// for 2 of its devices, and 4 pending pods of 1 cpu with a claim of that
// template each; nodes publish 2 devices each: a node a pod.
func withGPUs(c cluster) cluster {
	c.dra.DeviceClasses = append(c.dra.DeviceClasses, st.DeviceClass("gpu", st.GPUDriver))
	c.dra.ResourceClaimTemplates = append(c.dra.ResourceClaimTemplates, st.ResourceClaimTemplate("two-gpus", "gpu", 2))
	c.pods = append(c.pods, st.Replicas("train", 4, "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus"))...)
	return c
}

func withNodeAnnotation(key, value string) st.NodeOption {
	return func(node *corev1.Node) {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[key] = value
	}
}

// gpuMembers adds n registered nodes to g that publish 2 devices of the
// test driver each, and a pod that takes all their cpu: the devices are
// free, the nodes take no pod.
func gpuMembers(c *cluster, g *st.NodeGroup, n int) {
	for _, node := range members(g, n) {
		c.nodes = append(c.nodes, node)
		c.dra.ResourceSlices = append(c.dra.ResourceSlices, st.ResourceSlice(node.Name, st.GPUDriver, st.GPUs(2, "a100")...))
		c.pods = append(c.pods, st.Pod("busy-"+node.Name, "4", "1Gi", st.OwnedBy("busy"), st.OnNode(node.Name)))
	}
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name          string
		opts          scaleup.Options
		cluster       func() cluster
		state         scaleup.State
		wantIncreases map[string]int
		wantHelped    int
		wantAbsorbed  int
		// wantNoScaleUp is the message of the first pod nothing helps.
		wantNoScaleUp      string
		wantNoScaleUpCount int
	}{
		{
			name: "binpacks pending pods on new nodes",
			opts: options(),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: st.Replicas("web", 5, "1500m", "1Gi")}
			},
			wantIncreases: map[string]int{"workers": 3},
			wantHelped:    5,
		},
		{
			name: "pods that fit an existing node need no scale-up",
			opts: options(),
			cluster: func() cluster {
				workers := group("workers", 1, 10)
				return cluster{groups: []*st.NodeGroup{workers}, nodes: members(workers, 1), pods: st.Replicas("web", 2, "1", "1Gi")}
			},
			wantIncreases: map[string]int{},
			wantAbsorbed:  2,
		},
		{
			name: "nodes on their way absorb pods",
			opts: options(),
			cluster: func() cluster {
				workers := group("workers", 3, 10)
				return cluster{groups: []*st.NodeGroup{workers}, nodes: members(workers, 1), pods: st.Replicas("web", 9, "1", "1Gi")}
			},
			// 1 registered and 2 upcoming 4-cpu nodes take 12 pods.
			wantIncreases: map[string]int{},
			wantAbsorbed:  9,
		},
		{
			name: "upcoming nodes given by the caller",
			opts: options(),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 3, 10)}, pods: st.Replicas("web", 9, "1", "1Gi")}
			},
			state:         scaleup.State{Upcoming: map[string]int{"workers": 1}},
			wantIncreases: map[string]int{"workers": 2},
			wantHelped:    5,
			wantAbsorbed:  4,
		},
		{
			name: "DaemonSet pods take room on new nodes",
			opts: options(),
			cluster: func() cluster {
				ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "logs", Namespace: "kube-system"}}
				ds.Spec.Template.Spec.Containers = st.Pod("x", "1", "100Mi").Spec.Containers
				// 8 pods of 1 cpu: 2 nodes of 4 cpu, but 3 when 1 cpu goes to the DaemonSet.
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: st.Replicas("web", 8, "1", "1Gi"), daemonSets: []*appsv1.DaemonSet{ds}}
			},
			wantIncreases: map[string]int{"workers": 3},
			wantHelped:    8,
		},
		{
			name: "max size caps the scale-up",
			opts: options(),
			cluster: func() cluster {
				workers := group("workers", 2, 4)
				return cluster{groups: []*st.NodeGroup{workers}, nodes: members(workers, 2), pods: st.Replicas("web", 5, "3", "1Gi")}
			},
			// The 2 members take 2 pods; 3 need new nodes, 2 may be added.
			wantIncreases:      map[string]int{"workers": 2},
			wantHelped:         2,
			wantAbsorbed:       2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max node group size reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "a group at max size helps nobody",
			opts: options(),
			cluster: func() cluster {
				workers := group("workers", 1, 1)
				return cluster{groups: []*st.NodeGroup{workers}, nodes: members(workers, 1), pods: st.Replicas("web", 2, "3", "1Gi")}
			},
			wantIncreases:      map[string]int{},
			wantAbsorbed:       1,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max node group size reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "the cores limit counts every node: 64 cores max, 30 used, 8-core machines add at most 4",
			opts: options(func(o *scaleup.Options) { o.Limits.Cores.Max = 64 }),
			cluster: func() cluster {
				workers := &st.NodeGroup{Name: "workers", Max: 100, Template: st.Node("t", "8", "32Gi")}
				controlPlane := st.Node("control-plane", "6", "16Gi", st.WithTaint("node-role.kubernetes.io/control-plane", "", corev1.TaintEffectNoSchedule))
				unmanaged := st.Node("unmanaged", "24", "64Gi", st.WithTaint("dedicated", "db", corev1.TaintEffectNoSchedule))
				return cluster{groups: []*st.NodeGroup{workers}, nodes: []*corev1.Node{controlPlane, unmanaged}, pods: st.Replicas("web", 10, "7", "1Gi")}
			},
			wantIncreases:      map[string]int{"workers": 4},
			wantHelped:         4,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster cpu limit reached",
			wantNoScaleUpCount: 6,
		},
		{
			name: "the memory limit",
			opts: options(func(o *scaleup.Options) { o.Limits.MemoryBytes.Max = 20 << 30 }),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: st.Replicas("web", 3, "3", "1Gi")}
			},
			wantIncreases:      map[string]int{"workers": 2},
			wantHelped:         2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster memory limit reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "the GPU limit",
			opts: options(func(o *scaleup.Options) {
				o.Limits.GPUs = map[corev1.ResourceName]scaleup.Range{"nvidia.com/gpu": {Max: 2}}
			}),
			cluster: func() cluster {
				gpus := group("gpus", 0, 10, st.WithAllocatable("nvidia.com/gpu", "1"))
				return cluster{groups: []*st.NodeGroup{gpus}, pods: st.Replicas("train", 3, "1", "1Gi", st.WithRequest("nvidia.com/gpu", "1"))}
			},
			wantIncreases:      map[string]int{"gpus": 2},
			wantHelped:         2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster nvidia.com/gpu limit reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "the GPU limit of a DRA driver counts its devices: 8 max, the cluster at 4, nodes of 2 add at most 2",
			opts: options(gpuLimit(8)),
			cluster: func() cluster {
				gpus := group("gpus", 2, 10)
				c := cluster{groups: []*st.NodeGroup{gpus}}
				gpuMembers(&c, gpus, 2)
				return withGPUs(c)
			},
			wantIncreases:      map[string]int{"gpus": 2},
			wantHelped:         2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster gpu.example.com limit reached",
			wantNoScaleUpCount: 2,
		},
		{
			name: "the GPU limit of a DRA driver counts the devices of a template at zero, and of every node",
			opts: options(gpuLimit(6)),
			cluster: func() cluster {
				gpus := group("gpus", 0, 10, withNodeAnnotation(snapshot.TemplateDevicesAnnotation, st.GPUDriver+"=2"))
				// A node of no group, with 2 devices and no room.
				other := st.Node("other", "4", "8Gi")
				c := cluster{groups: []*st.NodeGroup{gpus}, nodes: []*corev1.Node{other}}
				c.dra.ResourceSlices = []*resourceapi.ResourceSlice{st.ResourceSlice("other", st.GPUDriver, st.GPUs(2, "a100")...)}
				c.pods = []*corev1.Pod{st.Pod("busy", "4", "1Gi", st.OwnedBy("busy"), st.OnNode("other"))}
				return withGPUs(c)
			},
			wantIncreases:      map[string]int{"gpus": 2},
			wantHelped:         2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster gpu.example.com limit reached",
			wantNoScaleUpCount: 2,
		},
		{
			name: "the GPU limit of a DRA driver counts the devices of the nodes on their way",
			opts: options(gpuLimit(8)),
			cluster: func() cluster {
				// 2 registered, 1 on its way: 6 devices, room for 1 more node.
				gpus := group("gpus", 3, 10)
				c := cluster{groups: []*st.NodeGroup{gpus}}
				gpuMembers(&c, gpus, 2)
				return withGPUs(c)
			},
			wantIncreases:      map[string]int{"gpus": 1},
			wantHelped:         1,
			wantAbsorbed:       1,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max cluster gpu.example.com limit reached",
			wantNoScaleUpCount: 2,
		},
		{
			name: "an extended resource limit does not count DRA devices",
			opts: options(func(o *scaleup.Options) {
				o.Limits.GPUs = map[corev1.ResourceName]scaleup.Range{"nvidia.com/gpu": {Max: 2}}
			}),
			cluster: func() cluster {
				gpus := group("gpus", 2, 10)
				c := cluster{groups: []*st.NodeGroup{gpus}}
				gpuMembers(&c, gpus, 2)
				return withGPUs(c)
			},
			wantIncreases: map[string]int{"gpus": 4},
			wantHelped:    4,
		},
		{
			name: "the total node count limit",
			opts: options(func(o *scaleup.Options) { o.Limits.MaxNodesTotal = 3 }),
			cluster: func() cluster {
				workers := group("workers", 2, 10)
				return cluster{groups: []*st.NodeGroup{workers}, nodes: members(workers, 2), pods: st.Replicas("web", 4, "3", "1Gi")}
			},
			wantIncreases:      map[string]int{"workers": 1},
			wantHelped:         1,
			wantAbsorbed:       2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max total nodes in cluster reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "the per scale-up node cap",
			opts: options(func(o *scaleup.Options) { o.MaxNodesPerScaleUp = 2 }),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: st.Replicas("web", 3, "3", "1Gi")}
			},
			wantIncreases:      map[string]int{"workers": 2},
			wantHelped:         2,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max nodes per scale-up reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "pods below the priority cutoff are ignored",
			opts: options(),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: append(
					st.Replicas("low", 2, "3", "1Gi", st.WithPriority(-11)),
					st.Replicas("at-cutoff", 1, "3", "1Gi", st.WithPriority(-10))...)}
			},
			wantIncreases: map[string]int{"workers": 1},
			wantHelped:    1,
		},
		{
			name: "pods younger than the delay wait",
			opts: options(func(o *scaleup.Options) { o.NewPodScaleUpDelay = 30 * time.Second }),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: append(
					st.Replicas("new", 2, "3", "1Gi", st.CreatedAt(st.Now.Add(-10*time.Second))),
					st.Replicas("old", 1, "3", "1Gi", st.CreatedAt(st.Now.Add(-time.Minute)))...)}
			},
			wantIncreases: map[string]int{"workers": 1},
			wantHelped:    1,
		},
		{
			name: "pods the scheduler has not given up on are ignored",
			opts: options(),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 10)}, pods: st.Replicas("web", 2, "1", "1Gi", func(pod *corev1.Pod) {
					pod.Status.Conditions = nil
				})}
			},
			wantIncreases: map[string]int{},
		},
		{
			name: "each group says why it cannot help",
			opts: options(),
			cluster: func() cluster {
				return cluster{
					groups: []*st.NodeGroup{
						group("gpu", 0, 10, st.WithTaint("dedicated", "gpu", corev1.TaintEffectNoSchedule)),
						group("small", 0, 10),
						group("backoff", 0, 10),
						{Name: "no-template", Max: 10},
					},
					pods: st.Replicas("big", 1, "6", "1Gi"),
				}
			},
			state: scaleup.State{Skip: func(g nodegroups.NodeGroup) string {
				if g.ID() == "backoff" {
					return "in backoff"
				}
				return ""
			}},
			wantIncreases:      map[string]int{},
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 Insufficient cpu, 1 in backoff, 1 no template node: no capacity information, 1 node(s) had untolerated taint {dedicated: gpu}",
			wantNoScaleUpCount: 1,
		},
		{
			name: "a node selector picks the group",
			opts: options(),
			cluster: func() cluster {
				return cluster{
					groups: []*st.NodeGroup{group("a", 0, 10, st.WithNodeLabels("pool", "a")), group("b", 0, 10, st.WithNodeLabels("pool", "b"))},
					pods:   st.Replicas("web", 2, "3", "1Gi", st.WithNodeSelector("pool", "b")),
				}
			},
			wantIncreases: map[string]int{"b": 2},
			wantHelped:    2,
		},
		{
			name: "pods that need different groups get them all in one plan",
			opts: options(),
			cluster: func() cluster {
				return twoPools(10)
			},
			wantIncreases: map[string]int{"a": 3, "b": 2},
			wantHelped:    5,
		},
		{
			name: "the most pods first, then the rest on the group that takes them",
			opts: options(),
			cluster: func() cluster {
				// Round 1: one node of a takes the 7 small pods; round 2: the large
				// pod, which alone tolerates b's taint, gets a node of b.
				b := &st.NodeGroup{Name: "b", Max: 10, Template: st.Node("b-template", "16", "32Gi",
					st.WithTaint("dedicated", "large", corev1.TaintEffectNoSchedule))}
				return cluster{
					groups: []*st.NodeGroup{sizedGroup("a", "8", "16Gi", 10), b},
					pods: append(st.Replicas("small", 7, "1", "1Gi"),
						st.Replicas("large", 1, "12", "1Gi", st.WithToleration("dedicated", "large", corev1.TaintEffectNoSchedule))...),
				}
			},
			wantIncreases: map[string]int{"a": 1, "b": 1},
			wantHelped:    8,
		},
		{
			name: "limits cap the nodes of every round together",
			opts: options(func(o *scaleup.Options) { o.Limits.MaxNodesTotal = 4 }),
			cluster: func() cluster {
				return twoPools(10)
			},
			wantIncreases: map[string]int{"a": 3, "b": 1},
			wantHelped:    4,
			// Both groups are capped in the last round.
			wantNoScaleUp:      "pod didn't trigger scale-up: 2 max total nodes in cluster reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "the per scale-up node cap counts every round",
			opts: options(func(o *scaleup.Options) { o.MaxNodesPerScaleUp = 4 }),
			cluster: func() cluster {
				return twoPools(10)
			},
			wantIncreases:      map[string]int{"a": 3, "b": 1},
			wantHelped:         4,
			wantNoScaleUp:      "pod didn't trigger scale-up: 2 max nodes per scale-up reached",
			wantNoScaleUpCount: 1,
		},
		{
			name: "a group grown in one round is not grown beyond its max size in the next",
			opts: options(),
			cluster: func() cluster {
				// Round 1: a takes 2 web pods (its max) and b takes the db pods; the
				// third web pod fits only a.
				return twoPools(2)
			},
			wantIncreases:      map[string]int{"a": 2, "b": 2},
			wantHelped:         4,
			wantNoScaleUp:      "pod didn't trigger scale-up: 1 max node group size reached, 1 node(s) didn't match Pod's node affinity/selector",
			wantNoScaleUpCount: 1,
		},
		{
			name: "thousands of replicas binpack as one group",
			opts: options(),
			cluster: func() cluster {
				return cluster{groups: []*st.NodeGroup{group("workers", 0, 1000)}, pods: st.Replicas("web", 3000, "1", "1Gi")}
			},
			wantIncreases: map[string]int{"workers": 750},
			wantHelped:    3000,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			plan := planFor(t, tt.opts, tt.cluster(), tt.state)
			g.Expect(increases(plan)).To(Equal(tt.wantIncreases))
			g.Expect(names(plan.Helped)).To(HaveLen(tt.wantHelped))
			g.Expect(plan.Absorbed).To(HaveLen(tt.wantAbsorbed))
			g.Expect(plan.NoScaleUp).To(HaveLen(tt.wantNoScaleUpCount))
			if tt.wantNoScaleUpCount > 0 {
				g.Expect(plan.NoScaleUp[0].Message()).To(Equal(tt.wantNoScaleUp))
			}
		})
	}
}

// Nodes on their way have no pod bound yet: pods that arrive after a plan
// filled them are planned again together with the pods nominated to them,
// when that needs fewer new nodes.
func TestPodsNominatedToNodesOnTheirWayArePlannedAgainWithNewcomers(t *testing.T) {
	g := NewWithT(t)
	workers := group("workers", 0, 10)
	web := st.Replicas("web", 4, "1500m", "1Gi")
	c := cluster{groups: []*st.NodeGroup{workers}, pods: web}
	first := planFor(t, options(), c, scaleup.State{})
	g.Expect(increases(first)).To(Equal(map[string]int{"workers": 2}), "two 1.5-cpu pods per 4-cpu node")

	workers.Target = 2
	apart := st.Replicas("apart", 2, "1500m", "1Gi", st.WithPodLabels("app", "apart"), withRequiredAntiAffinity(corev1.LabelHostname, "app", "apart"))
	c.pods = slices.Concat(web, apart)
	second := planFor(t, options(), c, scaleup.State{Nominations: first.Nominations})

	g.Expect(increases(second)).To(Equal(map[string]int{"workers": 1}),
		"the pods that keep apart take one node on its way each, beside one web pod; the two other web pods share one new node")
	g.Expect(second.Nominations).To(HaveLen(6))
}

// startingNode is a node of the group that registered now and has not
// started: NotReady, with the not-ready taint.
func startingNode(name string) *corev1.Node {
	node := st.Node(name, "4", "8Gi", st.WithTaint(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoSchedule))
	node.CreationTimestamp = metav1.NewTime(st.Now)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	return node
}

// twoNodesOnTheirWayForTwoPods is a group with two nodes that registered
// but have not started, each with room for one of the two pending pods.
func twoNodesOnTheirWayForTwoPods() (*st.NodeGroup, []*corev1.Node, []*corev1.Pod) {
	workers := group("workers", 2, 10)
	workers.Nodes = []string{"workers-0", "workers-1"}
	return workers, []*corev1.Node{startingNode("workers-0"), startingNode("workers-1")}, st.Replicas("web", 2, "3", "1Gi")
}

// toNominate are the plan's nominations to write, node by pod name.
func toNominate(plan *scaleup.Plan) map[string]string {
	result := map[string]string{}
	for _, placement := range plan.ToNominate {
		result[placement.Pod.Name] = placement.NodeName
	}
	return result
}

// kube-scheduler clears a pod's nomination on each failed attempt, and
// once the node planned for the pod has started, pods planned for other
// nodes, which fail there, take its room unless the nomination is back:
// a pod the last plan nominated to a node stays to be nominated there as
// long as the plan places it there, once the node has started too (issue
// 51). Before, the nomination was no longer the plan's once the node had
// started, and no one wrote it back. A pod that merely fits on a node
// that has started is left to kube-scheduler.
func TestPodNominatedToANodeOnItsWayStaysNominatedOnceTheNodeHasStarted(t *testing.T) {
	g := NewWithT(t)
	workers, nodes, web := twoNodesOnTheirWayForTwoPods()
	// The engine counts the nodes that have not started as upcoming.
	first := planFor(t, options(), cluster{groups: []*st.NodeGroup{workers}, nodes: nodes, pods: web},
		scaleup.State{Upcoming: map[string]int{"workers": 2}})
	nominated := toNominate(first)
	g.Expect(nominated).To(HaveLen(2), "one pod on each node on its way")
	g.Expect(nominated["web-0"]).NotTo(Equal(nominated["web-1"]))

	// web-0's node started; kube-scheduler cleared web-0's nomination
	// (web-1's stands) on a failed attempt, before it tried the node.
	started := slices.IndexFunc(nodes, func(node *corev1.Node) bool { return node.Name == nominated["web-0"] })
	nodes[started] = st.Node(nominated["web-0"], "4", "8Gi")
	web[1].Status.NominatedNodeName = nominated["web-1"]
	// A pod that came since fits beside web-0 on its node, and only there.
	late := st.Pod("late-0", "1", "1Gi", st.WithNodeSelector(corev1.LabelHostname, nominated["web-0"]))
	second := planFor(t, options(), cluster{groups: []*st.NodeGroup{workers}, nodes: nodes, pods: append(slices.Clone(web), late)},
		scaleup.State{Upcoming: map[string]int{"workers": 1}, Nominations: first.Nominations})

	g.Expect(second.Increases).To(BeEmpty())
	g.Expect(second.Absorbed).To(HaveLen(3), "the late pod fits on the node that started")
	g.Expect(toNominate(second)).To(Equal(nominated),
		"web-0 is nominated to its node again, which has started; the late pod, which the last plan did not nominate, is not")

	// The plan after still has web-0 nominated there, while it is pending.
	third := planFor(t, options(), cluster{groups: []*st.NodeGroup{workers}, nodes: nodes, pods: web},
		scaleup.State{Upcoming: map[string]int{"workers": 1}, Nominations: second.Nominations})
	g.Expect(toNominate(third)).To(Equal(nominated))

	// web-1 is bound to its node, which started too; web-0's node is gone,
	// and the group replaces it: web-0 waits for the replacement, whose
	// name is not known, and is nominated nowhere.
	bound := st.Pod("web-1", "3", "1Gi", st.OnNode(nominated["web-1"]))
	workers.Nodes = []string{nominated["web-1"]}
	fourth := planFor(t, options(), cluster{groups: []*st.NodeGroup{workers}, nodes: []*corev1.Node{st.Node(nominated["web-1"], "4", "8Gi")},
		pods: []*corev1.Pod{web[0], bound}}, scaleup.State{Upcoming: map[string]int{"workers": 1}, Nominations: third.Nominations})
	g.Expect(fourth.Increases).To(BeEmpty(), "web-0 waits for the node the group is to replace")
	g.Expect(fourth.Absorbed).To(HaveLen(1))
	g.Expect(fourth.ToNominate).To(BeEmpty())
}

// A pod whose planned node registered under another name goes to a node of
// its group, but not to one the last plan gave another pod: that pod keeps
// its room there, and its nomination.
func TestPodWhoseNodeIsGoneDoesNotTakeTheRoomOfAPodNominatedToAnother(t *testing.T) {
	g := NewWithT(t)
	workers, nodes, web := twoNodesOnTheirWayForTwoPods()
	web[1].Status.NominatedNodeName = "workers-0"
	last := []scaleup.Nomination{
		{Pod: web[0].UID, Node: "workers-template-upcoming-0", Group: "workers", Nominated: true},
		{Pod: web[1].UID, Node: "workers-0", Group: "workers", Nominated: true},
	}
	plan := planFor(t, options(), cluster{groups: []*st.NodeGroup{workers}, nodes: nodes, pods: web},
		scaleup.State{Upcoming: map[string]int{"workers": 2}, Nominations: last})

	g.Expect(plan.Increases).To(BeEmpty())
	g.Expect(toNominate(plan)).To(Equal(map[string]string{"web-0": "workers-1", "web-1": "workers-0"}),
		"web-1 stays on the node it is nominated to; web-0, whose node is gone, takes the other")
}
