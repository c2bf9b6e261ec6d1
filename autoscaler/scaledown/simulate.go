package scaledown

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// unneededNode is a candidate that can go together with the ones before it.
type unneededNode struct {
	*candidate
	// empty is true when no pod has to be evicted.
	empty bool
}

// pass is the state of one simulation pass: what the removals accepted so
// far leave of the group sizes, the cluster and the disruption budgets,
// and where they moved pods.
type pass struct {
	sizes  map[string]int
	totals snapshot.Resources
	pdbs   *pdbTracker
	// movedOnto are, by node name, the pods that the removals accepted so
	// far moved onto the node: if it goes too, they must move again.
	movedOnto map[string][]simulator.Placement
	// scans remember which nodes the pods moved so far filled, for the
	// pods of later candidates to skip.
	scans *simulator.Scans
	// newNodes are, by name, the nodes a replacement would add, which
	// take pods before they exist, each with the index of its slot in
	// newSlots; nil outside replacements.
	newNodes map[string]int
	newSlots []replacementSlot
}

// scheduleOptions place pods on the ready nodes that remain, and on the
// new nodes of a replacement.
func (p *Planner) scheduleOptions(state *pass) simulator.ScheduleOptions {
	filter := p.readyNode
	if len(state.newNodes) > 0 {
		filter = func(nodeInfo *snapshot.NodeInfo) bool {
			_, added := state.newNodes[nodeInfo.Name()]
			return added || p.readyNode(nodeInfo)
		}
	}
	return simulator.ScheduleOptions{NodeFilter: filter, Scans: state.scans}
}

// newNodesUsed counts, by slot, the new nodes that pods were moved onto,
// and returns what they cost.
func (s *pass) newNodesUsed() ([]int, pricing.Price) {
	if len(s.newSlots) == 0 {
		return nil, 0
	}
	used := make([]int, len(s.newSlots))
	var cost pricing.Price
	for name, slot := range s.newNodes {
		if len(s.movedOnto[name]) > 0 {
			used[slot]++
			cost += s.newSlots[slot].group.price
		}
	}
	return used, cost
}

// moved records where a simulation placed pods.
func (s *pass) moved(placements []simulator.Placement) {
	for _, placement := range placements {
		s.movedOnto[placement.NodeName] = append(s.movedOnto[placement.NodeName], placement)
	}
}

// movedGroups are the groups of the pods moved onto the named node,
// restricted to those pods: they move on without being parsed again.
func (s *pass) movedGroups(name string) []*simulator.PodGroup {
	var groups []*simulator.PodGroup
	members := map[*simulator.PodGroup][]*corev1.Pod{}
	for _, placement := range s.movedOnto[name] {
		if _, seen := members[placement.Group]; !seen {
			groups = append(groups, placement.Group)
		}
		members[placement.Group] = append(members[placement.Group], placement.Pod)
	}
	for i, group := range groups {
		groups[i] = group.Subset(members[group])
	}
	return groups
}

// simulate removes the candidates from a fork of snap one after the other,
// moving their pods to the remaining nodes, and returns those that could
// go; each is simulated as if the ones before it were gone. The nodes
// being deleted are gone from the start and their pods moved first.
//
// One scheduler serves the whole pass, each candidate in a fork of its own
// that is committed when the candidate can go: what it derived from the
// cluster is kept up to date rather than derived again per candidate.
func (p *Planner) simulate(ctx context.Context, snap *snapshot.Snapshot, progress Progress, candidates []*candidate, plan *Plan) []*unneededNode {
	sched := simulator.NewScheduler(ctx, snap)
	sched.Fork()
	defer sched.Revert()
	// Built here, not returned by a function, the pass and its maps stay
	// on the stack.
	state := &pass{
		sizes: map[string]int{}, pdbs: newPDBTracker(klog.FromContext(ctx), snap.PodDisruptionBudgets()),
		movedOnto: map[string][]simulator.Placement{}, scans: sched.NewScans(),
	}
	p.startPass(ctx, sched, progress, state)

	logger := klog.FromContext(ctx)
	var unneeded []*unneededNode
	for i, outcome := range p.tryEach(sched, state, candidates) {
		c, empty, kept := candidates[i], outcome.empty, outcome.kept
		if kept != nil {
			logger.V(4).Info("Node cannot be removed", "node", klog.KObj(c.nodeInfo.Node()), "reason", kept.Reason, "message", kept.Message)
			plan.Kept[c.nodeInfo.Name()] = *kept
			continue
		}
		unneeded = append(unneeded, &unneededNode{candidate: c, empty: empty})
	}
	return unneeded
}

