package optimum

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// Planner places a mix's pods on new nodes.
type Planner interface {
	Name() string
	Place(ctx context.Context, m *Mix) (*Placement, error)
}

// PriceExpanders are the expander chain Ours runs by default: the
// cheapest option, ties to the least waste (docs/cost.md).
var PriceExpanders = []string{scaleup.ExpanderPrice, scaleup.ExpanderLeastWaste}

// Ours is the engine's scale-up planner with the engine's default
// options but for the expanders: the decisions of its loops, each seeing
// the nodes the ones before asked for as running, with the pods they
// nominated there, until a loop adds nothing.
type Ours struct {
	Expanders []string
}

// Name implements Planner.
func (o Ours) Name() string { return "ours" }

// Place implements Planner.
func (o Ours) Place(ctx context.Context, m *Mix) (*Placement, error) {
	c, err := o.scaleUp(ctx, m)
	if err != nil {
		return nil, err
	}
	return c.placement(), nil
}

// maxLoops bounds the loops Ours runs; one is enough when the plan
// places every pod.
const maxLoops = 10

// scaleUp runs our loops on the mix and returns the cluster they leave.
func (o Ours) scaleUp(ctx context.Context, m *Mix) (*cluster, error) {
	c := newCluster(m)
	return c, o.scaleUpPending(ctx, c)
}

// scaleUpPending runs our loops on the cluster until they add nothing.
func (o Ours) scaleUpPending(ctx context.Context, c *cluster) error {
	config := autoscaler.DefaultConfig()
	planner, err := scaleup.New(scaleup.Options{
		PriorityCutoff:     config.PodPriorityThreshold,
		MaxNodesPerScaleUp: config.MaxNodesPerScaleUp,
		Expanders:          o.Expanders,
		NodeRules:          nodefacts.NewRules(nil, nil),
		Clock:              clocktesting.NewFakePassiveClock(st.Now),
		Rand:               rand.New(rand.NewPCG(1, 2)),
	})
	if err != nil {
		return err
	}
	for range maxLoops {
		plan := planner.Plan(ctx, snapshot.New(c.input()), scaleup.State{})
		if len(plan.Increases) == 0 {
			break
		}
		if err := c.bindNominations(plan); err != nil {
			return err
		}
	}
	return nil
}

// cluster is the state of a mix's cluster as the planners leave it: its
// nodes, control plane first, and pods, bound or pending.
type cluster struct {
	mix    *Mix
	nodes  []*corev1.Node
	pods   []*corev1.Pod
	groups []*st.NodeGroup
	// groupOf is, by node name, the index of the node's group.
	groupOf map[string]int
	// added counts, by group, the nodes ever added to it: the next
	// node's number, which a removal does not free.
	added []int
}

func newCluster(m *Mix) *cluster {
	c := &cluster{mix: m, nodes: m.ControlPlane(), pods: m.KubePods(), groupOf: map[string]int{}, added: make([]int, len(m.Groups))}
	for g, group := range m.Groups {
		c.groups = append(c.groups, &st.NodeGroup{Name: m.GroupID(g), Max: 1000, Template: m.Node(g, "template-"+group.Name), Price: &group.Price})
	}
	return c
}

func (c *cluster) input() snapshot.Input {
	in := snapshot.Input{Nodes: c.nodes, Pods: c.pods, Controllers: st.Controllers(c.pods...)}
	for _, group := range c.groups {
		in.NodeGroups = append(in.NodeGroups, group)
	}
	return in
}

// bindNominations starts the nodes the plan adds, named after their
// groups, and binds each pod the plan nominated where it was nominated, as
// kube-scheduler does once the nodes are up.
func (c *cluster) bindNominations(plan *scaleup.Plan) error {
	names := map[string]string{}
	for _, nomination := range plan.Nominations {
		name, ok := names[nomination.Node]
		if !ok && slices.ContainsFunc(c.nodes, func(n *corev1.Node) bool { return n.Name == nomination.Node }) {
			name, ok = nomination.Node, true
		}
		if !ok {
			g := slices.IndexFunc(c.groups, func(group *st.NodeGroup) bool { return group.Name == nomination.Group })
			if g < 0 {
				return fmt.Errorf("pod %s nominated to node %s of unknown group %q", nomination.Pod, nomination.Node, nomination.Group)
			}
			name = c.addNode(g)
			names[nomination.Node] = name
		}
		i := slices.IndexFunc(c.pods, func(pod *corev1.Pod) bool { return pod.UID == nomination.Pod })
		if i < 0 {
			return fmt.Errorf("nominated pod %s is not in the mix", nomination.Pod)
		}
		c.pods[i] = bound(c.pods[i], name)
	}
	return nil
}

