package autoscaler_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// withMinimums is the default configuration with the scheduled minimums.
func withMinimums(specs ...minimums.Spec) autoscaler.Config {
	config := autoscaler.DefaultConfig()
	config.ScheduledMinimums = specs
	return config
}

// minimumEvents are the reasons of the events on group about its
// scheduled minimums, in order.
func (r *fakeGroupRecorder) minimumEvents(id string) []string {
	var reasons []string
	for _, reason := range r.reasons(id) {
		switch reason {
		case autoscaler.EventScheduledMinimumWindowOpened, autoscaler.EventScheduledMinimumWindowClosed, autoscaler.ReasonConflictingScheduledMinimums:
			reasons = append(reasons, reason)
		}
	}
	return reasons
}

// A warm-up window raises the group's minimum from its lead time (by
// default the maxNodeProvisionTime, 15m) before it opens: the engine
// scales the group up to it, and the status row shows the window.
func TestAWarmUpWindowScalesTheGroupUpToItsMinimumFromTheLeadTime(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	// st.Now is 12:00 UTC: the window opens in an hour.
	f.apply(t, withMinimums(minimums.Spec{Name: "office-hours", Names: []string{"md-0"}, Schedule: "0 13 * * *", Duration: 5 * time.Hour, MinSize: 4}))

	status := f.runOnce(t)
	g.Expect(group.increases).To(BeEmpty(), "an hour before the window")
	row := groupRow(status, group.id)
	g.Expect(row.MinSize).To(Equal(1))
	g.Expect(row.ScheduledMinimum.Active).To(BeEmpty())
	g.Expect(row.ScheduledMinimum.Next).To(HaveValue(SatisfyAll(HaveField("Name", "office-hours"), HaveField("MinSize", 4),
		HaveField("Window.Opens", BeTemporally("==", st.Now.Add(time.Hour))))))

	f.clock.Step(45 * time.Minute)
	status = f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{3}), "15 minutes before the window, the lead time")
	g.Expect(groupRow(status, group.id).MinSize).To(Equal(4))
	g.Expect(groupRow(status, group.id).ScheduledMinimum.Active).To(ConsistOf(HaveField("Name", "office-hours")))
	g.Expect(f.groupRecorder.minimumEvents(group.id)).To(Equal([]string{autoscaler.EventScheduledMinimumWindowOpened}))

	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{3}), "the nodes on their way count")
}

// A sleep window lowers the group's minimum to 0: nothing writes the
// replicas, but scale-down may now remove the nodes it finds unneeded,
// after the unneeded time, and keeps the node whose pod fits nowhere
// else. Before the window ends, less the lead time, the minimum comes back
// and the group is scaled up to it.
func TestASleepWindowLetsScaleDownEmptyTheGroupAndTheMinimumComesBackBeforeItEnds(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 2, max: 5, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...)
	// Every night, 20:00 to 07:00 UTC.
	f.apply(t, withMinimums(minimums.Spec{Name: "night", Names: []string{"md-0"}, Schedule: "0 20 * * *", Duration: 11 * time.Hour, MinSize: 0}))

	status := f.runPastUnneededTime(context.Background(), t)
	g.Expect(group.deletedNodes).To(BeEmpty(), "outside the window the group is at its annotated minimum")
	g.Expect(groupRow(status, group.id).MinSize).To(Equal(2))

	f.clock.SetTime(st.Now.Add(8 * time.Hour))
	status = f.runOnce(t)
	g.Expect(groupRow(status, group.id).MinSize).To(Equal(0))
	g.Expect(group.deletedNodes).To(BeEmpty(), "the node is not unneeded for long enough yet")
	g.Expect(f.groupRecorder.minimumEvents(group.id)).To(Equal([]string{autoscaler.EventScheduledMinimumWindowOpened}))

	f.runPastUnneededTime(context.Background(), t)
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(group.deletedNodes).To(Equal([]string{nodes[1].Name}), "the empty node goes; the busy one stays, its pod fits nowhere else")
	g.Expect(group.decreases).To(BeEmpty(), "no replicas were written down")

	// 06:46 the next day: the lead time before the window closes.
	f.clock.SetTime(time.Date(2026, time.January, 2, 6, 46, 0, 0, time.UTC))
	status = f.runOnce(t)
	g.Expect(groupRow(status, group.id).MinSize).To(Equal(2))
	g.Expect(group.increases).To(Equal([]int{1}), "back to the annotated minimum")
	g.Expect(f.groupRecorder.minimumEvents(group.id)).To(Equal([]string{autoscaler.EventScheduledMinimumWindowOpened, autoscaler.EventScheduledMinimumWindowClosed}))
}

