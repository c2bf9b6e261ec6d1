package scaleup_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// replay runs scale-up loops the way the engine does: the increases of a
// loop are nodes on their way in the next, until they register.
type replay struct {
	t       *testing.T
	planner *scaleup.ScaleUp
	cluster cluster
	// plans are the plans of the loops so far, and snapshots what each
	// planned on.
	plans     []*scaleup.Plan
	snapshots []*snapshot.Snapshot
}

func newReplay(t *testing.T, opts scaleup.Options, c cluster) *replay {
	s, err := scaleup.New(opts)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return &replay{t: t, planner: s, cluster: c}
}

// loop plans once and grows the groups as planned.
func (r *replay) loop() *scaleup.Plan {
	_, ctx := ktesting.NewTestContext(r.t)
	var state scaleup.State
	if len(r.plans) > 0 {
		last := r.plans[len(r.plans)-1]
		state.Nominations, state.LastPlanned = last.Nominations, last.LastPlanned
	}
	snap := r.cluster.snapshot()
	plan := r.planner.Plan(ctx, snap, state)
	for _, increase := range plan.Increases {
		NewWithT(r.t).Expect(increase.Group.IncreaseSize(ctx, increase.Delta)).To(Succeed())
	}
	r.plans = append(r.plans, plan)
	r.snapshots = append(r.snapshots, snap)
	return plan
}

// untilStable loops until a loop plans nothing, at most maxLoops times,
// and returns the number of loops that planned nodes.
func (r *replay) untilStable(maxLoops int) int {
	for i := range maxLoops {
		if len(r.loop().Increases) == 0 {
			return i
		}
	}
	r.t.Fatalf("still adding nodes after %d loops", maxLoops)
	return maxLoops
}

// register turns the nodes on their way into registered, empty nodes.
func (r *replay) register() {
	for _, g := range r.cluster.groups {
		for len(g.Nodes) < g.Target {
			node := g.Template.DeepCopy()
			node.Name = fmt.Sprintf("%s-%d", g.Name, len(g.Nodes))
			node.Labels[corev1.LabelHostname] = node.Name
			r.cluster.nodes = append(r.cluster.nodes, node)
			g.Nodes = append(g.Nodes, node.Name)
		}
	}
}

// nodesPerZone counts the target sizes of the groups per zone.
func (r *replay) nodesPerZone() map[string]int {
	counts := map[string]int{}
	for _, g := range r.cluster.groups {
		counts[g.Template.Labels[corev1.LabelTopologyZone]] += g.Target
	}
	return counts
}

// expectEveryPodPlacedOnceStable asserts what a user sees once the nodes
// the autoscaler asked for are there: every pending pod triggered one
// scale-up at most, for no more nodes than pods, a loop plans nothing more,
// and every pod has a place, on the nodes on their way and then on the
// registered ones.
func (r *replay) expectEveryPodPlacedOnceStable() {
	t := r.t
	g := NewWithT(t)
	helped := map[string]int{}
	for i, plan := range r.plans {
		nodes := 0
		for _, increase := range plan.Increases {
			nodes += increase.Delta
		}
		g.Expect(nodes).To(BeNumerically("<=", len(plan.Helped)), "loop %d planned more nodes than pods", i)
		for _, pod := range plan.Helped {
			helped[pod.Name]++
			g.Expect(helped[pod.Name]).To(Equal(1), "pod %s triggered a scale-up in loop %d again", pod.Name, i)
		}
	}
	pending := len(r.cluster.pods)
	stable := r.plans[len(r.plans)-1]
	g.Expect(stable.NoScaleUp).To(BeEmpty(), "pods left without a place")
	g.Expect(stable.Absorbed).To(HaveLen(pending), "pods waiting for nodes on their way")

	r.register()
	plan := r.loop()
	g.Expect(plan.Increases).To(BeEmpty(), "no more nodes once the planned ones registered")
	g.Expect(plan.Absorbed).To(HaveLen(pending), "every pending pod fits the registered nodes")
	g.Expect(r.loop().Increases).To(BeEmpty(), "stays stable")
}

func (r *replay) podsByUID() map[types.UID]*corev1.Pod {
	pods := map[types.UID]*corev1.Pod{}
	for _, pod := range r.cluster.pods {
		pods[pod.UID] = pod
	}
	return pods
}

