package plugin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

const (
	md0 = "MachineDeployment/clusters/prod-md-0"
	md1 = "MachineDeployment/clusters/prod-md-1"
)

// scaleUpMessage is a TriggeredScaleUp message as the upstream autoscaler
// and capi-autoscaler write it; groups are ID, current, new and max.
func scaleUpMessage(groups ...[4]any) string {
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("{%s %d->%d (max: %d)}", g[:]...))
	}
	return "pod triggered scale-up: [" + strings.Join(parts, " ") + "]"
}

// theirUp is the other autoscaler's TriggeredScaleUp events on pods, at.
func theirUp(when time.Duration, message string, pods ...string) []TheirScaleUpEvent {
	events := make([]TheirScaleUpEvent, 0, len(pods))
	for _, pod := range pods {
		events = append(events, TheirScaleUpEvent{Pod: pod, UID: types.UID(pod), Time: testNow.Add(when), Message: message})
	}
	return events
}

// ourUp is a decision to scale up for pods, the oldest created at oldest.
func ourUp(when, oldest time.Duration, pods []string, groups ...autoscalingv1alpha1.NodeGroupDelta) autoscalingv1alpha1.DryRunDecision {
	return autoscalingv1alpha1.DryRunDecision{
		Time: *at(when), Kind: autoscalingv1alpha1.ScaleUpDecision, NodeGroups: groups,
		Pods: pods, PodCount: int32(len(pods)), OldestPodCreationTime: at(oldest),
	}
}

// ourDown is a decision to remove nodes.
func ourDown(when time.Duration, nodes ...string) autoscalingv1alpha1.DryRunDecision {
	return autoscalingv1alpha1.DryRunDecision{Time: *at(when), Kind: autoscalingv1alpha1.ScaleDownDecision, Nodes: nodes}
}

func delta(id string, n int32) autoscalingv1alpha1.NodeGroupDelta {
	return autoscalingv1alpha1.NodeGroupDelta{ID: id, Delta: n}
}

// created says that pods exist, created at.
func created(when time.Duration, pods ...string) map[string]PodCreation {
	m := map[string]PodCreation{}
	for _, pod := range pods {
		m[pod] = PodCreation{UID: types.UID(pod), Created: testNow.Add(when)}
	}
	return m
}

func concat[T any](slices ...[]T) []T {
	var all []T
	for _, s := range slices {
		all = append(all, s...)
	}
	return all
}

// brief is a comparison in brief: a line per scale-up, "Result" or
// "Result: difference", and per node, "node Result", with * when the other
// autoscaler's events may have expired.
func brief(c Comparison) (scaleUps, nodes []string) {
	scaleUps, nodes = []string{}, []string{}
	for _, m := range c.ScaleUps {
		line := string(m.Result)
		if m.Difference != "" {
			line += ": " + m.Difference
		}
		if m.TheirEventsMayHaveExpired {
			line += "*"
		}
		scaleUps = append(scaleUps, line)
	}
	for _, n := range c.ScaleDowns {
		line := n.Node + " " + string(n.Result)
		if n.TheirEventsMayHaveExpired {
			line += "*"
		}
		nodes = append(nodes, line)
	}
	return scaleUps, nodes
}