// A node whose drain started in a sleep window is not removed once the
// window has ended: the group's check asks the minimum again.
func TestTheGroupsCheckOfItsMinimumAsksTheScheduleAtThatMoment(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 5, template: templateNode()}
	group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group})
	f.apply(t, withMinimums(minimums.Spec{Name: "night", Names: []string{"md-0"}, Schedule: "0 12 * * *", Duration: time.Hour, MinSize: 0}))
	f.runOnce(t)
	g.Expect(group.MinSize()).To(Equal(0), "in the window")

	f.clock.Step(45*time.Minute + time.Second)
	g.Expect(group.MinSize()).To(Equal(1), "within the lead time before the window closes")
	g.Expect(group.CheckScaleDown(context.Background(), 1)).To(MatchError(ContainSubstring("below the minimum 1")))
}

// Windows that disagree and are in effect at once: the highest minimum
// applies, and the group says so.
func TestOverlappingScheduledMinimumsThatDisagreeTakeTheHighest(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 2, max: 10, template: templateNode(), labels: map[string]string{"env": "dev"}}
	nodes := group.addNodes(2)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	f.apply(t, withMinimums(
		minimums.Spec{Name: "night", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}, Schedule: "0 11 * * *", Duration: 3 * time.Hour, MinSize: 0},
		minimums.Spec{Name: "launch", Names: []string{"md-0"}, Schedule: "30 11 * * *", Duration: 2 * time.Hour, MinSize: 3},
	))

	status := f.runOnce(t)

	row := groupRow(status, group.id)
	g.Expect(row.MinSize).To(Equal(3))
	g.Expect(row.Problem).To(Equal("scheduled minimums night (0), launch (3) are in effect at once and disagree: the highest, 3, applies"))
	g.Expect(group.increases).To(Equal([]int{1}))
	g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{group.id, corev1.EventTypeWarning, autoscaler.ReasonConflictingScheduledMinimums, row.Problem}))
}

// Windows select groups by name and by the labels of their objects; a
// window the engine cannot read is ignored, and the status says why.
func TestScheduledMinimumsSelectGroupsAndIgnoreWhatTheyCannotRead(t *testing.T) {
	g := NewWithT(t)
	dev := &fakeGroup{id: "MachineDeployment/default/dev", max: 10, template: templateNode(), labels: map[string]string{"env": "dev"}}
	prod := &fakeGroup{id: "MachineDeployment/default/prod", max: 10, template: templateNode(), labels: map[string]string{"env": "prod"}}
	f := newFixture(t, []*fakeGroup{dev, prod})
	f.apply(t, withMinimums(
		minimums.Spec{Name: "dev", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}, Schedule: "0 12 * * *", Duration: time.Hour, MinSize: 1},
		minimums.Spec{Name: "mars", Names: []string{"prod"}, Schedule: "0 12 * * *", TimeZone: "Mars/Olympus_Mons", Duration: time.Hour, MinSize: 2},
	))

	status := f.runOnce(t)

	g.Expect(dev.increases).To(Equal([]int{1}))
	g.Expect(prod.increases).To(BeEmpty())
	g.Expect(groupRow(status, prod.id).ScheduledMinimum).To(BeNil(), "no window that the engine can read selects it")
	g.Expect(status.ScheduledMinimumProblems).To(ConsistOf(ContainSubstring(`scheduled minimum mars is ignored: unknown time zone "Mars/Olympus_Mons"`)))
}

// A DryRun engine decides the raise, naming the window, and does not
// carry it out.
func TestADryRunEngineNamesTheScheduledMinimumItWouldRaiseTheGroupTo(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group})
	config := withMinimums(minimums.Spec{Name: "office-hours", Names: []string{"md-0"}, Schedule: "0 8 * * *", Duration: 10 * time.Hour, MinSize: 2})
	config.DryRun = true
	f.apply(t, config)

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(status.Decisions).To(ConsistOf(SatisfyAll(
		HaveField("Kind", autoscaler.ScaleUpDecision), HaveField("ScheduledMinimum", "office-hours"),
		HaveField("Groups", Equal([]autoscaler.GroupDelta{{ID: group.id, Delta: 2}})))))
	g.Expect(status.Decisions[0].Message()).To(Equal("Would scale up [MachineDeployment/default/md-0 +2] to the minimum of scheduled minimum office-hours"))
	g.Expect(groupRow(status, group.id).MinSize).To(Equal(2))
}

// A DryRun engine in a sleep window decides the removals the lowered
// minimum lets through, and removes nothing.
func TestADryRunEngineInASleepWindowDecidesTheRemovalsItLetsThrough(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 5, template: templateNode()}
	nodes := group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	config := withMinimums(minimums.Spec{Name: "night", Names: []string{"md-0"}, Schedule: "0 12 * * *", Duration: 11 * time.Hour})
	config.DryRun = true
	f.apply(t, config)

	status := f.runPastUnneededTime(context.Background(), t)

	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(status.Decisions).To(ConsistOf(SatisfyAll(HaveField("Kind", autoscaler.ScaleDownDecision), HaveField("Nodes", Equal([]string{nodes[0].Name})))))
	g.Expect(f.groupRecorder.minimumEvents(group.id)).To(BeEmpty(), "a DryRun engine writes no events on groups")
}