// startPass starts a simulation pass with a new state, in a fork of the
// scheduler's snapshot: the group sizes and totals of the cluster, and the
// nodes being deleted gone, their pods moved.
func (p *Planner) startPass(ctx context.Context, sched *simulator.Scheduler, progress Progress, state *pass) {
	snap := sched.Snapshot()
	for _, nodeInfo := range snap.NodeInfos() {
		if !progress.Deleting[nodeInfo.Name()] {
			state.totals.Add(nodeInfo.LimitCapacity())
		}
	}
	for _, group := range snap.NodeGroups() {
		state.sizes[group.ID()] = group.TargetSize()
	}
	p.removeDeleting(ctx, sched, progress, state)
}

// removeDeleting takes the nodes being deleted out of the snapshot and
// places their pods elsewhere, as the scheduler will, so that no candidate
// counts on room that those pods are about to take. Pods that fit nowhere
// are left out: they will be pending whatever is decided here.
func (p *Planner) removeDeleting(ctx context.Context, sched *simulator.Scheduler, progress Progress, state *pass) {
	if len(progress.Deleting) == 0 {
		return
	}
	snap := sched.Snapshot()
	var displaced []*corev1.Pod
	for _, nodeInfo := range snap.NodeInfos() {
		if !progress.Deleting[nodeInfo.Name()] {
			continue
		}
		if group := snap.NodeGroupOf(nodeInfo.Name()); group != nil && !progress.Deleted[nodeInfo.Name()] {
			state.sizes[group.ID()]--
		}
		for _, pod := range nodeInfo.Pods() {
			if roleOf(pod.Pod, p.opts.PriorityCutoff) == podMovable {
				displaced = append(displaced, withoutNodeName(pod.Pod))
			}
		}
	}
	for name := range progress.Deleting {
		// Nodes already gone from the cluster are not in the snapshot.
		_ = sched.RemoveNode(name)
	}
	groups := simulator.GroupPods(displaced)
	defer sched.Forget(groups)
	result := sched.ScheduleGroups(groups, p.scheduleOptions(state))
	state.moved(result.Scheduled)
	if len(result.Unschedulable) > 0 {
		klog.FromContext(ctx).V(4).Info("Pods of nodes being deleted fit nowhere", "count", len(result.Unschedulable))
	}
}

// tryRemove checks whether c can go after the removals accepted so far
// and, when it can, removes it from the snapshot with its pods moved
// elsewhere: its own pods, and those that earlier removals of the pass
// moved onto it. Only its own pods are evicted from it, so only they are
// checked against the blocking rules and the disruption budgets, and only
// they make it non-empty.
func (p *Planner) tryRemove(sched *simulator.Scheduler, c *candidate, state *pass) (empty bool, kept *Decision) {
	movable, groups, empty, kept := p.podsToMove(sched, c, state)
	if kept != nil {
		return false, kept
	}
	defer sched.Forget(groups)
	placed, kept := p.moveInFork(sched, c, groups, state)
	if kept != nil {
		return false, kept
	}
	sched.Commit()
	name := c.nodeInfo.Name()
	delete(state.movedOnto, name)
	state.moved(placed)
	state.pdbs.consume(movable)
	state.sizes[c.group.ID()]--
	state.totals.Sub(c.nodeInfo.LimitCapacity())
	return empty, nil
}