// addNode starts a node of group g, Ready, and returns its name.
func (c *cluster) addNode(g int) string {
	name := fmt.Sprintf("%s-%d", c.mix.Groups[g].Name, c.added[g])
	c.added[g]++
	c.nodes = append(c.nodes, c.mix.Node(g, name))
	c.groups[g].Nodes = append(c.groups[g].Nodes, name)
	c.groups[g].Target++
	c.groupOf[name] = g
	return name
}

// bound is the pod running on node.
func bound(pod *corev1.Pod, node string) *corev1.Pod {
	pod = pod.DeepCopy()
	st.OnNode(node)(pod)
	return pod
}

// placement is where the cluster's pods are.
func (c *cluster) placement() *Placement {
	p := &Placement{}
	index := map[string]int{}
	for _, node := range c.nodes {
		if g, ok := c.groupOf[node.Name]; ok {
			index[node.Name] = len(p.Nodes)
			p.Nodes = append(p.Nodes, Node{Group: g})
		}
	}
	for _, pod := range c.pods {
		i, ok := index[pod.Spec.NodeName]
		if !ok {
			p.Unplaced++
			continue
		}
		p.Nodes[i].Pods = append(p.Nodes[i].Pods, c.mix.AppOf(pod))
	}
	return p
}

// Consolidated is Ours followed by the engine's scale-down with
// consolidation on under Policy, the other options the engine's
// defaults: its passes, each removal done at once and the evicted pods
// placed again as the simulator places them, until two passes a
// consolidateAfter apart remove nothing. A replacement's new nodes start
// Ready at once, and the passes follow it as the engine does, until the
// nodes it replaces go.
type Consolidated struct {
	Ours   Ours
	Policy scaledown.ConsolidationPolicy
	// Budget, when set, replaces the engine's default budget.
	Budget *intstr.IntOrString
}

// Name implements Planner.
func (c Consolidated) Name() string { return "ours+" + string(c.Policy) }

// maxPasses bounds the scale-down passes of Consolidated.
const maxPasses = 500

