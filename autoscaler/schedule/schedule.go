// Package schedule tells where a clock stands in a schedule of windows: a
// window opens at each time a cron expression names, in a time zone, and
// stays open for a duration. It is pure: the caller passes the time.
package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule is a cron expression of five fields (minute, hour, day of
// month, month, day of week), read in a time zone, and how long each of
// its windows stays open. Durations are elapsed time: a window that spans
// a daylight-saving change closes an hour earlier or later on the wall
// clock.
type Schedule struct {
	expression string
	cron       cron.Schedule
	location   *time.Location
	duration   time.Duration
}

// maxChain bounds the windows merged into one (At): windows that follow
// each other without a gap, such as a window every five minutes that
// stays open ten, never close, and the search must end.
const maxChain = 10000

var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// New reads a schedule: expression, of five fields, in the time zone
// named zone (an IANA name such as Europe/Paris; empty is UTC), windows of
// duration. It says what is wrong with each input it refuses.
func New(expression, zone string, duration time.Duration) (*Schedule, error) {
	expression = strings.TrimSpace(expression)
	if strings.HasPrefix(expression, "TZ=") || strings.HasPrefix(expression, "CRON_TZ=") {
		return nil, fmt.Errorf("cron expression %q names its time zone: name it in the time zone alone", expression)
	}
	location, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return nil, fmt.Errorf("unknown time zone %q: name an IANA time zone such as Europe/Paris or UTC", zone)
	}
	parsed, err := parser.Parse(expression)
	if err != nil {
		return nil, fmt.Errorf("invalid cron expression %q (five fields: minute hour day-of-month month day-of-week): %w", expression, err)
	}
	spec, ok := parsed.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("invalid cron expression %q: five fields are needed", expression)
	}
	spec.Location = location
	// cron gives up after five years; a date that never comes (February
	// 30th) is found here rather than as a window that never opens.
	if spec.Next(time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("cron expression %q names no time that exists", expression)
	}
	if duration <= 0 {
		return nil, fmt.Errorf("the duration of the windows must be positive, not %s", duration)
	}
	return &Schedule{expression: expression, cron: spec, location: location, duration: duration}, nil
}

// Window is one window of a schedule: open from Opens, closed from Closes.
type Window struct {
	Opens, Closes time.Time
}

// Contains tells whether the window is open at t.
func (w Window) Contains(t time.Time) bool {
	return !t.Before(w.Opens) && t.Before(w.Closes)
}

// String is the window in RFC 3339, in its time zone.
func (w Window) String() string {
	return w.Opens.Format(time.RFC3339) + " to " + w.Closes.Format(time.RFC3339)
}

// At tells where now stands in the schedule: the window open at now, if
// any, and the next window to open after it (or after now). Windows that
// overlap or touch are one: it opens with the earliest of them that is
// still open at now, and closes with the last. The times are in the
// schedule's time zone.
func (s *Schedule) At(now time.Time) (open *Window, next Window) {
	now = now.In(s.location)
	// The windows open at now are those that opened in (now-duration, now].
	if opens := s.cron.Next(now.Add(-s.duration)); !opens.IsZero() && !opens.After(now) {
		open = &Window{Opens: opens, Closes: s.closes(opens)}
		now = open.Closes
	}
	// cron.Next is strictly after: a window opening as the last closes
	// was merged into it.
	opens := s.cron.Next(now)
	return open, Window{Opens: opens, Closes: s.closes(opens)}
}

// closes is when the window that opens at opens closes: later windows
// that open before it closes extend it.
func (s *Schedule) closes(opens time.Time) time.Time {
	closes := opens.Add(s.duration)
	for range maxChain {
		opens = s.cron.Next(opens)
		if opens.IsZero() || opens.After(closes) {
			return closes
		}
		closes = opens.Add(s.duration)
	}
	return closes
}

// String is the schedule as it was read.
func (s *Schedule) String() string {
	return fmt.Sprintf("%q for %s", s.expression, s.duration)
}