// podsToMove checks the limits and the pods of c, and returns the pods
// evicted from it, the groups of those and of the pods that earlier
// removals moved onto it, and whether it is empty; or why it stays.
func (p *Planner) podsToMove(sched *simulator.Scheduler, c *candidate, state *pass) (movable []*corev1.Pod, groups []*simulator.PodGroup, empty bool, kept *Decision) {
	if kept := p.checkLimits(c, state); kept != nil {
		return nil, nil, false, kept
	}
	empty = true
	now := p.clock.Now()
	for _, podInfo := range c.nodeInfo.Pods() {
		pod := podInfo.Pod
		switch roleOf(pod, p.opts.PriorityCutoff) {
		case podStays:
			// A pod still terminating is waited for, as the Actuator
			// waits for it (podsToEvict): the node is drained, not
			// deleted as empty, which it would refuse at every loop.
			if pod.DeletionTimestamp != nil && !gone(pod, now) {
				empty = false
			}
			continue
		case podExpendable:
			empty = false
			continue
		}
		empty = false
		if reason, message := blockingReason(pod, sched.Snapshot(), state.pdbs, p.opts); reason != "" {
			return nil, nil, false, blockedByPod(klog.KRef(pod.Namespace, pod.Name), reason, message)
		}
		movable = append(movable, withoutNodeName(pod))
	}
	if pod, message := state.pdbs.check(movable); pod != nil {
		return nil, nil, false, blockedByPod(klog.KObj(pod), BlockingNotEnoughPdb, message)
	}
	groups = append(simulator.GroupPods(movable), state.movedGroups(c.nodeInfo.Name())...)
	return movable, groups, empty, nil
}

// moveInFork removes c from a fork of sched and places groups, its pods,
// on the remaining nodes. When they all fit, it returns where, leaving the
// fork for the caller to commit or revert; otherwise it reverts the fork
// and says why c stays.
func (p *Planner) moveInFork(sched *simulator.Scheduler, c *candidate, groups []*simulator.PodGroup, state *pass) ([]simulator.Placement, *Decision) {
	// Counted before the fork, the groups' spread and affinity counts
	// outlive its revert: the next candidate's pods of the same terms
	// catch up with them rather than count every pod of the cluster.
	sched.Prepare(groups...)
	sched.Fork()
	// The candidate is in the snapshot: it was listed from it.
	_ = sched.RemoveNode(c.nodeInfo.Name())
	if len(groups) == 0 {
		return nil, nil
	}
	opts := p.scheduleOptions(state)
	// One pod that fits nowhere keeps the candidate.
	opts.StopAtUnschedulable = true
	result := sched.ScheduleGroups(groups, opts)
	if len(result.Unschedulable) > 0 {
		sched.Revert()
		first := result.Unschedulable[0]
		return nil, &Decision{Reason: ReasonNoPlaceToMovePods, Message: fmt.Sprintf("pod %s/%s fits on no other node: %s", first.Pod.Namespace, first.Pod.Name, first.Message())}
	}
	return result.Scheduled, nil
}

// checkLimits keeps the node when its removal would take its group below
// the minimum size or the cluster below its minimum cores, memory or GPUs
// of a type.
func (p *Planner) checkLimits(c *candidate, state *pass) *Decision {
	if size, minSize := state.sizes[c.group.ID()], c.group.MinSize(); size-1 < minSize {
		return &Decision{Reason: ReasonNodeGroupMinSizeReached, Message: fmt.Sprintf("node group %s would have %d nodes, its minimum is %d", c.group.ID(), size-1, minSize)}
	}
	if message := p.opts.Minimums.Violated(state.totals, c.nodeInfo.LimitCapacity()); message != "" {
		return &Decision{Reason: ReasonMinimalResourceLimitExceeded, Message: message}
	}
	return nil
}

func blockedByPod(pod klog.ObjectRef, reason BlockingReason, message string) *Decision {
	return &Decision{Reason: ReasonBlockedByPod, Message: fmt.Sprintf("pod %s: %s: %s", pod, reason, message)}
}

// withoutNodeName returns the pod as the simulator may place it anywhere:
// a pod bound to a node only fits that node.
func withoutNodeName(pod *snapshot.Pod) *corev1.Pod {
	moved := pod.Full()
	moved.Spec.NodeName = ""
	return moved
}

// readyNode leaves unready and starting nodes out as destinations.
func (p *Planner) readyNode(nodeInfo *snapshot.NodeInfo) bool {
	return p.opts.NodeRules.Ready(nodeInfo.Node())
}