func TestCompare(t *testing.T) {
	web := []string{"shop/web-0", "shop/web-1"}
	grow := scaleUpMessage([4]any{md0, 1, 3, 5})
	cases := []struct {
		name       string
		window     time.Duration
		decisions  []autoscalingv1alpha1.DryRunDecision
		theirUps   []TheirScaleUpEvent
		theirDowns []TheirScaleDown
		pods       map[string]PodCreation

		wantScaleUps, wantNodes []string
		wantDifferences         int
	}{
		{
			name:         "agree: the same pods, groups and node counts, 5s apart",
			decisions:    []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(md0, 2))},
			theirUps:     theirUp(-10*time.Minute+5*time.Second, grow, web...),
			wantScaleUps: []string{"Agree"},
		},
		{
			name:            "differ: another node group for the same pods",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(md1, 2))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"Differ: node groups"},
			wantDifferences: 1,
		},
		{
			name:            "differ: another node count",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(md0, 3))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"Differ: node counts"},
			wantDifferences: 1,
		},
		{
			name: "differ: one more node group, balanced",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-10*time.Minute, -11*time.Minute, web, delta(md0, 1), delta(md1, 1)),
			},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"Differ: node groups"},
			wantDifferences: 1,
		},
		{
			name:            "only theirs",
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"OnlyTheirs"},
			wantDifferences: 1,
		},
		{
			name:            "only ours",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(md0, 2))},
			wantScaleUps:    []string{"OnlyOurs"},
			wantDifferences: 1,
		},
		{
			name:            "beyond the tolerance, the same scale-up is two",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-20*time.Minute, -31*time.Minute, web, delta(md0, 2))},
			theirUps:        theirUp(-30*time.Minute, grow, web...),
			wantScaleUps:    []string{"OnlyTheirs", "OnlyOurs"},
			wantDifferences: 2,
		},
		{
			name: "out of the window",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-2*time.Hour, -3*time.Hour, web, delta(md0, 2)),
				ourDown(-2*time.Hour, "prod-md-0-a"),
			},
			theirUps:     theirUp(-2*time.Hour, grow, web...),
			theirDowns:   []TheirScaleDown{{Node: "prod-md-0-b", Time: testNow.Add(-2 * time.Hour)}},
			wantScaleUps: []string{},
		},
		{
			name: "after the window and its tolerance",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(3*time.Minute, -time.Minute, web, delta(md0, 2)),
				ourDown(time.Hour, "prod-md-0-a"),
			},
			theirUps:        theirUp(time.Minute, grow, web...),
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-b", Time: testNow.Add(time.Hour)}},
			wantScaleUps:    []string{"OnlyTheirs"},
			wantDifferences: 1,
		},
		{
			name:         "a counterpart up to the tolerance before the window",
			decisions:    []autoscalingv1alpha1.DryRunDecision{ourUp(-59*time.Minute, -62*time.Minute, web, delta(md0, 2))},
			theirUps:     theirUp(-61*time.Minute, grow, web...),
			wantScaleUps: []string{"Agree"},
		},
		{
			name:            "no different scale-ups for different pods at the same time",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/db-0"}, delta(md1, 1))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"OnlyTheirs", "OnlyOurs"},
			wantDifferences: 2,
		},
		{
			name: "two scale-ups at once, each matched with the one for its pods",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/db-0"}, delta(md0, 1)),
				ourUp(-10*time.Minute+time.Second, -11*time.Minute, web, delta(md0, 2)),
			},
			theirUps: concat(
				theirUp(-10*time.Minute, grow, web...),
				theirUp(-10*time.Minute+30*time.Second, scaleUpMessage([4]any{md0, 3, 5, 5}), "shop/db-0"),
			),
			wantScaleUps:    []string{"Agree", "Differ: node counts"},
			wantDifferences: 1,
		},
		{
			name: "one message in two bursts is two scale-ups",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-40*time.Minute, -41*time.Minute, []string{"shop/web-0"}, delta(md0, 2)),
				ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/web-1"}, delta(md0, 2)),
			},
			theirUps:     concat(theirUp(-40*time.Minute, grow, "shop/web-0"), theirUp(-10*time.Minute, grow, "shop/web-1")),
			wantScaleUps: []string{"Agree", "Agree"},
		},
		{
			name:            "a message not understood differs",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(md0, 2))},
			theirUps:        theirUp(-10*time.Minute, "pod triggered scale-up: [MachineDeployment/clusters/prod-md-0 grows]", web...),
			wantScaleUps:    []string{"Differ: their message was not understood"},
			wantDifferences: 1,
		},
		{
			name:       "scale-down: the same node",
			decisions:  []autoscalingv1alpha1.DryRunDecision{ourDown(-6*time.Minute, "prod-md-0-a")},
			theirDowns: []TheirScaleDown{{Node: "prod-md-0-a", Time: testNow.Add(-5 * time.Minute)}},
			wantNodes:  []string{"prod-md-0-a Agree"},
		},
		{
			name:            "scale-down: different nodes",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourDown(-6*time.Minute, "prod-md-0-b")},
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-a", Time: testNow.Add(-5 * time.Minute)}},
			wantNodes:       []string{"prod-md-0-b OnlyOurs", "prod-md-0-a OnlyTheirs"},
			wantDifferences: 2,
		},
		{
			name: "scale-down: a node of two decisions and two events is one",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourDown(-20*time.Minute, "prod-md-0-a"),
				ourDown(-6*time.Minute, "prod-md-0-a", "prod-md-0-b"),
			},
			theirDowns: []TheirScaleDown{
				{Node: "prod-md-0-a", Time: testNow.Add(-5 * time.Minute)},
				{Node: "prod-md-0-a", Time: testNow.Add(-4 * time.Minute)},
				{Node: "prod-md-0-b", Time: testNow.Add(-4 * time.Minute)},
			},
			wantNodes: []string{"prod-md-0-a Agree", "prod-md-0-b Agree"},
		},
		{
			name:   "a longer window than events live: what only we did back then is no difference",
			window: 3 * time.Hour,
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-2*time.Hour, -3*time.Hour, web, delta(md0, 2)),
				ourDown(-90*time.Minute, "prod-md-0-a"),
				ourDown(-30*time.Minute, "prod-md-0-b"),
			},
			wantScaleUps:    []string{"OnlyOurs*"},
			wantNodes:       []string{"prod-md-0-a OnlyOurs*", "prod-md-0-b OnlyOurs"},
			wantDifferences: 1,
		},
		{
			name:            "a longer window, and older events: the events were kept",
			window:          3 * time.Hour,
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourDown(-90*time.Minute, "prod-md-0-a")},
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-c", Time: testNow.Add(-150 * time.Minute)}},
			wantNodes:       []string{"prod-md-0-c OnlyTheirs", "prod-md-0-a OnlyOurs"},
			wantDifferences: 2,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			window := c.window
			if window == 0 {
				window = time.Hour
			}
			comparison := Compare(CompareInput{
				Now: testNow, Window: window, Tolerance: 2 * time.Minute,
				Decisions: c.decisions, TheirScaleUps: c.theirUps, TheirScaleDowns: c.theirDowns, Pods: c.pods,
			})
			scaleUps, nodes := brief(comparison)
			if c.wantScaleUps == nil {
				c.wantScaleUps = []string{}
			}
			if c.wantNodes == nil {
				c.wantNodes = []string{}
			}
			g.Expect(scaleUps).To(Equal(c.wantScaleUps), "scale-ups")
			g.Expect(nodes).To(Equal(c.wantNodes), "scale-downs")
			g.Expect(comparison.Summary.Differences).To(Equal(c.wantDifferences), "differences")
		})
	}
}

