package schedule

import (
	"strings"
	"testing"
	"time"
)

func at(t *testing.T, zone, value string) time.Time {
	t.Helper()
	location, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := time.ParseInLocation("2006-01-02 15:04", value, location)
	if err != nil {
		t.Fatal(err)
	}
	return parsed
}

func TestAt(t *testing.T) {
	const paris = "Europe/Paris"
	tests := []struct {
		name       string
		expression string
		zone       string
		duration   time.Duration
		now        string
		// open is the open window, "" when closed; next the next one.
		open, next [2]string
	}{{
		name: "office hours, open", expression: "0 8 * * 1-5", zone: paris, duration: 10 * time.Hour,
		now:  "2026-12-07 09:00",
		open: [2]string{"2026-12-07 08:00", "2026-12-07 18:00"}, next: [2]string{"2026-12-08 08:00", "2026-12-08 18:00"},
	}, {
		name: "office hours, opening now is open", expression: "0 8 * * 1-5", zone: paris, duration: 10 * time.Hour,
		now:  "2026-12-07 08:00",
		open: [2]string{"2026-12-07 08:00", "2026-12-07 18:00"}, next: [2]string{"2026-12-08 08:00", "2026-12-08 18:00"},
	}, {
		name: "office hours, closing now is closed", expression: "0 8 * * 1-5", zone: paris, duration: 10 * time.Hour,
		now:  "2026-12-07 18:00",
		next: [2]string{"2026-12-08 08:00", "2026-12-08 18:00"},
	}, {
		name: "office hours, the weekend", expression: "0 8 * * 1-5", zone: paris, duration: 10 * time.Hour,
		now:  "2026-12-11 19:00",
		next: [2]string{"2026-12-14 08:00", "2026-12-14 18:00"},
	}, {
		name: "a batch window spanning midnight, after midnight", expression: "0 22 * * *", zone: "UTC", duration: 6 * time.Hour,
		now:  "2026-12-08 01:00",
		open: [2]string{"2026-12-07 22:00", "2026-12-08 04:00"}, next: [2]string{"2026-12-08 22:00", "2026-12-09 04:00"},
	}, {
		name: "a batch window spanning midnight, before midnight", expression: "0 22 * * *", zone: "UTC", duration: 6 * time.Hour,
		now:  "2026-12-07 23:59",
		open: [2]string{"2026-12-07 22:00", "2026-12-08 04:00"}, next: [2]string{"2026-12-08 22:00", "2026-12-09 04:00"},
	}, {
		name: "a batch window spanning midnight, between", expression: "0 22 * * *", zone: "UTC", duration: 6 * time.Hour,
		now:  "2026-12-08 04:00",
		next: [2]string{"2026-12-08 22:00", "2026-12-09 04:00"},
	}, {
		// 22:00 CEST plus ten hours is 07:00 CET: the clocks went back.
		name: "a night window over the change to winter time", expression: "0 22 * * *", zone: paris, duration: 10 * time.Hour,
		now:  "2026-10-25 06:30",
		open: [2]string{"2026-10-24 22:00", "2026-10-25 07:00"}, next: [2]string{"2026-10-25 22:00", "2026-10-26 08:00"},
	}, {
		// 22:00 CET plus ten hours is 09:00 CEST: the clocks went forward.
		name: "a night window over the change to summer time", expression: "0 22 * * *", zone: paris, duration: 10 * time.Hour,
		now:  "2026-03-29 08:30",
		open: [2]string{"2026-03-28 22:00", "2026-03-29 09:00"}, next: [2]string{"2026-03-29 22:00", "2026-03-30 08:00"},
	}, {
		name: "office hours after the change to summer time open at 08:00 local", expression: "0 8 * * 1-5", zone: paris, duration: 10 * time.Hour,
		now:  "2026-03-27 12:00",
		open: [2]string{"2026-03-27 08:00", "2026-03-27 18:00"}, next: [2]string{"2026-03-30 08:00", "2026-03-30 18:00"},
	}, {
		// As cron does, a time the clocks skip does not come that day.
		name: "a time that does not exist on the day of the change to summer time", expression: "30 2 * * *", zone: paris, duration: time.Hour,
		now:  "2026-03-29 01:00",
		next: [2]string{"2026-03-30 02:30", "2026-03-30 03:30"},
	}, {
		name: "windows that overlap are one", expression: "0,30 8 * * *", zone: "UTC", duration: 45 * time.Minute,
		now:  "2026-12-07 08:40",
		open: [2]string{"2026-12-07 08:00", "2026-12-07 09:15"}, next: [2]string{"2026-12-08 08:00", "2026-12-08 09:15"},
	}, {
		name: "windows that touch are one", expression: "0 8,9 * * *", zone: "UTC", duration: time.Hour,
		now:  "2026-12-07 08:10",
		open: [2]string{"2026-12-07 08:00", "2026-12-07 10:00"}, next: [2]string{"2026-12-08 08:00", "2026-12-08 10:00"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.expression, tt.zone, tt.duration)
			if err != nil {
				t.Fatal(err)
			}
			open, next := s.At(at(t, tt.zone, tt.now))
			window := func(w [2]string) Window { return Window{Opens: at(t, tt.zone, w[0]), Closes: at(t, tt.zone, w[1])} }
			switch {
			case tt.open[0] == "" && open != nil:
				t.Errorf("open: got %s, want none", open)
			case tt.open[0] != "" && open == nil:
				t.Errorf("open: got none, want %s", window(tt.open))
			case open != nil && (!open.Opens.Equal(window(tt.open).Opens) || !open.Closes.Equal(window(tt.open).Closes)):
				t.Errorf("open: got %s, want %s", open, window(tt.open))
			}
			if want := window(tt.next); !next.Opens.Equal(want.Opens) || !next.Closes.Equal(want.Closes) {
				t.Errorf("next: got %s, want %s", next, want)
			}
		})
	}
}

