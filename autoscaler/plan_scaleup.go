// The scale-up step of a loop: the plan for the pending pods (and the
// virtual pods of capacity buffers), which the actuation carries out, and
// the messages that tell it.

package autoscaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// scaleUpPending plans a scale-up for the unschedulable pods and has it
// carried out.
func (s *steps) scaleUpPending(ctx context.Context, l *loop) {
	upcoming := map[string]int{}
	for _, state := range s.state.Groups() {
		upcoming[state.Group.ID()] = max(state.Upcoming-l.reserved[state.Group.ID()], 0)
	}
	// Pending pods do not get the room of booked provisioning requests.
	booked := len(l.booked) > 0
	if booked {
		l.snapshot.Fork()
		placeWaitingPods(l.snapshot, l.booked)
	}
	s.displacements.observe(l.snapshot, s.history.nominations, l.now, s.groupProvisionTime)
	state := scaleup.State{
		Upcoming:          upcoming,
		Skip:              func(group nodegroups.NodeGroup) string { return s.skipScaleUpReason(group, l.now) },
		Nominations:       s.history.nominations,
		ExpectedNodeNames: nodegroups.ExpectedNodeNames(l.groups.Groups),
		LastPlanned:       s.history.lastPlanned,
	}
	plan := s.settings.scaleUp.Plan(ctx, l.snapshot, state)
	// Pods that took the room of others on the nodes bought for them move
	// to their own nodes, when that buys fewer nodes.
	reseated, reseatings := s.reseat(ctx, l, state, plan)
	if reseated != nil {
		plan = reseated
	}
	if booked {
		l.snapshot.Revert()
	}
	s.history.nominations = plan.Nominations
	s.history.lastPlanned = plan.LastPlanned
	l.status.PodsLeftForNextLoop = len(plan.Deferred)
	l.absorbed = plan.Absorbed
	l.status.Buffers = bufferStatuses(l.listedBuffers, l.bufferWindows, l.snapshot, plan)
	l.problems = append(l.problems, templateProblems(plan.TemplateErrors)...)
	increases := s.act.scaleUp(ctx, l, plan)
	s.act.reseat(ctx, l, reseatings)
	l.scaledUp = len(increases) > 0
	l.status.NotTriggerScaleUpReasons = sortedReasons(countReasons(plan.NoScaleUp))
	l.status.Explanation.PendingPods = explainPendingPods(plan, increases)
	s.metrics().recordLimitedScaleUps(s.opts.ClusterName, s.settings.config.Limits, plan.NoScaleUp)
}

// templateProblems are the problems of the groups whose template could not
// be read (a *nodegroups.ReadError), in the order of their IDs. The other
// template errors are answers, such as a template without capacity, which
// the pods' NotTriggerScaleUp events explain.
func templateProblems(templateErrors map[string]error) []nodegroups.Problem {
	var problems []nodegroups.Problem
	for _, id := range slices.Sorted(maps.Keys(templateErrors)) {
		var readErr *nodegroups.ReadError
		if errors.As(templateErrors[id], &readErr) {
			problems = append(problems, nodegroups.Problem{ID: id, Reason: nodegroups.ReasonTemplateUnreadable, Kept: true,
				Message: "cannot scale up from zero: " + readErr.Error()})
		}
	}
	return problems
}

// groupProvisionTime is the max node provision time of the group of id.
func (s *steps) groupProvisionTime(id string) time.Duration {
	if state := s.state.Group(id); state != nil {
		return s.provisionTime(state.Group)
	}
	return s.settings.config.MaxNodeProvisionTime
}

// skipScaleUpReason says why a group must not grow in this loop, or "".
func (s *steps) skipScaleUpReason(group nodegroups.NodeGroup, now time.Time) string {
	if backoff := s.state.BackoffOf(group.ID(), now); !backoff.Until.IsZero() {
		return fmt.Sprintf("in backoff after failed scale-up (%s)", backoff.Reason)
	}
	if healthy, message := s.state.GroupHealthy(group.ID()); !healthy {
		return "node group unhealthy: " + message
	}
	return ""
}

// scaleUpMessage is the TriggeredScaleUp event message of a scale-up.
func (s *steps) scaleUpMessage(increases []scaleup.Increase) string {
	groups := make([]GroupResize, 0, len(increases))
	for _, increase := range increases {
		target := s.state.Group(increase.Group.ID()).Target
		groups = append(groups, GroupResize{ID: increase.Group.ID(), From: target, To: target + increase.Delta, Max: increase.Group.MaxSize()})
	}
	return TriggeredScaleUpMessage(groups)
}

// TriggeredScaleUpPrefix starts the message of a TriggeredScaleUp event.
const TriggeredScaleUpPrefix = "pod triggered scale-up:"

// GroupResize is a node group in a TriggeredScaleUp message: its size
// before and after the scale-up, and its max size.
type GroupResize struct {
	ID            string
	From, To, Max int
}

// TriggeredScaleUpMessage is the message of the TriggeredScaleUp events of
// the pods a scale-up helps, in the upstream autoscaler's words, which
// tools that watch for its events, and `kubectl capi-autoscaler compare`,
// read.
func TriggeredScaleUpMessage(groups []GroupResize) string {
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("{%s %d->%d (max: %d)}", g.ID, g.From, g.To, g.Max))
	}
	return TriggeredScaleUpPrefix + " [" + strings.Join(parts, " ") + "]"
}

// countReasons counts the real pods that triggered no scale-up by reason.
func countReasons(noScaleUp []scaleup.NoScaleUp) map[string]int {
	reasons := map[string]int{}
	for _, pod := range realNoScaleUp(noScaleUp) {
		reasons[pod.Message()]++
	}
	return reasons
}

// plannedIncreases are the nodes a plan adds to each group, by group ID.
func plannedIncreases(plan *scaleup.Plan) map[string]int {
	increases := make(map[string]int, len(plan.Increases))
	for _, increase := range plan.Increases {
		increases[increase.Group.ID()] += increase.Delta
	}
	return increases
}

func sortedReasons(counts map[string]int) []ReasonCount {
	reasons := make([]ReasonCount, 0, len(counts))
	for reason, pods := range counts {
		reasons = append(reasons, ReasonCount{Reason: reason, Pods: pods})
	}
	slices.SortFunc(reasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Pods, a.Pods), cmp.Compare(a.Reason, b.Reason))
	})
	return reasons
}
