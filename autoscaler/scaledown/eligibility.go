package scaledown

import (
	"fmt"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// candidate is a node that passed the checks of the node alone.
type candidate struct {
	nodeInfo    *snapshot.NodeInfo
	group       nodegroups.NodeGroup
	utilization Utilization
	ready       bool
	// since is when the node was first found unneeded, zero if it was not.
	since time.Time
}

// checkNode applies the checks that need nothing but the node, its group
// and its utilization. It returns the candidate, or why the node is kept,
// with the candidate too when the node was kept after it was measured.
func (p *Planner) checkNode(nodeInfo *snapshot.NodeInfo, group nodegroups.NodeGroup, deleting map[string]bool, now time.Time) (*candidate, *Decision) {
	node := nodeInfo.Node()
	switch {
	case deleting[node.Name]:
		return nil, &Decision{Reason: ReasonCurrentlyBeingDeleted, Message: "node is being removed"}
	case group == nil:
		return nil, &Decision{Reason: ReasonNotAutoscaled, Message: "node belongs to no autoscaled node group"}
	case node.Annotations[ScaleDownDisabledAnnotation] == "true":
		return nil, &Decision{Reason: ReasonScaleDownDisabledAnnotation, Message: fmt.Sprintf("node is annotated %s=true", ScaleDownDisabledAnnotation)}
	case p.opts.NodeRules.Readiness(node, now) == nodefacts.NotStarted:
		// A node still not ready past the startup time is unready instead,
		// so that one that never starts is removed after the unready time.
		if devices, awaiting := nodefacts.AwaitedDevices(node); awaiting {
			return nil, &Decision{Reason: ReasonNotStarted, Message: "node has not started yet: " + devices}
		}
		return nil, &Decision{Reason: ReasonNotStarted, Message: "node has not started yet: it is not ready or still carries a startup taint"}
	}
	if waiting := waitingPods(nodeInfo); waiting > 0 {
		return nil, &Decision{Reason: ReasonAwaitingPendingPods, Message: fmt.Sprintf("%d pending pods fit on the node and wait to be bound to it", waiting)}
	}
	if why := group.ScaleDownBlockedReason(); why != "" {
		return nil, &Decision{Reason: ReasonNodeGroupScaleDownBlocked, Message: fmt.Sprintf("node group %s: %s", group.ID(), why)}
	}
	c := &candidate{nodeInfo: nodeInfo, group: group, utilization: NodeUtilization(nodeInfo, p.opts, now), ready: p.opts.NodeRules.Ready(node)}
	// An unready node offers nothing to its pods, whatever they request.
	if threshold := p.opts.Groups.For(group).ScaleDownUtilizationThreshold; c.ready && c.utilization.Value >= threshold {
		return c, &Decision{Reason: ReasonNotUnderutilized, Message: fmt.Sprintf("utilization %.2f is not below the threshold %.2f", c.utilization.Value, threshold)}
	}
	return c, nil
}

// waitingPods counts the pods on the node that are not bound to it: the
// pending pods that the scale-up step of the loop placed there, which run
// there once the scheduler binds them (the scheduler's backoff, a volume
// still attaching). Until then the node only looks empty.
func waitingPods(nodeInfo *snapshot.NodeInfo) int {
	waiting := 0
	for _, pod := range nodeInfo.Pods() {
		if pod.Pod.NodeName == "" {
			waiting++
		}
	}
	return waiting
}

// removableAfter is how long the candidate must stay unneeded.
func (p *Planner) removableAfter(c *candidate) time.Duration {
	settings := p.opts.Groups.For(c.group)
	if !c.ready {
		return settings.ScaleDownUnreadyTime
	}
	return settings.ScaleDownUnneededTime
}
