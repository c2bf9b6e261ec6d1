package minimums_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
)

var (
	paris, _ = time.LoadLocation("Europe/Paris")
	devGroup = minimums.Group{Name: "md-dev", Labels: map[string]string{"env": "dev"}}
)

const lead = 15 * time.Minute

// A night window in Paris, 20:00 to 07:00, lowers the minimum on the
// wall clock across a daylight-saving change, and ends its lead time
// before it closes.
func TestASleepWindowEndsItsLeadTimeBeforeItCloses(t *testing.T) {
	g := NewWithT(t)
	set := minimums.New([]minimums.Spec{{Name: "night", Names: []string{"md-dev"}, Schedule: "0 20 * * *", TimeZone: "Europe/Paris", Duration: 11 * time.Hour}})

	at := func(t time.Time) int { return set.At(t).For(devGroup, 2, 5, lead).MinSize }
	// The night the clocks go forward in Europe (29-30 March 2026): 11
	// hours of elapsed time from 20:00 close at 08:00 on the wall clock.
	g.Expect(at(time.Date(2026, time.March, 28, 19, 59, 0, 0, paris))).To(Equal(2))
	g.Expect(at(time.Date(2026, time.March, 28, 20, 0, 0, 0, paris))).To(Equal(0))
	g.Expect(at(time.Date(2026, time.March, 29, 7, 44, 0, 0, paris))).To(Equal(0))
	g.Expect(at(time.Date(2026, time.March, 29, 7, 45, 0, 0, paris))).To(Equal(2), "the lead time before 08:00")

	minimum := set.At(time.Date(2026, time.March, 28, 23, 0, 0, 0, paris)).For(devGroup, 2, 5, lead)
	g.Expect(minimum.Active).To(ConsistOf(HaveField("Window.Closes", BeTemporally("==", time.Date(2026, time.March, 29, 8, 0, 0, 0, paris)))))
	g.Expect(minimum.Message()).To(Equal("scheduled minimum night (2026-03-28T20:00:00+01:00 to 2026-03-29T08:00:00+02:00) sets the minimum to 0 instead of the annotated 2"))
}

// A window that raises the minimum takes effect its lead time before it
// opens, capped at the group's max size; the lead time it sets replaces
// the default.
func TestAWarmUpWindowStartsItsLeadTimeBeforeItOpens(t *testing.T) {
	g := NewWithT(t)
	oneHour := time.Hour
	set := minimums.New([]minimums.Spec{{Name: "office", Names: []string{"md-dev"}, Schedule: "0 8 * * 1-5", TimeZone: "Europe/Paris", Duration: 10 * time.Hour, LeadTime: &oneHour, MinSize: 9}})
	// Friday 2 January 2026, 06:59 and 07:00 in Paris.
	before := set.At(time.Date(2026, time.January, 2, 6, 59, 0, 0, paris)).For(devGroup, 1, 5, lead)
	g.Expect(before.MinSize).To(Equal(1))
	g.Expect(before.Next).To(HaveValue(SatisfyAll(HaveField("Name", "office"), HaveField("MinSize", 5))))

	g.Expect(set.At(time.Date(2026, time.January, 2, 7, 0, 0, 0, paris)).For(devGroup, 1, 5, lead).MinSize).To(Equal(5), "capped at the max size")
	// Saturday: the next window is Monday's.
	saturday := set.At(time.Date(2026, time.January, 3, 12, 0, 0, 0, paris)).For(devGroup, 1, 5, lead)
	g.Expect(saturday.MinSize).To(Equal(1))
	g.Expect(saturday.Next.Window.Opens).To(BeTemporally("==", time.Date(2026, time.January, 5, 8, 0, 0, 0, paris)))
}

// A window selects a group when the group matches every criterion it
// sets.
func TestAWindowSelectsTheGroupsThatMatchAllItsCriteria(t *testing.T) {
	g := NewWithT(t)
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}
	set := minimums.New([]minimums.Spec{{Name: "w", Names: []string{"md-dev", "md-prod"}, Selector: selector, Schedule: "* * * * *", Duration: time.Hour}})
	now := time.Date(2026, time.January, 1, 12, 0, 0, 0, time.UTC)

	g.Expect(set.At(now).For(devGroup, 1, 5, lead).Selected).To(BeTrue())
	g.Expect(set.At(now).For(minimums.Group{Name: "md-prod", Labels: map[string]string{"env": "prod"}}, 1, 5, lead).Selected).To(BeFalse(), "named, but not labelled")
	g.Expect(set.At(now).For(minimums.Group{Name: "md-other", Labels: map[string]string{"env": "dev"}}, 1, 5, lead).Selected).To(BeFalse(), "labelled, but not named")
}

// A window that cannot be read is ignored, and said so.
func TestAWindowThatCannotBeReadIsIgnored(t *testing.T) {
	g := NewWithT(t)
	set := minimums.New([]minimums.Spec{
		{Name: "minute-61", Names: []string{"md-dev"}, Schedule: "61 * * * *", Duration: time.Hour, MinSize: 3},
		{Name: "bad-label", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "not a value"}}, Schedule: "* * * * *", Duration: time.Hour, MinSize: 3},
	})

	g.Expect(set.At(time.Now()).For(devGroup, 1, 5, lead)).To(HaveField("Selected", BeFalse()))
	g.Expect(set.Problems()).To(ConsistOf(
		ContainSubstring("scheduled minimum minute-61 is ignored: invalid cron expression"),
		ContainSubstring("scheduled minimum bad-label is ignored: invalid label selector"),
	))
}

// BenchmarkLoop is what a loop of the engine pays for 1,000 groups that
// a window selects: under a nightly window, and under a window that opens
// every minute and stays open an hour, whose overlapping windows are merged
// into one (up to the 10,000 windows schedule.At merges).
func BenchmarkLoop(b *testing.B) {
	now := time.Date(2026, time.January, 1, 23, 0, 0, 0, time.UTC)
	for _, spec := range []minimums.Spec{
		{Name: "nightly", Names: []string{"md-dev"}, Schedule: "0 20 * * *", TimeZone: "Europe/Paris", Duration: 11 * time.Hour},
		{Name: "every-minute", Names: []string{"md-dev"}, Schedule: "* * * * *", Duration: time.Hour},
	} {
		set := minimums.New([]minimums.Spec{spec})
		b.Run(spec.Name, func(b *testing.B) {
			for b.Loop() {
				moment := set.At(now)
				for range 1000 {
					moment.For(devGroup, 2, 5, lead)
				}
			}
		})
	}
}
