package buffers

import (
	"fmt"
	"strings"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
)

// The annotations that put a buffer on a schedule: outside the windows
// of the schedule, less the lead time, the buffer holds no room. The
// upstream CapacityBuffer API has no schedule, and stays untouched.
const (
	// ScheduleAnnotation is a cron expression of five fields: each time
	// it names opens a window.
	ScheduleAnnotation = "autoscaling.cluster.x-k8s.io/schedule"
	// ScheduleTimeZoneAnnotation is the IANA time zone the expression is
	// read in; UTC when unset.
	ScheduleTimeZoneAnnotation = "autoscaling.cluster.x-k8s.io/schedule-time-zone"
	// ScheduleDurationAnnotation is how long each window stays open (a Go
	// duration such as 10h or 90m); it is required.
	ScheduleDurationAnnotation = "autoscaling.cluster.x-k8s.io/schedule-duration"
	// ScheduleLeadTimeAnnotation is how long before a window opens the
	// buffer holds its room, so that its nodes are Ready when it opens;
	// unset, the engine's default (the maxNodeProvisionTime).
	ScheduleLeadTimeAnnotation = "autoscaling.cluster.x-k8s.io/schedule-lead-time"
)

// Schedule is when a scheduled buffer holds its room.
type Schedule struct {
	Windows *schedule.Schedule
	// LeadTime is how long before a window opens the buffer holds its
	// room; nil is the engine's default.
	LeadTime *time.Duration
}

// ScheduleOf reads the schedule of a buffer from its annotations: nil
// without any of the schedule annotations, an error that says what is
// wrong with them otherwise.
func ScheduleOf(annotations map[string]string) (*Schedule, error) {
	expression, scheduled := annotations[ScheduleAnnotation]
	if !scheduled {
		for _, name := range []string{ScheduleTimeZoneAnnotation, ScheduleDurationAnnotation, ScheduleLeadTimeAnnotation} {
			if _, ok := annotations[name]; ok {
				return nil, fmt.Errorf("annotation %s is set without %s", name, ScheduleAnnotation)
			}
		}
		return nil, nil
	}
	value, ok := annotations[ScheduleDurationAnnotation]
	if !ok {
		return nil, fmt.Errorf("annotation %s is required with %s", ScheduleDurationAnnotation, ScheduleAnnotation)
	}
	duration, err := time.ParseDuration(strings.TrimSpace(value))
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %q is not a duration such as 10h or 90m", ScheduleDurationAnnotation, value)
	}
	windows, err := schedule.New(expression, strings.TrimSpace(annotations[ScheduleTimeZoneAnnotation]), duration)
	if err != nil {
		return nil, err
	}
	s := &Schedule{Windows: windows}
	if value, ok := annotations[ScheduleLeadTimeAnnotation]; ok {
		lead, err := time.ParseDuration(strings.TrimSpace(value))
		if err != nil || lead < 0 {
			return nil, fmt.Errorf("annotation %s: %q is not a duration of zero or more such as 10m", ScheduleLeadTimeAnnotation, value)
		}
		s.LeadTime = &lead
	}
	return s, nil
}

// Window is where a scheduled buffer stands in its schedule at a time.
type Window struct {
	// Holding tells whether the buffer holds its room: its window is
	// open, or opens within the lead time.
	Holding bool
	// Open is the window open at that time, if any; Next the next to
	// open after it, or after that time.
	Open *schedule.Window
	Next schedule.Window
	// LeadTime is how long before a window opens the buffer holds its
	// room.
	LeadTime time.Duration
}

// At is where the schedule stands at now, with the lead time
// defaultLeadTime when the buffer sets none.
func (s *Schedule) At(now time.Time, defaultLeadTime time.Duration) Window {
	w := Window{LeadTime: defaultLeadTime}
	if s.LeadTime != nil {
		w.LeadTime = *s.LeadTime
	}
	w.Open, w.Next = s.Windows.At(now)
	w.Holding = w.Open != nil || !w.Next.Opens.After(now.Add(w.LeadTime))
	return w
}

// Message says what the buffer holds, and until when.
func (w Window) Message() string {
	switch {
	case w.Open != nil:
		return fmt.Sprintf("its schedule's window opened at %s and closes at %s: it holds its room until then",
			timeOf(w.Open.Opens), timeOf(w.Open.Closes))
	case w.Holding:
		return fmt.Sprintf("its schedule's window opens at %s and closes at %s: it holds its room from %s before (lead time)",
			timeOf(w.Next.Opens), timeOf(w.Next.Closes), w.LeadTime)
	default:
		return fmt.Sprintf("outside its schedule's windows it holds no room: the next opens at %s and closes at %s, and it holds its room from %s before (lead time)",
			timeOf(w.Next.Opens), timeOf(w.Next.Closes), w.LeadTime)
	}
}

func timeOf(t time.Time) string { return t.Format(time.RFC3339) }
