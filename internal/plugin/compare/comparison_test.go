package compare

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
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
		events = append(events, TheirScaleUpEvent{Pod: pod, UID: types.UID(pod), Time: plugintest.TestNow.Add(when), Message: message})
	}
	return events
}

// ourUp is a decision to scale up for pods, the oldest created at oldest.
func ourUp(when, oldest time.Duration, pods []string, groups ...autoscalingv1alpha1.NodeGroupDelta) autoscalingv1alpha1.DryRunDecision {
	return autoscalingv1alpha1.DryRunDecision{
		Time: *plugintest.At(when), Kind: autoscalingv1alpha1.ScaleUpDecision, NodeGroups: groups,
		Pods: pods, PodCount: int32(len(pods)), OldestPodCreationTime: plugintest.At(oldest),
	}
}

// ourDown is a decision to remove nodes.
func ourDown(when time.Duration, nodes ...string) autoscalingv1alpha1.DryRunDecision {
	return autoscalingv1alpha1.DryRunDecision{Time: *plugintest.At(when), Kind: autoscalingv1alpha1.ScaleDownDecision, Nodes: nodes}
}

func delta(id string, n int32) autoscalingv1alpha1.NodeGroupDelta {
	return autoscalingv1alpha1.NodeGroupDelta{ID: id, Delta: n}
}