// TestCompareScaleUpDetails checks what a matched scale-up says of each side.
func TestCompareScaleUpDetails(t *testing.T) {
	g := NewWithT(t)
	pods := []string{"shop/web-0", "shop/web-1", "shop/web-2"}
	existing := created(-12*time.Minute, "shop/web-1", "shop/web-2")
	// web-0 was recreated since it triggered the scale-up: its creation
	// says nothing of the scale-up's latency.
	existing["shop/web-0"] = PodCreation{UID: "another", Created: testNow.Add(-time.Minute)}
	// The event of web-2 repeats a second later, as a burst does.
	events := concat(theirUp(-10*time.Minute, scaleUpMessage([4]any{md0, 1, 3, 5}), pods[:2]...),
		theirUp(-10*time.Minute+time.Second, scaleUpMessage([4]any{md0, 1, 3, 5}), pods[2]))
	comparison := Compare(CompareInput{
		Now: testNow, Window: time.Hour, Tolerance: 2 * time.Minute, Pods: existing, TheirScaleUps: events,
		Decisions: []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute+20*time.Second, -13*time.Minute, pods[:2], delta(md0, 2))},
	})
	g.Expect(comparison.ScaleUps).To(HaveLen(1))
	m := comparison.ScaleUps[0]
	g.Expect(m.Result).To(Equal(Agree))
	g.Expect(m.CommonPods).To(BeEquivalentTo(2))
	g.Expect(m.Theirs.Time.Time).To(Equal(testNow.Add(-10 * time.Minute)))
	g.Expect(m.Theirs.Pods).To(Equal(pods))
	g.Expect(m.Theirs.PodCount).To(BeEquivalentTo(3))
	g.Expect(m.Theirs.NodeGroups).To(Equal([]GroupChange{{ID: md0, Delta: 2, From: ptrTo[int32](1), To: ptrTo[int32](3), Max: ptrTo[int32](5)}}))
	g.Expect(m.Theirs.OldestPodCreationTime.Time).To(Equal(testNow.Add(-12 * time.Minute)))
	g.Expect(m.Theirs.Latency.Duration).To(Equal(2 * time.Minute))
	g.Expect(m.Ours.Latency.Duration).To(Equal(3*time.Minute + 20*time.Second))
	g.Expect(m.Ours.PodCount).To(BeEquivalentTo(2))

	// Without its pods, the other autoscaler's latency is unknown.
	comparison = Compare(CompareInput{Now: testNow, Window: time.Hour, Tolerance: 2 * time.Minute, TheirScaleUps: events})
	g.Expect(comparison.ScaleUps).To(HaveLen(1))
	g.Expect(comparison.ScaleUps[0].Theirs.Latency).To(BeNil())
	g.Expect(comparison.ScaleUps[0].Theirs.OldestPodCreationTime).To(BeNil())
}