// expectNoPlannedNodeTakesPodsOfLaterRounds replays the places the first
// plan gave pods, in order, with the simulator, and checks at the start
// of every round that no pod the round gives a new node fits a node that
// an earlier round planned: the round would have bought a node too many.
// The cluster has no nodes on their way: the nodes of the plan are the
// only ones the snapshot lacks.
func (r *replay) expectNoPlannedNodeTakesPodsOfLaterRounds() {
	t := r.t
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	plan, snap := r.plans[0], r.snapshots[0]
	sched := simulator.NewScheduler(ctx, snap)
	pods := r.podsByUID()
	place := func(nomination scaleup.Nomination) {
		if snap.NodeInfo(nomination.Node) == nil {
			g.Expect(sched.AddNode(snap.Template(nomination.Group).CopyAs(nomination.Node))).To(Succeed())
		}
		pod := pods[nomination.Pod]
		g.Expect(sched.PlaceOn(simulator.NewPodGroup(pod), pod, nomination.Node)).To(BeNil(), "pod %s fits where the plan put it", pod.Name)
	}
	for _, nomination := range plan.Nominations[:len(plan.Absorbed)] {
		place(nomination)
	}
	var earlier []string
	for i, round := range plan.Rounds {
		for _, nomination := range round.Placed {
			pod := pods[nomination.Pod]
			for _, node := range earlier {
				g.Expect(sched.Check(pod, node)).NotTo(BeNil(), "round %d gave pod %s a new node, but %s, planned before, takes it", i+1, pod.Name, node)
			}
		}
		for _, nomination := range round.Placed {
			place(nomination)
			if !slices.Contains(earlier, nomination.Node) {
				earlier = append(earlier, nomination.Node)
			}
		}
		for _, nomination := range round.Reused {
			place(nomination)
		}
	}
}

// expectWithinOneNodeOfFirstFitDecreasing checks that the first plan adds
// to each pool (the groups of one shape) at most one node more than
// first-fit decreasing needs for the pods it places on the pool's new
// nodes.
func (r *replay) expectWithinOneNodeOfFirstFitDecreasing() {
	plan, snap := r.plans[0], r.snapshots[0]
	poolOf := func(groupID string) string { return snap.Template(groupID).Node().Labels["shape"] }
	nodes := map[string]int{}
	for _, increase := range plan.Increases {
		nodes[poolOf(increase.Group.ID())] += increase.Delta
	}
	pods := r.podsByUID()
	placed := map[string][]*corev1.Pod{}
	room := map[string]snapshot.Resources{}
	for _, round := range plan.Rounds {
		for _, nomination := range slices.Concat(round.Placed, round.Reused) {
			pool := poolOf(nomination.Group)
			placed[pool] = append(placed[pool], pods[nomination.Pod])
			template := snap.Template(nomination.Group)
			free := template.Allocatable().Clone()
			free.Sub(template.Requested())
			room[pool] = free
		}
	}
	for pool, pods := range placed {
		bound := firstFitDecreasing(pods, room[pool])
		NewWithT(r.t).Expect(nodes[pool]).To(BeNumerically("<=", bound+1), "nodes added to pool %s", pool)
	}
}

// firstFitDecreasing counts the new nodes, each with room for pods, that
// first fit needs for the pods, the largest first (cpu, then memory).
func firstFitDecreasing(pods []*corev1.Pod, room snapshot.Resources) int {
	requests := make([]snapshot.Resources, 0, len(pods))
	for _, pod := range pods {
		requests = append(requests, snapshot.PodRequests(pod))
	}
	slices.SortStableFunc(requests, func(a, b snapshot.Resources) int {
		return cmp.Or(cmp.Compare(b.MilliCPU, a.MilliCPU), cmp.Compare(b.Memory, a.Memory))
	})
	var free []snapshot.Resources
	for _, request := range requests {
		i := slices.IndexFunc(free, func(f snapshot.Resources) bool {
			return f.MilliCPU >= request.MilliCPU && f.Memory >= request.Memory && f.Pods >= request.Pods
		})
		if i < 0 {
			free = append(free, room)
			i = len(free) - 1
		}
		free[i].Sub(request)
	}
	return len(free)
}

// cost is what the loops of a replay added for its pods.
type cost struct {
	pods, nodes                 int
	milliCPU, requestedMilliCPU int64
}

func (r *replay) cost() cost {
	c := cost{pods: len(r.cluster.pods)}
	for _, pod := range r.cluster.pods {
		c.requestedMilliCPU += snapshot.PodRequests(pod).MilliCPU
	}
	for _, plan := range r.plans {
		for _, increase := range plan.Increases {
			c.nodes += increase.Delta
			c.milliCPU += int64(increase.Delta) * increase.Group.(*st.NodeGroup).Template.Status.Capacity.Cpu().MilliValue()
		}
	}
	return c
}

func (c *cost) add(other cost) {
	c.pods += other.pods
	c.nodes += other.nodes
	c.milliCPU += other.milliCPU
	c.requestedMilliCPU += other.requestedMilliCPU
}

func (c cost) String() string {
	return fmt.Sprintf("%d nodes, %d cores added for %d pods requesting %d cores", c.nodes, c.milliCPU/1000, c.pods, c.requestedMilliCPU/1000)
}

func withLabels(kv ...string) st.PodOption { return st.WithPodLabels(kv...) }