// created says that pods exist, created at.
func created(when time.Duration, pods ...string) map[string]PodCreation {
	m := map[string]PodCreation{}
	for _, pod := range pods {
		m[pod] = PodCreation{UID: types.UID(pod), Created: plugintest.TestNow.Add(when)}
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
	grow := scaleUpMessage([4]any{plugintest.MD0, 1, 3, 5})
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
			decisions:    []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD0, 2))},
			theirUps:     theirUp(-10*time.Minute+5*time.Second, grow, web...),
			wantScaleUps: []string{"Agree"},
		},
		{
			name:            "differ: another node group for the same pods",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD1, 2))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"Differ: node groups"},
			wantDifferences: 1,
		},
		{
			name:            "differ: another node count",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD0, 3))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"Differ: node counts"},
			wantDifferences: 1,
		},
		{
			name: "differ: one more node group, balanced",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD0, 1), delta(plugintest.MD1, 1)),
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
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD0, 2))},
			wantScaleUps:    []string{"OnlyOurs"},
			wantDifferences: 1,
		},
		{
			name:            "beyond the tolerance, the same scale-up is two",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-20*time.Minute, -31*time.Minute, web, delta(plugintest.MD0, 2))},
			theirUps:        theirUp(-30*time.Minute, grow, web...),
			wantScaleUps:    []string{"OnlyTheirs", "OnlyOurs"},
			wantDifferences: 2,
		},
		{
			name: "out of the window",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-2*time.Hour, -3*time.Hour, web, delta(plugintest.MD0, 2)),
				ourDown(-2*time.Hour, "prod-md-0-a"),
			},
			theirUps:     theirUp(-2*time.Hour, grow, web...),
			theirDowns:   []TheirScaleDown{{Node: "prod-md-0-b", Time: plugintest.TestNow.Add(-2 * time.Hour)}},
			wantScaleUps: []string{},
		},
		{
			name: "after the window and its tolerance",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(3*time.Minute, -time.Minute, web, delta(plugintest.MD0, 2)),
				ourDown(time.Hour, "prod-md-0-a"),
			},
			theirUps:        theirUp(time.Minute, grow, web...),
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-b", Time: plugintest.TestNow.Add(time.Hour)}},
			wantScaleUps:    []string{"OnlyTheirs"},
			wantDifferences: 1,
		},
		{
			name:         "a counterpart up to the tolerance before the window",
			decisions:    []autoscalingv1alpha1.DryRunDecision{ourUp(-59*time.Minute, -62*time.Minute, web, delta(plugintest.MD0, 2))},
			theirUps:     theirUp(-61*time.Minute, grow, web...),
			wantScaleUps: []string{"Agree"},
		},
		{
			name:            "no different scale-ups for different pods at the same time",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/db-0"}, delta(plugintest.MD1, 1))},
			theirUps:        theirUp(-10*time.Minute, grow, web...),
			wantScaleUps:    []string{"OnlyTheirs", "OnlyOurs"},
			wantDifferences: 2,
		},
		{
			name: "two scale-ups at once, each matched with the one for its pods",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/db-0"}, delta(plugintest.MD0, 1)),
				ourUp(-10*time.Minute+time.Second, -11*time.Minute, web, delta(plugintest.MD0, 2)),
			},
			theirUps: concat(
				theirUp(-10*time.Minute, grow, web...),
				theirUp(-10*time.Minute+30*time.Second, scaleUpMessage([4]any{plugintest.MD0, 3, 5, 5}), "shop/db-0"),
			),
			wantScaleUps:    []string{"Agree", "Differ: node counts"},
			wantDifferences: 1,
		},
		{
			name: "one message in two bursts is two scale-ups",
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-40*time.Minute, -41*time.Minute, []string{"shop/web-0"}, delta(plugintest.MD0, 2)),
				ourUp(-10*time.Minute, -11*time.Minute, []string{"shop/web-1"}, delta(plugintest.MD0, 2)),
			},
			theirUps:     concat(theirUp(-40*time.Minute, grow, "shop/web-0"), theirUp(-10*time.Minute, grow, "shop/web-1")),
			wantScaleUps: []string{"Agree", "Agree"},
		},
		{
			name:            "a message not understood differs",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute, -11*time.Minute, web, delta(plugintest.MD0, 2))},
			theirUps:        theirUp(-10*time.Minute, "pod triggered scale-up: [MachineDeployment/clusters/prod-md-0 grows]", web...),
			wantScaleUps:    []string{"Differ: their message was not understood"},
			wantDifferences: 1,
		},
		{
			name:       "scale-down: the same node",
			decisions:  []autoscalingv1alpha1.DryRunDecision{ourDown(-6*time.Minute, "prod-md-0-a")},
			theirDowns: []TheirScaleDown{{Node: "prod-md-0-a", Time: plugintest.TestNow.Add(-5 * time.Minute)}},
			wantNodes:  []string{"prod-md-0-a Agree"},
		},
		{
			name:            "scale-down: different nodes",
			decisions:       []autoscalingv1alpha1.DryRunDecision{ourDown(-6*time.Minute, "prod-md-0-b")},
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-a", Time: plugintest.TestNow.Add(-5 * time.Minute)}},
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
				{Node: "prod-md-0-a", Time: plugintest.TestNow.Add(-5 * time.Minute)},
				{Node: "prod-md-0-a", Time: plugintest.TestNow.Add(-4 * time.Minute)},
				{Node: "prod-md-0-b", Time: plugintest.TestNow.Add(-4 * time.Minute)},
			},
			wantNodes: []string{"prod-md-0-a Agree", "prod-md-0-b Agree"},
		},
		{
			name:   "a longer window than events live: what only we did back then is no difference",
			window: 3 * time.Hour,
			decisions: []autoscalingv1alpha1.DryRunDecision{
				ourUp(-2*time.Hour, -3*time.Hour, web, delta(plugintest.MD0, 2)),
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
			theirDowns:      []TheirScaleDown{{Node: "prod-md-0-c", Time: plugintest.TestNow.Add(-150 * time.Minute)}},
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
			comparison := Compare(Input{
				Now: plugintest.TestNow, Window: window, Tolerance: 2 * time.Minute,
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
	existing["shop/web-0"] = PodCreation{UID: "another", Created: plugintest.TestNow.Add(-time.Minute)}
	// The event of web-2 repeats a second later, as a burst does.
	events := concat(theirUp(-10*time.Minute, scaleUpMessage([4]any{plugintest.MD0, 1, 3, 5}), pods[:2]...),
		theirUp(-10*time.Minute+time.Second, scaleUpMessage([4]any{plugintest.MD0, 1, 3, 5}), pods[2]))
	comparison := Compare(Input{
		Now: plugintest.TestNow, Window: time.Hour, Tolerance: 2 * time.Minute, Pods: existing, TheirScaleUps: events,
		Decisions: []autoscalingv1alpha1.DryRunDecision{ourUp(-10*time.Minute+20*time.Second, -13*time.Minute, pods[:2], delta(plugintest.MD0, 2))},
	})
	g.Expect(comparison.ScaleUps).To(HaveLen(1))
	m := comparison.ScaleUps[0]
	g.Expect(m.Result).To(Equal(Agree))
	g.Expect(m.CommonPods).To(BeEquivalentTo(2))
	g.Expect(m.Theirs.Time.Time).To(Equal(plugintest.TestNow.Add(-10 * time.Minute)))
	g.Expect(m.Theirs.Pods).To(Equal(pods))
	g.Expect(m.Theirs.PodCount).To(BeEquivalentTo(3))
	g.Expect(m.Theirs.NodeGroups).To(Equal([]GroupChange{{ID: plugintest.MD0, Delta: 2, From: ptr.To[int32](1), To: ptr.To[int32](3), Max: ptr.To[int32](5)}}))
	g.Expect(m.Theirs.OldestPodCreationTime.Time).To(Equal(plugintest.TestNow.Add(-12 * time.Minute)))
	g.Expect(m.Theirs.Latency.Duration).To(Equal(2 * time.Minute))
	g.Expect(m.Ours.Latency.Duration).To(Equal(3*time.Minute + 20*time.Second))
	g.Expect(m.Ours.PodCount).To(BeEquivalentTo(2))

	// Without its pods, the other autoscaler's latency is unknown.
	comparison = Compare(Input{Now: plugintest.TestNow, Window: time.Hour, Tolerance: 2 * time.Minute, TheirScaleUps: events})
	g.Expect(comparison.ScaleUps).To(HaveLen(1))
	g.Expect(comparison.ScaleUps[0].Theirs.Latency).To(BeNil())
	g.Expect(comparison.ScaleUps[0].Theirs.OldestPodCreationTime).To(BeNil())
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
