package autoscaler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// scheduled is buffer with the schedule annotations, read as the
// controller reads them: a schedule, or the problem with them.
func scheduled(t *testing.T, buffer buffers.Buffer, annotations map[string]string) buffers.Buffer {
	t.Helper()
	schedule, err := buffers.ScheduleOf(annotations)
	if err != nil {
		buffer.ScheduleProblem = err.Error()
	}
	buffer.Schedule = schedule
	return buffer
}

// windowEvents are the events recorded on buffers about their schedules,
// by reason, in order.
func (f *fixture) windowEvents() []string {
	var reasons []string
	for _, event := range f.bufferEvents() {
		for _, reason := range []string{autoscaler.EventBufferWindowOpened, autoscaler.EventBufferWindowClosed, autoscaler.EventInvalidBufferSchedule} {
			if strings.Contains(event, " "+reason+" ") {
				reasons = append(reasons, reason)
			}
		}
	}
	return reasons
}

// A scheduled buffer holds no room outside its window, and holds it from
// the lead time before its window opens: by default the
// maxNodeProvisionTime (15m), so that the node is up when the window
// opens. Each change is told once.
func TestAScheduledBufferHoldsRoomFromTheLeadTimeBeforeItsWindow(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	// st.Now is 12:00 UTC: the window opens in an hour.
	buffer := scheduled(t, bufferOf(1), map[string]string{
		buffers.ScheduleAnnotation: "0 13 * * *", buffers.ScheduleDurationAnnotation: "2h",
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})

	status := f.runOnce(t)
	g.Expect(group.increases).To(BeEmpty(), "an hour before the window")
	g.Expect(bufferRow(status)).To(SatisfyAll(HaveField("Replicas", 0), HaveField("Upcoming", 0),
		HaveField("Schedule", ContainSubstring("holds no room: the next opens at 2026-01-01T13:00:00Z"))))
	g.Expect(f.windowEvents()).To(Equal([]string{autoscaler.EventBufferWindowClosed}))

	f.clock.Step(44 * time.Minute)
	f.runOnce(t)
	g.Expect(group.increases).To(BeEmpty(), "16 minutes before the window")
	g.Expect(f.windowEvents()).To(BeEmpty(), "nothing changed")

	f.clock.Step(time.Minute)
	status = f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{1}), "the lead time before the window")
	g.Expect(bufferRow(status)).To(SatisfyAll(HaveField("Replicas", 1), HaveField("Upcoming", 1),
		HaveField("Schedule", ContainSubstring("holds its room from 15m0s before (lead time)"))))
	g.Expect(f.windowEvents()).To(Equal([]string{autoscaler.EventBufferWindowOpened}))

	f.clock.Step(15 * time.Minute)
	status = f.runOnce(t)
	g.Expect(bufferRow(status).Schedule).To(ContainSubstring("opened at 2026-01-01T13:00:00Z and closes at 2026-01-01T15:00:00Z"))
	g.Expect(f.windowEvents()).To(BeEmpty(), "the window opening is the lead time's change, told already")
}

// The lead time a buffer sets replaces the default.
func TestAScheduledBufferTakesTheLeadTimeItSets(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	buffer := scheduled(t, bufferOf(1), map[string]string{
		buffers.ScheduleAnnotation: "0 13 * * *", buffers.ScheduleDurationAnnotation: "2h", buffers.ScheduleLeadTimeAnnotation: "1h",
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})

	f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}), "an hour before the window is within its lead time")
}

