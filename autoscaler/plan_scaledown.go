// The scale-down steps of a loop: the removals in progress, and the plan
// for the unneeded nodes, which the actuation carries out.

package autoscaler

import (
	"context"
	"slices"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// continueScaleDown drives the removals in progress, each re-checked
// against the group read afresh, and releases what no removal owns, e.g.
// left by a restart. It runs even while the cluster is unhealthy, so that
// no node stays tainted for nothing. While scale-down is off, another
// autoscaler acts on the cluster, or the engine runs dry, drains in
// progress are given back; a dry run still follows the nodes handed over.
func (s *steps) continueScaleDown(ctx context.Context, l *loop) {
	view := scaledown.View{Nodes: l.nodes, Pods: l.snapshot, Groups: l.groups.Groups, Minimums: s.settings.scaleDown.Minimums}
	// The actuation that gave back the nodes their group did not remove
	// said so on the group, and shows them on its status row
	// (givenBackNodes).
	for range s.act.continueScaleDown(ctx, l, view) {
		s.metrics().recordError(s.opts.ClusterName, "nodeNotDeleted")
	}
}

// scaleDownUnneeded finds the nodes whose pods fit elsewhere and starts
// removing those that have been unneeded long enough.
func (s *steps) scaleDownUnneeded(ctx context.Context, l *loop) {
	plan := s.planScaleDown(ctx, l)
	l.status.UnneededNodes = len(plan.Unneeded)
	l.status.Explanation.Nodes = explainNodes(plan, l.snapshot)
	s.metrics().setUnneededNodes(s.opts.ClusterName, len(plan.Unneeded))
	s.act.scaleDown(ctx, l, plan)
}

// planScaleDown plans in a fork of the snapshot, with the pending pods on
// the nodes they wait for. Consolidation that replaces nodes needs the
// templates of the groups, which scale-up builds only for pending pods,
// and to know which groups must not grow.
func (s *steps) planScaleDown(ctx context.Context, l *loop) *scaledown.Plan {
	progress := s.actuator.Progress()
	if s.settings.scaleDown.Consolidation.Replaces() {
		// A group without a template is no replacement; scale-up tells
		// why when pods need it.
		simulator.SetTemplates(ctx, l.snapshot, s.settings.scaleDown.NodeRules)
		progress.NotGrowing = map[string]string{}
		for _, group := range l.groups.Groups {
			if reason := s.skipScaleUpReason(group, l.now); reason != "" {
				progress.NotGrowing[group.ID()] = reason
			}
		}
	}
	l.snapshot.Fork()
	defer l.snapshot.Revert()
	placeWaitingPods(l.snapshot, slices.Concat(l.absorbed, l.booked))
	return s.planner.Plan(ctx, l.snapshot, s.settings.scaleDown, progress)
}

// placeWaitingPods puts the pending pods that the scale-up step placed on
// existing nodes on those nodes, in the snapshot: scale-down then keeps
// the nodes they wait for, and moves no other pod into the room they will
// take. A pod that fits nowhere holds no node.
func placeWaitingPods(snap *snapshot.Snapshot, absorbed []simulator.Placement) {
	for _, placement := range absorbed {
		// Nodes on their way exist only in the scale-up's simulation.
		if snap.NodeInfo(placement.NodeName) != nil {
			_ = snap.AddPod(snapshot.NewPodInfo(placement.Pod), placement.NodeName)
		}
	}
}