// spreadOverZones spreads the pods over zones, DoNotSchedule.
func spreadOverZones(maxSkew int32, selector ...string) st.PodOption {
	return spreadOver(corev1.LabelTopologyZone, maxSkew, selector...)
}

// spreadOver spreads the pods over the values of a node label, DoNotSchedule.
func spreadOver(topologyKey string, maxSkew int32, selector ...string) st.PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: topologyKey, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(selector)},
		})
	}
}

// onePerNode keeps the pods on nodes of their own.
func onePerNode(selector ...string) st.PodOption {
	return func(pod *corev1.Pod) {
		ensureAffinity(pod).PodAntiAffinity = &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(selector)}, TopologyKey: corev1.LabelHostname,
			}},
		}
	}
}

func withAffinity(topologyKey string, selector ...string) st.PodOption {
	return func(pod *corev1.Pod) {
		ensureAffinity(pod).PodAffinity = &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: pairs(selector)}, TopologyKey: topologyKey,
			}},
		}
	}
}

func ensureAffinity(pod *corev1.Pod) *corev1.Affinity {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	return pod.Spec.Affinity
}

func pairs(kv []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// zonalCluster has, in each of three zones, a group per shape with one
// empty registered node.
func zonalCluster(shapes map[string][2]string, maxSize int) cluster {
	var c cluster
	for _, zone := range []string{"z1", "z2", "z3"} {
		for shape, capacity := range shapes {
			g := &st.NodeGroup{
				Name: shape + "-" + zone, Max: maxSize, Target: 1,
				Template: st.Node(shape+"-"+zone+"-template", capacity[0], capacity[1],
					st.WithNodeLabels(corev1.LabelTopologyZone, zone, "shape", shape)),
			}
			c.groups = append(c.groups, g)
		}
	}
	// Sorted, so that every run lists the groups in the same order.
	sortGroups(c.groups)
	r := &replay{cluster: c}
	r.register()
	return r.cluster
}

func sortGroups(groups []*st.NodeGroup) {
	for i := 1; i < len(groups); i++ {
		for j := i; j > 0 && groups[j].Name < groups[j-1].Name; j-- {
			groups[j], groups[j-1] = groups[j-1], groups[j]
		}
	}
}

// The scenario of the issue: three zonal groups of 4-cpu nodes, 40 pods
// with a zone spread and 20 more with the same spread and hostname
// anti-affinity, 1500m each. Two pods fit a node, so 30 nodes suffice, 10
// per zone; each zone already has one.
func TestZoneSpreadGetsEnoughNodesAtOnce(t *testing.T) {
	for _, balance := range []bool{true, false} {
		t.Run(fmt.Sprintf("balance=%t", balance), func(t *testing.T) {
			g := NewWithT(t)
			c := zonalCluster(map[string][2]string{"m": {"4", "8Gi"}}, 50)
			c.pods = append(c.pods, st.Replicas("spread", 40, "1500m", "1Gi",
				withLabels("app", "web"), spreadOverZones(1, "app", "web"))...)
			c.pods = append(c.pods, st.Replicas("exclusive", 20, "1500m", "1Gi",
				withLabels("app", "web", "role", "exclusive"), spreadOverZones(1, "app", "web"),
				onePerNode("role", "exclusive"))...)
			r := newReplay(t, options(func(o *scaleup.Options) { o.BalanceSimilarNodeGroups = balance }), c)

			g.Expect(r.untilStable(5)).To(Equal(1), "one loop plans every node")
			g.Expect(len(r.plans[0].Absorbed)+len(r.plans[0].Helped)).To(Equal(60), "the three empty nodes take 6 pods, new ones the rest")
			g.Expect(r.nodesPerZone()).To(Equal(map[string]int{"z1": 10, "z2": 10, "z3": 10}))
			r.expectEveryPodPlacedOnceStable()
		})
	}
}

// The offline replay of the issue at scale: 1,000 spread pods over 20
// groups. Before placement retried, every loop added a node, without end.
func TestZoneSpreadAtScaleConverges(t *testing.T) {
	g := NewWithT(t)
	shapes := map[string][2]string{}
	for i := range 6 {
		shapes[fmt.Sprintf("s%d", i)] = [2]string{fmt.Sprint(4 + 2*i), fmt.Sprintf("%dGi", 16+8*i)}
	}
	c := zonalCluster(shapes, 200)
	for owner := range 20 {
		opts := []st.PodOption{withLabels("app", fmt.Sprint("app-", owner)), spreadOverZones(1, "app", fmt.Sprint("app-", owner))}
		if owner%3 == 0 {
			opts = append(opts, onePerNode("app", fmt.Sprint("app-", owner)))
		}
		c.pods = append(c.pods, st.Replicas(fmt.Sprint("rs-", owner), 50, fmt.Sprintf("%dm", 500+100*(owner%10)), "1Gi", opts...)...)
	}
	r := newReplay(t, options(func(o *scaleup.Options) {
		o.BalanceSimilarNodeGroups = true
		o.Expanders = []string{scaleup.ExpanderLeastWaste}
	}), c)
	planning := r.untilStable(10)
	g.Expect(planning).To(BeNumerically("<=", 3))
	r.expectEveryPodPlacedOnceStable()
	// Before, 40 loops had added 344 nodes, 4,824 cores, for pods that
	// request a seventh of that.
	cost := r.cost()
	t.Logf("%v, in %d loop(s) that planned nodes", cost, planning)
	g.Expect(float64(cost.milliCPU)).To(BeNumerically("<", 1.5*float64(cost.requestedMilliCPU)), "cores added for the cores requested")
}

// Generated pod mixes with spread, affinity, anti-affinity and mixed
// sizes, and the same mixes without spread or affinity: whatever the mix,
// the loop stops adding nodes once every pod has a place, no node is added
// that no pod ends up on, and no round buys a node for a pod that a node
// planned before takes. Without spread or affinity, each pool gets at most
// one node more than first-fit decreasing needs.
func TestPlacementConvergesOnGeneratedMixes(t *testing.T) {
	shapes := map[string][2]string{"small": {"4", "8Gi"}, "large": {"8", "32Gi"}}
	totals := map[bool]*cost{true: {}, false: {}}
	for seed := range uint64(40) {
		for _, interPod := range []bool{true, false} {
			t.Run(fmt.Sprintf("seed=%d/interPod=%t", seed, interPod), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 7))
				c := zonalCluster(shapes, 100)
				c.pods = generatedPods(rng, interPod)
				expanders := [][]string{{scaleup.ExpanderMostPods}, {scaleup.ExpanderLeastWaste}, {scaleup.ExpanderRandom}}
				r := newReplay(t, options(func(o *scaleup.Options) {
					o.BalanceSimilarNodeGroups = rng.IntN(2) == 0
					o.Expanders = expanders[rng.IntN(len(expanders))]
				}), c)
				// One loop grows every group the pods need, whatever shapes.
				NewWithT(t).Expect(r.untilStable(len(shapes)+2)).To(BeNumerically("<=", 1), "loops that planned nodes")
				totals[interPod].add(r.cost())
				r.expectNoPlannedNodeTakesPodsOfLaterRounds()
				if !interPod {
					r.expectWithinOneNodeOfFirstFitDecreasing()
				}
				r.expectEveryPodPlacedOnceStable()
			})
		}
	}
	t.Logf("Generated mixes: %v; without spread or affinity: %v", totals[true], totals[false])
}

