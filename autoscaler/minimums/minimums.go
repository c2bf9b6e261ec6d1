// Package minimums tells a node group's effective minimum size under the
// scheduled minimums of a configuration: windows of a schedule during
// which the groups they select take another minimum, lower ("sleep") or
// higher ("warm up") than the one of their annotations. It is pure: the
// caller passes the time.
package minimums

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
)

// Spec is one scheduled minimum as the configuration writes it.
type Spec struct {
	Name string
	// Names and Selector select groups: a group is selected when it
	// matches each that is set.
	Names    []string
	Selector *metav1.LabelSelector
	// Schedule is a cron expression of five fields, read in TimeZone (UTC
	// when empty); each window stays open Duration.
	Schedule string
	TimeZone string
	Duration time.Duration
	// LeadTime is how early a raise takes effect, and a lowering ends;
	// nil is the group's provision time.
	LeadTime *time.Duration
	MinSize  int
}

// window is a Spec read: its problem says why it is ignored.
type window struct {
	Spec
	names    map[string]bool
	selector labels.Selector
	schedule *schedule.Schedule
	problem  string
}

// Set are the scheduled minimums of a configuration, read.
type Set struct {
	windows []window
}

// New reads the scheduled minimums. A window that cannot be read is kept
// with its problem (Problems) and ignored, so that one bad window leaves
// the others, and the rest of the configuration, alone.
func New(specs []Spec) *Set {
	set := &Set{}
	for _, spec := range specs {
		w := window{Spec: spec}
		if len(spec.Names) > 0 {
			w.names = map[string]bool{}
			for _, name := range spec.Names {
				w.names[name] = true
			}
		}
		var err error
		if spec.Selector != nil {
			if w.selector, err = metav1.LabelSelectorAsSelector(spec.Selector); err != nil {
				w.problem = "invalid label selector: " + err.Error()
			}
		}
		if w.problem == "" {
			if w.schedule, err = schedule.New(spec.Schedule, spec.TimeZone, spec.Duration); err != nil {
				w.problem = err.Error()
			}
		}
		set.windows = append(set.windows, w)
	}
	return set
}

// Empty tells whether the set has no window.
func (s *Set) Empty() bool { return s == nil || len(s.windows) == 0 }

// Problems say, one per window ignored, which and why.
func (s *Set) Problems() []string {
	if s == nil {
		return nil
	}
	var problems []string
	for _, w := range s.windows {
		if w.problem != "" {
			problems = append(problems, fmt.Sprintf("scheduled minimum %s is ignored: %s", w.Name, w.problem))
		}
	}
	return problems
}

// Group is what windows select a node group by.
type Group struct {
	// Name is the name of the MachineDeployment or MachineSet.
	Name   string
	Labels map[string]string
}

// Active is a window in effect for a group, or the next to be.
type Active struct {
	Name    string
	MinSize int
	Window  schedule.Window
}

// Minimum is a group's minimum size at a time.
type Minimum struct {
	// Selected tells whether any window selects the group; the other
	// fields are zero when none does.
	Selected bool
	// MinSize is the effective minimum: the annotated one while no window
	// is in effect, else the highest minimum of those in effect, capped
	// at the group's max size.
	MinSize int
	// Annotated is the minimum of the group's annotations.
	Annotated int
	// Active are the windows in effect, by name; Next the next to take
	// effect, if any.
	Active []Active
	Next   *Active
	// Conflict says, when windows in effect set different minimums,
	// which, and which applies.
	Conflict string
}

// At is where the windows stand at now, for the groups to ask (Moment.For):
// each window's schedule is read once, when a group it selects first asks.
func (s *Set) At(now time.Time) *Moment {
	m := &Moment{set: s, now: now}
	if s != nil {
		m.positions = make([]*position, len(s.windows))
	}
	return m
}

// Moment is where the windows stand at one time. It is not safe for
// concurrent use.
type Moment struct {
	set       *Set
	now       time.Time
	positions []*position
}

// position is where a window stands at a moment: its window open then, if
// any, and the next to open.
type position struct {
	open *schedule.Window
	next schedule.Window
}