// A time the clocks pass twice opens a window twice: here the two touch,
// and are one of two hours.
func TestAtTimeThatComesTwice(t *testing.T) {
	s, err := New("30 2 * * *", "Europe/Paris", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, next := s.At(time.Date(2026, time.October, 24, 23, 0, 0, 0, time.UTC))
	want := Window{Opens: time.Date(2026, time.October, 25, 0, 30, 0, 0, time.UTC), Closes: time.Date(2026, time.October, 25, 2, 30, 0, 0, time.UTC)}
	if !next.Opens.Equal(want.Opens) || !next.Closes.Equal(want.Closes) {
		t.Errorf("next: got %s, want %s", next, want)
	}
}

func TestNewRefuses(t *testing.T) {
	tests := []struct {
		name, expression, zone string
		duration               time.Duration
		says                   string
	}{
		{"too few fields", "0 8 * *", "UTC", time.Hour, `invalid cron expression "0 8 * *"`},
		{"seconds", "0 0 8 * * *", "UTC", time.Hour, `invalid cron expression "0 0 8 * * *"`},
		{"out of range", "0 25 * * *", "UTC", time.Hour, `invalid cron expression "0 25 * * *"`},
		{"a descriptor", "@daily", "UTC", time.Hour, `invalid cron expression "@daily"`},
		{"a time zone in the expression", "CRON_TZ=Europe/Paris 0 8 * * *", "UTC", time.Hour, "names its time zone"},
		{"a date that never comes", "0 8 30 2 *", "UTC", time.Hour, "names no time that exists"},
		{"an unknown zone", "0 8 * * *", "Europe/Pariss", time.Hour, `unknown time zone "Europe/Pariss"`},
		{"the machine's zone", "0 8 * * *", "Local", time.Hour, `unknown time zone "Local"`},
		{"no duration", "0 8 * * *", "UTC", 0, "must be positive, not 0s"},
		{"a negative duration", "0 8 * * *", "UTC", -time.Hour, "must be positive, not -1h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.expression, tt.zone, tt.duration)
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("got %v, want an error that says %q", err, tt.says)
			}
		})
	}
}

func TestEmptyZoneIsUTC(t *testing.T) {
	s, err := New("0 8 * * *", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	open, _ := s.At(time.Date(2026, time.December, 7, 8, 30, 0, 0, time.UTC))
	if open == nil || !open.Opens.Equal(time.Date(2026, time.December, 7, 8, 0, 0, 0, time.UTC)) {
		t.Errorf("got %v, want the window opened at 08:00 UTC", open)
	}
}

func TestAtTellsTimesInTheScheduleTimeZone(t *testing.T) {
	s, err := New("0 8 * * *", "Europe/Paris", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, next := s.At(time.Date(2026, time.December, 7, 12, 0, 0, 0, time.UTC))
	if got, want := next.Opens.Format(time.RFC3339), "2026-12-08T08:00:00+01:00"; got != want {
		t.Errorf("next opens at %s, want %s", got, want)
	}
}