// generatedPods returns a few ReplicaSets and lone pods of random sizes
// and constraints, each of which fits some node group. Without interPod,
// the same pods have no spread, affinity or anti-affinity.
func generatedPods(rng *rand.Rand, interPod bool) []*corev1.Pod {
	cpus := []string{"250m", "500m", "1", "1500m", "3", "6"}
	memories := []string{"256Mi", "1Gi", "2Gi", "6Gi"}
	var pods []*corev1.Pod
	for set := range 2 + rng.IntN(5) {
		name := fmt.Sprint("set-", set)
		opts := []st.PodOption{withLabels("app", name)}
		replicas := 1 + rng.IntN(25)
		cpu, memory := cpus[rng.IntN(len(cpus))], memories[rng.IntN(len(memories))]
		var constraints []st.PodOption
		switch rng.IntN(7) {
		case 1:
			constraints = append(constraints, spreadOverZones(1, "app", name))
		case 2:
			constraints = append(constraints, spreadOverZones(1, "app", name), onePerNode("app", name))
		case 3:
			constraints = append(constraints, onePerNode("app", name))
		case 4:
			constraints = append(constraints, withAffinity(corev1.LabelTopologyZone, "app", name))
		case 5:
			// Spread with another set's pods.
			constraints = append(constraints, withLabels("app", name, "tier", "shared"), spreadOverZones(1+int32(rng.IntN(2)), "tier", "shared"))
		case 6:
			// Spread over the pools, as over capacity types: pools are
			// not similar, so each has rounds of its own. The pods fit
			// the small machines too.
			constraints = append(constraints, spreadOver("shape", 1, "app", name))
			cpu = cpus[rng.IntN(len(cpus)-1)]
		}
		if interPod {
			opts = append(opts, constraints...)
		}
		if rng.IntN(4) == 0 {
			// Pods without a controller are groups of their own.
			for i := range replicas {
				pods = append(pods, st.Pod(fmt.Sprintf("%s-lone-%d", name, i), cpu, memory, opts...))
			}
			continue
		}
		pods = append(pods, st.Replicas(name, replicas, cpu, memory, opts...)...)
	}
	return pods
}