func TestParseScaleUpMessage(t *testing.T) {
	group := func(id string, from, to, maxSize int32) GroupChange {
		return GroupChange{ID: id, Delta: to - from, From: &from, To: &to, Max: &maxSize}
	}
	cases := []struct {
		message     string
		want        []GroupChange
		wantProblem string
	}{
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)}]", want: []GroupChange{group(md0, 1, 3, 5)}},
		{
			message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->2 (max: 5)} {MachineDeployment/clusters/prod-md-1 0->1 (max: 3)}]",
			want:    []GroupChange{group(md0, 1, 2, 5), group(md1, 0, 1, 3)},
		},
		{
			message: "  pod triggered scale-up:[ { MachineDeployment/clusters/prod-md-0  1 -> 3 ( max:5 ) } ] ",
			want:    []GroupChange{group(md0, 1, 3, 5)},
		},
		{
			message: "pod triggered scale-up: {MachineSet/clusters/prod-ms-0 0->2}",
			want:    []GroupChange{{ID: "MachineSet/clusters/prod-ms-0", Delta: 2, From: ptrTo[int32](0), To: ptrTo[int32](2)}},
		},
		{
			message:     "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)} {MachineDeployment/clusters/prod-md-1 one->two}]",
			want:        []GroupChange{group(md0, 1, 3, 5)},
			wantProblem: `"{MachineDeployment/clusters/prod-md-1 one->two}" is no {group current->new (max: max)}`,
		},
		{message: "pod triggered scale-up: []", wantProblem: "names no node group"},
		{message: "pod triggered scale-up: [MachineDeployment/clusters/prod-md-0 grows]", wantProblem: `"MachineDeployment/clusters/prod-md-0 grows" is no {group`},
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)", wantProblem: "is not closed"},
		{message: "pod didn't trigger scale-up: no node group fits", wantProblem: `does not start with "pod triggered scale-up:"`},
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->99999999999 (max: 5)}]", wantProblem: "out of range"},
	}
	for _, c := range cases {
		t.Run(c.message, func(t *testing.T) {
			g := NewWithT(t)
			groups, err := parseScaleUpMessage(c.message)
			g.Expect(groups).To(Equal(c.want))
			if c.wantProblem == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantProblem)))
			}
		})
	}
}