// Place implements Planner.
func (c Consolidated) Place(ctx context.Context, m *Mix) (*Placement, error) {
	cl, err := c.Ours.scaleUp(ctx, m)
	if err != nil {
		return nil, err
	}
	config := autoscaler.DefaultConfig()
	sd := config.ScaleDown
	opts := scaledown.Options{
		Groups: nodegroups.Settings{
			ScaleDownUtilizationThreshold: sd.UtilizationThreshold, ScaleDownUnneededTime: sd.UnneededTime,
			ScaleDownUnreadyTime: sd.UnreadyTime, MaxNodeProvisionTime: config.MaxNodeProvisionTime,
		},
		DelayAfterAdd: sd.DelayAfterAdd, DelayAfterDelete: sd.DelayAfterDelete, DelayAfterFailure: sd.DelayAfterFailure,
		PriorityCutoff:                    config.PodPriorityThreshold,
		SkipNodesWithLocalStorage:         sd.SkipNodesWithLocalStorage,
		SkipNodesWithSystemPods:           sd.SkipNodesWithSystemPods,
		SkipNodesWithCustomControllerPods: sd.SkipNodesWithCustomControllerPods,
		MaxEmptyBulkDelete:                sd.MaxEmptyBulkDelete,
		MaxParallelDrains:                 sd.MaxParallelDrains,
		NodeRules:                         nodefacts.NewRules(nil, nil),
		Consolidation: scaledown.ConsolidationOptions{
			Policy: c.Policy, ConsolidateAfter: config.Consolidation.ConsolidateAfter,
			Budget: config.Consolidation.Budget, MaxSimulations: config.Consolidation.MaxSimulations,
		},
	}
	if c.Budget != nil {
		opts.Consolidation.Budget = *c.Budget
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	clock := clocktesting.NewFakeClock(st.Now)
	planner := scaledown.NewPlanner(clock)
	wait := max(opts.Consolidation.ConsolidateAfter, sd.UnneededTime) + time.Second
	idle := 0
	var replacing *scaledown.Replacing
	for range maxPasses {
		snap := snapshot.New(cl.input())
		if opts.Consolidation.Replaces() {
			simulator.SetTemplates(ctx, snap, opts.NodeRules)
		}
		plan := planner.Plan(ctx, snap, opts, scaledown.Progress{Replacing: replacing})
		if outcome := plan.Replacing; outcome != nil {
			if outcome.Abandoned != "" {
				return nil, errors.New(outcome.Message())
			}
			if outcome.Ready {
				replacing = nil
			}
		}
		if consolidation := plan.Consolidation; consolidation != nil && consolidation.Replacement != nil {
			replacing = cl.startReplacing(consolidation, clock.Now())
			idle = 0
			clock.Step(config.ScanInterval)
			continue
		}
		removals := append(slices.Clone(plan.Empty), plan.Drain...)
		if len(removals) == 0 {
			if idle++; idle == 2 {
				return cl.placement(), nil
			}
			clock.Step(wait)
			continue
		}
		idle = 0
		if cl.remove(ctx, removals) {
			// The pods evicted, placed in another order than
			// consolidation simulated, left some without a place: the
			// engine scales up for them.
			if err := c.Ours.scaleUpPending(ctx, cl); err != nil {
				return nil, err
			}
		}
		clock.Step(config.ScanInterval)
	}
	return nil, fmt.Errorf("scale-down still removed nodes after %d passes", maxPasses)
}

// startReplacing starts the new nodes of a replacement.
func (c *cluster) startReplacing(consolidation *scaledown.Consolidation, now time.Time) *scaledown.Replacing {
	before := map[string]bool{}
	for _, g := range consolidation.Replacement.Groups {
		i := slices.IndexFunc(c.groups, func(group *st.NodeGroup) bool { return group.Name == g.Group.ID() })
		for _, name := range c.groups[i].Nodes {
			before[name] = true
		}
		for range g.Nodes {
			c.addNode(i)
		}
	}
	return &scaledown.Replacing{Consolidation: consolidation, Started: now, Before: before}
}

// remove deletes the nodes and places their pods again, as
// kube-scheduler would place them once evicted: the simulator's
// first fit over the nodes that remain. It says whether some are left
// pending.
func (c *cluster) remove(ctx context.Context, removals []scaledown.Removal) (pending bool) {
	gone := map[string]bool{}
	for _, removal := range removals {
		gone[removal.Node.Name] = true
	}
	c.nodes = slices.DeleteFunc(c.nodes, func(n *corev1.Node) bool { return gone[n.Name] })
	for _, group := range c.groups {
		group.Nodes = slices.DeleteFunc(group.Nodes, func(name string) bool {
			if gone[name] {
				group.Target--
			}
			return gone[name]
		})
	}
	var evicted []*corev1.Pod
	for i, pod := range c.pods {
		if gone[pod.Spec.NodeName] {
			pending := st.Pod(pod.Name, "", "")
			pending.Spec, pending.Labels, pending.OwnerReferences = pod.Spec, pod.Labels, pod.OwnerReferences
			pending.Spec.NodeName = ""
			c.pods[i] = pending
			evicted = append(evicted, pending)
		}
	}
	snap := snapshot.New(c.input())
	result := simulator.NewScheduler(ctx, snap).SchedulePods(evicted, simulator.ScheduleOptions{})
	for _, placement := range result.Scheduled {
		i := slices.IndexFunc(c.pods, func(pod *corev1.Pod) bool { return pod.UID == placement.Pod.UID })
		c.pods[i] = bound(c.pods[i], placement.NodeName)
	}
	return len(result.Unschedulable) > 0
}
