// Scheduled minimums: windows of a schedule that change the minimum size
// of the node groups they select (Config.ScheduledMinimums). A raised
// minimum is reached by a scale-up (raiseToMinimums); a lowered one only
// lets scale-down remove nodes as it always does, through the group's
// checks of its min size, which the groups apply the scheduled minimum to
// (nodegroups.NodeGroup.WithMinSize).

package autoscaler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// Events and problems of scheduled minimums, the API's
// (api/v1alpha1: ScheduledMinimumWindowOpenedReason, ...).
const (
	EventScheduledMinimumWindowOpened = "ScheduledMinimumWindowOpened"
	EventScheduledMinimumWindowClosed = "ScheduledMinimumWindowClosed"
	// ReasonConflictingScheduledMinimums is the problem of a group for
	// which windows that disagree are in effect at once.
	ReasonConflictingScheduledMinimums = "ConflictingScheduledMinimums"
)

// applyMinimums gives the groups that scheduled minimums select their
// effective minimum, as it stands at each time a group is asked, and
// records where each stands at the loop's time, with the conflicts of
// windows as problems.
func (s *steps) applyMinimums(l *loop) {
	set := s.settings.minimums
	if set.Empty() {
		return
	}
	l.status.ScheduledMinimumProblems = set.Problems()
	l.minimums = map[string]minimums.Minimum{}
	moment := set.At(l.now)
	for i, group := range l.groups.Groups {
		ref := minimums.Group{Name: groupName(group.ID()), Labels: group.Labels()}
		lead, maxSize := s.provisionTime(group), group.MaxSize()
		minimum := moment.For(ref, group.MinSize(), maxSize, lead)
		if !minimum.Selected {
			continue
		}
		l.minimums[group.ID()] = minimum
		if minimum.Conflict != "" {
			l.problems = append(l.problems, nodegroups.Problem{ID: group.ID(), Reason: ReasonConflictingScheduledMinimums, Kept: true, Message: minimum.Conflict})
		}
		l.groups.Groups[i] = group.WithMinSize(func(annotated int) int {
			return set.At(s.clock.Now()).For(ref, annotated, maxSize, lead).MinSize
		})
	}
}

// groupName is the name of the object behind a group: the last part of
// its ID (Kind/namespace/name).
func groupName(id string) string {
	return id[strings.LastIndex(id, "/")+1:]
}

// minimumRaise is a scale-up of a group to the minimum that scheduled
// minimums set.
type minimumRaise struct {
	increase scaleup.Increase
	minimum  minimums.Minimum
}

// raiseToMinimums decides the scale-ups of the groups whose scheduled
// minimum is above their size, after the scale-up of pending pods, whose
// new nodes count, and has them carried out. A group in backoff or
// unhealthy waits, as for pods; the raise stops at the group's max size
// (the minimum is capped there) and at maxNodesTotal.
func (s *steps) raiseToMinimums(ctx context.Context, l *loop) {
	if len(l.minimums) == 0 {
		return
	}
	room := -1
	if limit := s.settings.config.Limits.MaxNodesTotal; limit > 0 {
		nodes := len(l.nodes)
		for _, state := range s.state.Groups() {
			nodes += state.Upcoming + l.increased[state.Group.ID()]
		}
		room = max(limit-nodes, 0)
	}
	var raises []minimumRaise
	for _, group := range l.groups.Groups {
		minimum, ok := l.minimums[group.ID()]
		if !ok {
			continue
		}
		size := s.state.Group(group.ID()).Target + l.increased[group.ID()]
		delta := minimum.MinSize - size
		if delta <= 0 {
			continue
		}
		if reason := s.skipScaleUpReason(group, l.now); reason != "" {
			klog.FromContext(ctx).V(2).Info("Not raising a node group to its scheduled minimum", "nodeGroup", group.ID(), "reason", reason)
			continue
		}
		if room >= 0 {
			delta = min(delta, room)
			room -= delta
		}
		if delta > 0 {
			raises = append(raises, minimumRaise{increase: scaleup.Increase{Group: group, Delta: delta}, minimum: minimum})
		}
	}
	s.act.raiseToMinimums(ctx, l, raises)
}

// message says what a raise does, for events, logs and decisions.
func (r minimumRaise) message(from int) string {
	return fmt.Sprintf("scheduled minimum %s: setting group %s size to %d instead of %d (min: %d, annotated min: %d)",
		strings.Join(r.minimum.ActiveNames(), ", "), r.increase.Group.ID(), from+r.increase.Delta, from, r.minimum.MinSize, r.minimum.Annotated)
}

// tellMinimumWindows tells on each group the windows that took effect or
// ended since the last loop.
func (s *steps) tellMinimumWindows(l *loop) {
	now := map[string]string{}
	for id, minimum := range l.minimums {
		for _, active := range minimum.Active {
			key := id + " " + active.Name
			now[key] = fmt.Sprintf("Scheduled minimum %s sets the minimum of %s to %d, from %s to %s (annotated min: %d)",
				active.Name, id, active.MinSize, timeOf(active.Window.Opens), timeOf(active.Window.Closes), minimum.Annotated)
			if _, before := s.told.minimumWindows[key]; !before {
				s.act.groupEvent(id, corev1.EventTypeNormal, EventScheduledMinimumWindowOpened, now[key])
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.told.minimumWindows)) {
		if _, still := now[key]; still {
			continue
		}
		id, name, _ := strings.Cut(key, " ")
		minimum, listed := l.minimums[id]
		message := fmt.Sprintf("Scheduled minimum %s no longer sets the minimum of %s", name, id)
		if listed {
			message += ": " + minimum.Message()
		}
		s.act.groupEvent(id, corev1.EventTypeNormal, EventScheduledMinimumWindowClosed, message)
	}
	s.told.minimumWindows = now
}

func timeOf(t time.Time) string { return t.Format(time.RFC3339) }