// Once its window closes, a buffer's node is unneeded, and goes through
// the normal scale-down.
func TestAScheduledBufferReleasesItsRoomWhenItsWindowCloses(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	// Office hours in Paris: 12:00 UTC is 13:00 there, on a Thursday.
	buffer := scheduled(t, bufferOf(1), map[string]string{
		buffers.ScheduleAnnotation: "0 8 * * 1-5", buffers.ScheduleTimeZoneAnnotation: "Europe/Paris", buffers.ScheduleDurationAnnotation: "6h",
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})

	status := f.runPastUnneededTime(context.Background(), t)
	g.Expect(group.deletedNodes).To(BeEmpty(), "the buffer holds the empty node in its window")
	g.Expect(bufferRow(status)).To(SatisfyAll(HaveField("Replicas", 1), HaveField("Held", 1)))
	g.Expect(f.windowEvents()).To(Equal([]string{autoscaler.EventBufferWindowOpened}))

	// 14:00 in Paris, 13:00 UTC.
	f.clock.SetTime(st.Now.Add(time.Hour))
	status = f.runPastUnneededTime(context.Background(), t)
	g.Expect(group.deletedNodes).To(HaveLen(1), "the node is unneeded once the window closed")
	g.Expect(group.increases).To(BeEmpty())
	g.Expect(bufferRow(status)).To(SatisfyAll(HaveField("Replicas", 0), HaveField("Held", 0),
		HaveField("Schedule", ContainSubstring("the next opens at 2026-01-02T08:00:00+01:00"))))
	g.Expect(f.windowEvents()).To(Equal([]string{autoscaler.EventBufferWindowClosed}))
}

// A buffer whose schedule annotations are wrong holds its room at all
// times, as without them, and says why once.
func TestABufferWithABadScheduleHoldsItsRoomAndSaysWhy(t *testing.T) {
	for name, annotations := range map[string]map[string]string{
		"an invalid expression": {buffers.ScheduleAnnotation: "0 25 * * *", buffers.ScheduleDurationAnnotation: "1h"},
		"an unknown time zone":  {buffers.ScheduleAnnotation: "0 13 * * *", buffers.ScheduleDurationAnnotation: "1h", buffers.ScheduleTimeZoneAnnotation: "Mars/Olympus"},
		"no duration":           {buffers.ScheduleAnnotation: "0 13 * * *"},
		"a zero duration":       {buffers.ScheduleAnnotation: "0 13 * * *", buffers.ScheduleDurationAnnotation: "0s"},
		"a negative lead time":  {buffers.ScheduleAnnotation: "0 13 * * *", buffers.ScheduleDurationAnnotation: "1h", buffers.ScheduleLeadTimeAnnotation: "-5m"},
		"no schedule":           {buffers.ScheduleDurationAnnotation: "1h"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
			buffer := scheduled(t, bufferOf(1), annotations)
			g.Expect(buffer.ScheduleProblem).NotTo(BeEmpty())
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
				withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})

			status := f.runOnce(t)
			f.clock.Step(time.Minute)
			f.runOnce(t)

			g.Expect(group.increases).To(Equal([]int{1}), "the room is held, an hour before what the schedule would say")
			g.Expect(bufferRow(status)).To(SatisfyAll(HaveField("Replicas", 1),
				HaveField("Schedule", Equal("its schedule is ignored, and it holds its room at all times: "+buffer.ScheduleProblem))))
			g.Expect(f.windowEvents()).To(Equal([]string{autoscaler.EventInvalidBufferSchedule}), "told once")
		})
	}
}

// Windows closer together than the lead time hold the room on: nothing
// is released between them, and nothing told.
func TestWindowsCloserThanTheLeadTimeHoldTheRoomOn(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	// 13:00 to 13:50, then 14:00 to 14:50: a gap of 10 minutes, within
	// the default lead time of 15.
	buffer := scheduled(t, bufferOf(1), map[string]string{
		buffers.ScheduleAnnotation: "0 13,14 * * *", buffers.ScheduleDurationAnnotation: "50m",
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).
		withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})

	var reasons, held []string
	for _, at := range []time.Duration{45 * time.Minute, 115 * time.Minute, 170 * time.Minute} {
		f.clock.SetTime(st.Now.Add(at))
		status := f.runOnce(t)
		reasons = append(reasons, f.windowEvents()...)
		held = append(held, f.clock.Now().Format(time.Kitchen)+" "+map[bool]string{true: "held", false: "released"}[bufferRow(status).Replicas > 0])
	}

	g.Expect(held).To(Equal([]string{"12:45PM held", "1:55PM held", "2:50PM released"}))
	g.Expect(reasons).To(Equal([]string{autoscaler.EventBufferWindowOpened, autoscaler.EventBufferWindowClosed}))
}