func (m *Moment) position(i int) *position {
	if m.positions[i] == nil {
		open, next := m.set.windows[i].schedule.At(m.now)
		m.positions[i] = &position{open: open, next: next}
	}
	return m.positions[i]
}

// For is the minimum of group at the moment, whose annotations set
// annotated and maxSize, with the lead time defaultLead for the windows
// that set none. A window that raises the minimum above annotated takes
// effect its lead time before it opens; one that lowers it ends its lead
// time before it closes, so that the nodes of the minimum that follows are
// Ready in time.
func (m *Moment) For(group Group, annotated, maxSize int, defaultLead time.Duration) Minimum {
	minimum := Minimum{MinSize: annotated, Annotated: annotated}
	if m.set == nil {
		return minimum
	}
	now := m.now
	for i, w := range m.set.windows {
		if w.problem != "" || !w.selects(group) {
			continue
		}
		minimum.Selected = true
		lead := defaultLead
		if w.LeadTime != nil {
			lead = *w.LeadTime
		}
		minSize := min(w.MinSize, maxSize)
		at := m.position(i)
		open, next := at.open, at.next
		// The window in effect, or about to be, and the one after it.
		current, upcoming := open, &next
		switch {
		case minSize > annotated && open == nil && !next.Opens.After(now.Add(lead)):
			current, upcoming = &next, nil
		case minSize < annotated && open != nil && !open.Closes.After(now.Add(lead)):
			current = nil
		}
		if current != nil {
			minimum.Active = append(minimum.Active, Active{Name: w.Name, MinSize: minSize, Window: *current})
		}
		if upcoming != nil && !upcoming.Opens.IsZero() && (minimum.Next == nil || upcoming.Opens.Before(minimum.Next.Window.Opens)) {
			minimum.Next = &Active{Name: w.Name, MinSize: minSize, Window: *upcoming}
		}
	}
	return minimum.resolve()
}

// resolve sets the minimum from the windows in effect: the highest of
// theirs, with the conflict when they disagree.
func (m Minimum) resolve() Minimum {
	if len(m.Active) == 0 {
		return m
	}
	m.MinSize = 0
	for _, a := range m.Active {
		m.MinSize = max(m.MinSize, a.MinSize)
	}
	if slices.ContainsFunc(m.Active, func(a Active) bool { return a.MinSize != m.MinSize }) {
		parts := make([]string, 0, len(m.Active))
		for _, a := range m.Active {
			parts = append(parts, fmt.Sprintf("%s (%d)", a.Name, a.MinSize))
		}
		m.Conflict = fmt.Sprintf("scheduled minimums %s are in effect at once and disagree: the highest, %d, applies",
			strings.Join(parts, ", "), m.MinSize)
	}
	return m
}

// Message says what sets the minimum, for events and logs.
func (m Minimum) Message() string {
	if len(m.Active) == 0 {
		message := fmt.Sprintf("no scheduled minimum is in effect: the minimum is the annotated %d", m.Annotated)
		if m.Next != nil {
			message += fmt.Sprintf("; %s sets %d from %s to %s", m.Next.Name, m.Next.MinSize, timeOf(m.Next.Window.Opens), timeOf(m.Next.Window.Closes))
		}
		return message
	}
	names := make([]string, 0, len(m.Active))
	for _, a := range m.Active {
		names = append(names, fmt.Sprintf("%s (%s to %s)", a.Name, timeOf(a.Window.Opens), timeOf(a.Window.Closes)))
	}
	return fmt.Sprintf("scheduled minimum %s sets the minimum to %d instead of the annotated %d", strings.Join(names, ", "), m.MinSize, m.Annotated)
}

// ActiveNames names the windows in effect, sorted.
func (m Minimum) ActiveNames() []string {
	names := make([]string, 0, len(m.Active))
	for _, a := range m.Active {
		names = append(names, a.Name)
	}
	slices.SortFunc(names, cmp.Compare)
	return names
}

func (w window) selects(group Group) bool {
	if w.names != nil && !w.names[group.Name] {
		return false
	}
	return w.selector == nil || w.selector.Matches(labels.Set(group.Labels))
}

func timeOf(t time.Time) string { return t.Format(time.RFC3339) }
