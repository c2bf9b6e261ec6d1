package scaledown

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// bestThatFits is best(steps), or the longest shorter prefix that saves
// most, as its evicted pods need it placed together (placeTogether): nil
// when none saves. snap must be as the pass found it, without the
// simulation's removals.
func (p *Planner) bestThatFits(ctx context.Context, snap *snapshot.Snapshot, steps []step, scope consolidationScope, slots []replacementSlot) *decided {
	for {
		d := p.opts.Consolidation.best(steps, scope, slots)
		if d == nil {
			return nil
		}
		if together := p.placeTogether(ctx, snap, d, scope, slots); together != nil {
			return together
		}
		klog.FromContext(ctx).V(4).Info("Consolidation's evicted pods, placed together, do not fit or save nothing", "nodes", len(d.steps), "replacement", d.Replacement != nil)
		steps = d.steps[:len(d.steps)-1]
	}
}

// placeTogether places the pods a consolidation evicts all together, on
// the nodes that remain and the new nodes of its replacement, taken as
// kube-scheduler's queue takes them (the higher priority first, then the
// older), each on the first node it fits. The consolidation was grown
// node by node, the pods of a node moving onto nodes of the set that go
// later and moving again from there: placed together, in the order they
// come back, they may not fit, and the pods left pending would need a
// scale-up that takes back what consolidation saved, or more. A
// replacement may then take more nodes of its last group, as many as the
// pods need within the group's room, and ends with the new nodes that
// took pods. It returns the consolidation as placed together, or nil when
// its pods do not fit or it saves nothing (under Balanced, not enough).
func (p *Planner) placeTogether(ctx context.Context, snap *snapshot.Snapshot, d *decided, scope consolidationScope, slots []replacementSlot) *decided {
	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	defer sched.Revert()
	var evicted []*corev1.Pod
	for _, s := range d.steps {
		name := s.removal.Node.Name
		for _, pod := range snap.NodeInfo(name).Pods() {
			if roleOf(pod.Pod, p.opts.PriorityCutoff) == podMovable {
				evicted = append(evicted, withoutNodeName(pod.Pod))
			}
		}
		_ = sched.RemoveNode(name)
	}
	last := d.steps[len(d.steps)-1]
	if len(evicted) == 0 {
		return d
	}
	// The new nodes, by name, with their slots: those of the replacement
	// in the order of its slots, then those its last group may add.
	newNodes := map[string]int{}
	add := func(slot, i int) {
		template := slots[slot].group.template
		name := fmt.Sprintf("%s-replacement-%d", template.Name(), i)
		if sched.AddNode(template.CopyAs(name)) == nil {
			newNodes[name] = slot
		}
	}
	lastSlot := -1
	for slot, n := range last.newNodes {
		for i := range n {
			add(slot, i)
		}
		if n > 0 {
			lastSlot = slot
		}
	}
	if lastSlot >= 0 {
		for i := last.newNodes[lastSlot]; i < min(slots[lastSlot].group.room, last.newNodes[lastSlot]+len(evicted)); i++ {
			add(lastSlot, i)
		}
	}
	slices.SortStableFunc(evicted, func(a, b *corev1.Pod) int {
		return cmp.Or(
			cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name))
	})
	opts := simulator.ScheduleOptions{
		NodeFilter: func(nodeInfo *snapshot.NodeInfo) bool {
			_, added := newNodes[nodeInfo.Name()]
			return added || p.readyNode(nodeInfo)
		},
		StopAtUnschedulable: true,
	}
	result := sched.SchedulePods(evicted, opts)
	if len(result.Unschedulable) > 0 {
		return nil
	}
	if lastSlot < 0 {
		return d
	}
	used := make([]int, len(slots))
	var newCost pricing.Price
	seen := map[string]bool{}
	for _, placement := range result.Scheduled {
		if slot, ok := newNodes[placement.NodeName]; ok && !seen[placement.NodeName] {
			seen[placement.NodeName] = true
			used[slot]++
			newCost += slots[slot].group.price
		}
	}
	saves := last.removed - newCost
	if saves <= 0 || p.opts.Consolidation.Policy == ConsolidationBalanced && scope.score(saves, last.pods) < p.opts.Consolidation.BalancedThreshold {
		return nil
	}
	steps := slices.Clone(d.steps)
	steps[len(steps)-1].newNodes, steps[len(steps)-1].newCost = used, newCost
	together := &decided{Consolidation: &Consolidation{Removals: d.Removals, Savings: saves}, steps: steps}
	for slot, n := range used {
		if n > 0 {
			if together.Replacement == nil {
				together.Replacement = &Replacement{Price: newCost}
			}
			together.Replacement.Groups = append(together.Replacement.Groups, NewNodes{Group: slots[slot].group.group, Nodes: n})
		}
	}
	if together.Replacement == nil {
		// The pods fit without new nodes.
		together.Savings = last.removed
	}
	return together
}