// The Active engine of capi-autoscaler is the other autoscaler too: its
// messages must read back as it meant them.
func TestParseScaleUpMessageReadsTheEnginesMessages(t *testing.T) {
	g := NewWithT(t)
	message := autoscaler.TriggeredScaleUpMessage([]autoscaler.GroupResize{{ID: md0, From: 1, To: 3, Max: 5}, {ID: md1, From: 0, To: 2, Max: 4}})
	groups, err := parseScaleUpMessage(message)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]GroupChange{
		{ID: md0, Delta: 2, From: ptrTo[int32](1), To: ptrTo[int32](3), Max: ptrTo[int32](5)},
		{ID: md1, Delta: 2, From: ptrTo[int32](0), To: ptrTo[int32](2), Max: ptrTo[int32](4)},
	}))
}

func TestScaleDownNode(t *testing.T) {
	on := func(kind, name, reason, message string) *corev1.Event {
		return &corev1.Event{Reason: reason, Message: message, InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name}}
	}
	cases := []struct {
		event    *corev1.Event
		want     string
		wantErr  string
		notANode bool
	}{
		{event: on("Node", "prod-md-0-a", "ScaleDown", "marked the node as toBeDeleted/unschedulable"), want: "prod-md-0-a"},
		{event: on("Node", "prod-md-0-a", "ScaleDownEmpty", "removing empty node prod-md-0-a"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", `Scale-down: removing empty node "prod-md-0-a"`), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", "Scale-down: removing empty node prod-md-0-a"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", "Scale-down: empty node prod-md-0-a removed"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: removing node prod-md-0-a, utilization: {0.1 0.2 0 cpu 0.2}, pods to reschedule: web-0,web-1"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: node prod-md-0-a removed with drain"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: something new"), wantErr: `ScaleDown event "Scale-down: something new" names no node`},
		{event: on("Pod", "web-0", "ScaleDown", "deleting pod for node scale down"), notANode: true},
		{event: on("Node", "prod-md-0-a", "ScaleDownFailed", "failed to drain the node"), notANode: true},
	}
	for _, c := range cases {
		t.Run(c.event.InvolvedObject.Kind+" "+c.event.Reason+" "+c.event.Message, func(t *testing.T) {
			g := NewWithT(t)
			node, err := scaleDownNode(c.event)
			switch {
			case c.notANode:
				g.Expect(err).To(MatchError(errNotAboutANode))
			case c.wantErr != "":
				g.Expect(err).To(MatchError(c.wantErr))
			default:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(node).To(Equal(c.want))
			}
		})
	}
}

// yamlStatus is the status of cluster-autoscaler 1.30 and later.
const yamlStatus = `time: 2030-01-02 09:59:50.123456789 +0000 UTC
autoscalerStatus: Running
clusterWide:
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 4, ready: 4, notStarted: 0}
      longUnregistered: 0
      unregistered: 0
    lastProbeTime: "2030-01-02T09:59:50Z"
  scaleUp:
    status: NoActivity
  scaleDown:
    status: CandidatesPresent
    candidates: 1
nodeGroups:
- name: MachineDeployment/clusters/prod-md-0
  health:
    status: Healthy
    nodeCounts:
      registered: {total: 3, ready: 3, notStarted: 0}
    cloudProviderTarget: 3
    minSize: 1
    maxSize: 5
  scaleUp:
    status: NoActivity
  scaleDown:
    status: CandidatesPresent
    candidates: 1
- name: MachineDeployment/clusters/prod-md-1
  health:
    status: Unhealthy
    cloudProviderTarget: 0
    minSize: 0
    maxSize: 3
  scaleUp:
    status: Backoff
    backoffInfo: {errorCode: "x", errorMessage: "y"}
  scaleDown:
    status: NoCandidates
`

