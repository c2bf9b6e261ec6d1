package buffers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestScheduleOf(t *testing.T) {
	valid := map[string]string{ScheduleAnnotation: "0 8 * * 1-5", ScheduleTimeZoneAnnotation: "Europe/Paris", ScheduleDurationAnnotation: "10h"}
	with := func(name, value string) map[string]string {
		annotations := map[string]string{}
		for k, v := range valid {
			annotations[k] = v
		}
		if value == "-" {
			delete(annotations, name)
		} else {
			annotations[name] = value
		}
		return annotations
	}
	tests := []struct {
		name        string
		annotations map[string]string
		// says is what the error says; "" for none.
		says string
	}{
		{name: "no annotation", annotations: map[string]string{"other": "x"}},
		{name: "a schedule", annotations: valid},
		{name: "a lead time", annotations: with(ScheduleLeadTimeAnnotation, "5m")},
		{name: "no time zone is UTC", annotations: with(ScheduleTimeZoneAnnotation, "-")},
		{name: "no duration", annotations: with(ScheduleDurationAnnotation, "-"), says: "annotation autoscaling.cluster.x-k8s.io/schedule-duration is required"},
		{name: "a duration without unit", annotations: with(ScheduleDurationAnnotation, "10"), says: `"10" is not a duration such as 10h or 90m`},
		{name: "a zero duration", annotations: with(ScheduleDurationAnnotation, "0s"), says: "must be positive, not 0s"},
		{name: "an invalid expression", annotations: with(ScheduleAnnotation, "0 8 * *"), says: `invalid cron expression "0 8 * *"`},
		{name: "an unknown time zone", annotations: with(ScheduleTimeZoneAnnotation, "Paris"), says: `unknown time zone "Paris"`},
		{name: "a negative lead time", annotations: with(ScheduleLeadTimeAnnotation, "-1m"), says: `"-1m" is not a duration of zero or more`},
		{name: "a lead time without a schedule", annotations: map[string]string{ScheduleLeadTimeAnnotation: "5m"},
			says: "annotation autoscaling.cluster.x-k8s.io/schedule-lead-time is set without autoscaling.cluster.x-k8s.io/schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			schedule, err := ScheduleOf(tt.annotations)
			switch {
			case tt.says != "":
				g.Expect(err).To(MatchError(ContainSubstring(tt.says)))
			case tt.annotations[ScheduleAnnotation] == "":
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(schedule).To(BeNil())
			default:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(schedule).NotTo(BeNil())
			}
		})
	}
}

// A buffer holds its room from the lead time before a window opens until
// it closes; its own lead time replaces the default.
func TestScheduleAtHoldsFromTheLeadTime(t *testing.T) {
	annotations := map[string]string{ScheduleAnnotation: "0 13 * * *", ScheduleDurationAnnotation: "2h"}
	schedule, err := ScheduleOf(annotations)
	if err != nil {
		t.Fatal(err)
	}
	annotations[ScheduleLeadTimeAnnotation] = "1h"
	early, err := ScheduleOf(annotations)
	if err != nil {
		t.Fatal(err)
	}
	day := time.Date(2026, time.December, 7, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		schedule *Schedule
		at       time.Duration
		holding  bool
	}{
		{schedule, 12*time.Hour + 44*time.Minute, false},
		{schedule, 12*time.Hour + 45*time.Minute, true},
		{schedule, 14*time.Hour + 59*time.Minute, true},
		{schedule, 15 * time.Hour, false},
		{early, 11*time.Hour + 59*time.Minute, false},
		{early, 12 * time.Hour, true},
	}
	for _, tt := range tests {
		window := tt.schedule.At(day.Add(tt.at), 15*time.Minute)
		if window.Holding != tt.holding {
			t.Errorf("at %s: holding %t, want %t (%s)", day.Add(tt.at).Format(time.Kitchen), window.Holding, tt.holding, window.Message())
		}
	}
}