// textStatus is the status of cluster-autoscaler before 1.30.
const textStatus = `Cluster-autoscaler status at 2030-01-02 09:59:50.123456789 +0000 UTC:
Cluster-wide:
  Health:      Healthy (ready=4 unready=0 notStarted=0 longNotStarted=0 registered=4 longUnregistered=0)
               LastProbeTime:      2030-01-02 09:59:50.1 +0000 UTC m=+100.1
               LastTransitionTime: 2030-01-02 09:00:00.1 +0000 UTC m=+10.1
  ScaleUp:     NoActivity (ready=4 registered=4)
               LastProbeTime:      2030-01-02 09:59:50.1 +0000 UTC m=+100.1
  ScaleDown:   CandidatesPresent (candidates=1)
               LastProbeTime:      2030-01-02 09:59:50.1 +0000 UTC m=+100.1

NodeGroups:
  Name:        MachineDeployment/clusters/prod-md-0
  Health:      Healthy (ready=3 unready=0 notStarted=0 longNotStarted=0 registered=3 longUnregistered=0 cloudProviderTarget=3 (minSize=1, maxSize=5))
               LastProbeTime:      2030-01-02 09:59:50.1 +0000 UTC m=+100.1
  ScaleUp:     NoActivity (ready=3 cloudProviderTarget=3)
  ScaleDown:   CandidatesPresent (candidates=1)

  Name:        MachineDeployment/clusters/prod-md-1
  Health:      Unhealthy (ready=0 unready=0 notStarted=0 longNotStarted=0 registered=0 longUnregistered=0 cloudProviderTarget=0 (minSize=0, maxSize=3))
  ScaleUp:     Backoff (ready=0 cloudProviderTarget=0)
  ScaleDown:   NoCandidates (candidates=0)
`

func TestParseTheirStatus(t *testing.T) {
	i := func(n int32) *int32 { return &n }
	groups := []TheirGroupState{
		{ID: md0, Health: "Healthy", Target: i(3), MinSize: i(1), MaxSize: i(5), ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", Candidates: i(1)},
		{ID: md1, Health: "Unhealthy", Target: i(0), MinSize: i(0), MaxSize: i(3), ScaleUp: "Backoff", ScaleDown: "NoCandidates", Candidates: i(0)},
	}
	written := time.Date(2030, time.January, 2, 9, 59, 50, 123456789, time.UTC)
	cases := []struct {
		name string
		data map[string]string
		want TheirStatus
	}{
		{
			name: "yaml",
			data: map[string]string{"status": yamlStatus},
			want: TheirStatus{Format: "yaml", AutoscalerStatus: "Running", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent",
				// YAML leaves out candidates: 0.
				NodeGroups: []TheirGroupState{groups[0], func() TheirGroupState { g := groups[1]; g.Candidates = nil; return g }()}},
		},
		{
			name: "text",
			data: map[string]string{"status": textStatus},
			want: TheirStatus{Format: "text", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", NodeGroups: groups},
		},
		{
			name: "text of versions that did not name the node groups",
			data: map[string]string{"status": strings.ReplaceAll(strings.ReplaceAll(textStatus, "  Name:        "+md0+"\n", ""), "  Name:        "+md1+"\n", "")},
			want: TheirStatus{Format: "text", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", NodeGroups: func() []TheirGroupState {
				unnamed := []TheirGroupState{groups[0], groups[1]}
				unnamed[0].ID, unnamed[1].ID = "", ""
				return unnamed
			}()},
		},
		{
			name: "text of its own",
			data: map[string]string{"status": "Cluster-autoscaler status at 2030-01-02: Initializing"},
			want: TheirStatus{Format: "text", Problem: "the text status says nothing compare understands"},
		},
		{
			name: "neither",
			data: map[string]string{"status": "{{{"},
			want: TheirStatus{Format: "unknown", Problem: "the status is neither text nor YAML"},
		},
		{
			name: "no status",
			data: map[string]string{},
			want: TheirStatus{Format: "unknown", Problem: `no key "status"`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			configMap := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cluster-autoscaler-status", Annotations: map[string]string{
					"cluster-autoscaler.kubernetes.io/last-updated": "2030-01-02 09:59:50.123456789 +0000 UTC",
				}},
				Data: c.data,
			}
			got := parseTheirStatus(configMap)
			g.Expect(got.LastUpdated).NotTo(BeNil())
			g.Expect(got.LastUpdated.Time).To(BeTemporally("==", written))
			g.Expect(got.ConfigMap).To(Equal("kube-system/cluster-autoscaler-status"))
			g.Expect(got.Problem).To(HavePrefix(c.want.Problem))
			got.LastUpdated, got.ConfigMap, got.Problem = nil, "", ""
			c.want.Problem = ""
			g.Expect(*got).To(Equal(c.want))
		})
	}
}
