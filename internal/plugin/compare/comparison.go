package compare

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// The comparison of a DryRun ClusterAutoscaler's decisions with what the
// other autoscaler of its workload cluster did: what `compare` prints, and
// prints with -o json. Its field names are the plugin's output format.

// defaultEventTTL is how long the API server keeps events unless its
// --event-ttl says otherwise.
const defaultEventTTL = time.Hour

// Result says how the two autoscalers compare on one scale-up or node.
type Result string

// Results of a comparison.
const (
	// Agree: both scaled the same node groups by the same numbers of
	// nodes, or both removed the node.
	Agree Result = "Agree"
	// Differ: both scaled up for the same pods, but not the same groups
	// or not by the same numbers of nodes.
	Differ Result = "Differ"
	// OnlyTheirs: the other autoscaler scaled up or removed the node; this
	// one would not have.
	OnlyTheirs Result = "OnlyTheirs"
	// OnlyOurs: this one would have scaled up or removed the node; the
	// other did not.
	OnlyOurs Result = "OnlyOurs"
)

// TheirScaleUpEvent is a TriggeredScaleUp event of the other autoscaler on
// a pod.
type TheirScaleUpEvent struct {
	// Pod is namespace/name; UID is the pod's, when the event says.
	Pod     string
	UID     types.UID
	Time    time.Time
	Message string
}

// TheirScaleDown is a node the other autoscaler removed, and when it
// started to.
type TheirScaleDown struct {
	Node string
	Time time.Time
}

// PodCreation is when a pod of the workload cluster was created.
type PodCreation struct {
	UID     types.UID
	Created time.Time
}

// Input is what Compare compares.
type Input struct {
	// Now is the end of the window, which starts Window before.
	Now    time.Time
	Window time.Duration
	// Tolerance is how far apart in time the two autoscalers' scale-ups
	// for the same pods may be; also how far before the window a
	// counterpart of a scale-up or removal in it is looked for.
	Tolerance time.Duration

	// Decisions are the DryRun ClusterAutoscaler's.
	Decisions []autoscalingv1alpha1.DryRunDecision
	// TheirScaleUps and TheirScaleDowns are the other autoscaler's.
	TheirScaleUps   []TheirScaleUpEvent
	TheirScaleDowns []TheirScaleDown
	// Pods are the pods of TheirScaleUps that still exist, by
	// namespace/name.
	Pods map[string]PodCreation
}

// Comparison is where the two autoscalers agree and differ.
type Comparison struct {
	WindowStart metav1.Time     `json:"windowStart"`
	WindowEnd   metav1.Time     `json:"windowEnd"`
	Tolerance   metav1.Duration `json:"tolerance"`
	// TheirEventsSince is how far back the other autoscaler's events can
	// be trusted to be complete: the API server deletes events an hour
	// (its --event-ttl) after they last happened, unless events older than
	// that were found.
	TheirEventsSince metav1.Time         `json:"theirEventsSince"`
	ScaleUps         []ScaleUpComparison `json:"scaleUps"`
	ScaleDowns       []NodeComparison    `json:"scaleDowns"`
	Summary          Summary             `json:"summary"`
}

// ScaleUpComparison is a scale-up of either autoscaler, or of both.
type ScaleUpComparison struct {
	Result Result `json:"result"`
	// Difference says how they differ: "node groups" or "node counts", or
	// that the other autoscaler's message was not understood.
	Difference string       `json:"difference,omitempty"`
	Theirs     *ScaleUpSide `json:"theirs,omitempty"`
	Ours       *ScaleUpSide `json:"ours,omitempty"`
	// CommonPods is how many of the pods both name.
	CommonPods int32 `json:"commonPods,omitempty"`
	// TheirEventsMayHaveExpired is set on a scale-up only this one would
	// have made, from before TheirEventsSince: the other autoscaler's
	// events of the time may be gone. It counts as no difference.
	TheirEventsMayHaveExpired bool `json:"theirEventsMayHaveExpired,omitempty"`
}

// ScaleUpSide is one autoscaler's scale-up.
type ScaleUpSide struct {
	// Time is when it decided: the DryRun decision's loop, or the first
	// TriggeredScaleUp event.
	Time       metav1.Time   `json:"time"`
	NodeGroups []GroupChange `json:"nodeGroups"`
	// Pods are namespace/name of the pods it was for (some of them when
	// PodCount is larger).
	Pods     []string `json:"pods,omitempty"`
	PodCount int32    `json:"podCount"`
	// OldestPodCreationTime is when the oldest of its pods was created,
	// and Latency how long after that it decided; unknown for the other
	// autoscaler when none of its pods exists any more.
	OldestPodCreationTime *metav1.Time     `json:"oldestPodCreationTime,omitempty"`
	Latency               *metav1.Duration `json:"latency,omitempty"`
	// Message is the other autoscaler's TriggeredScaleUp message, and
	// Problem what of it was not understood.
	Message string `json:"message,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// NodeComparison is a node either autoscaler removed or would remove, or both.
type NodeComparison struct {
	Node   string `json:"node"`
	Result Result `json:"result"`
	// Theirs is when the other autoscaler started to remove it; Ours when
	// this one would have.
	Theirs *metav1.Time `json:"theirs,omitempty"`
	Ours   *metav1.Time `json:"ours,omitempty"`
	// TheirEventsMayHaveExpired: see ScaleUpComparison.
	TheirEventsMayHaveExpired bool `json:"theirEventsMayHaveExpired,omitempty"`
}

// Summary counts the results.
type Summary struct {
	ScaleUps   Counts `json:"scaleUps"`
	ScaleDowns Counts `json:"scaleDowns"`
	// Differences counts the results that are not Agree, but for those
	// whose events may have expired.
	Differences int `json:"differences"`
}

// Counts counts the results of one kind.
type Counts struct {
	Agree      int `json:"agree"`
	Differ     int `json:"differ"`
	OnlyTheirs int `json:"onlyTheirs"`
	OnlyOurs   int `json:"onlyOurs"`
	// OnlyOursEventsMayHaveExpired counts the OnlyOurs from before
	// TheirEventsSince.
	OnlyOursEventsMayHaveExpired int `json:"onlyOursEventsMayHaveExpired,omitempty"`
}

func (c *Counts) add(r Result, expired bool) {
	switch r {
	case Agree:
		c.Agree++
	case Differ:
		c.Differ++
	case OnlyTheirs:
		c.OnlyTheirs++
	case OnlyOurs:
		c.OnlyOurs++
		if expired {
			c.OnlyOursEventsMayHaveExpired++
		}
	}
}

func (c Counts) differences() int {
	return c.Differ + c.OnlyTheirs + c.OnlyOurs - c.OnlyOursEventsMayHaveExpired
}

// Compare matches the decisions of the window with the other autoscaler's
// scale-ups and removals. The other autoscaler's scale-ups are the bursts
// of its TriggeredScaleUp events: the events of one message, each within
// the tolerance of the one before. A scale-up of each side is matched with
// the other side's nearest in time, within the tolerance, that shares the
// most pods, else node groups; each is matched at most once. A removal
// matches the same node's, whenever it is. What either side did in the
// window is shown with its counterpart, which may be up to the tolerance
// outside the window; what happened later than that after its end (the
// clocks of the clusters differ) is left out.
func Compare(in Input) Comparison {
	start := in.Now.Add(-in.Window)
	within := in.within
	c := Comparison{
		WindowStart: metav1.Time{Time: start},
		WindowEnd:   metav1.Time{Time: in.Now},
		Tolerance:   metav1.Duration{Duration: in.Tolerance},
		ScaleUps:    []ScaleUpComparison{},
		ScaleDowns:  []NodeComparison{},
	}
	since := in.Now.Add(-defaultEventTTL)
	for _, e := range in.TheirScaleUps {
		since = minTime(since, e.Time)
	}
	for _, d := range in.TheirScaleDowns {
		since = minTime(since, d.Time)
	}
	c.TheirEventsSince = metav1.Time{Time: since}

	theirs := theirScaleUps(in.TheirScaleUps, in.Pods, within, in.Tolerance)
	var ours []*ScaleUpSide
	for i := range in.Decisions {
		if d := &in.Decisions[i]; d.Kind == autoscalingv1alpha1.ScaleUpDecision && within(d.Time.Time) {
			ours = append(ours, ourScaleUp(d))
		}
	}
	for _, match := range matchScaleUps(theirs, ours, in.Tolerance) {
		if !match.Theirs.inWindow(start) && !match.Ours.inWindow(start) {
			continue
		}
		match.classify()
		if match.Result == OnlyOurs && match.Ours.Time.Time.Before(since) {
			match.TheirEventsMayHaveExpired = true
		}
		c.ScaleUps = append(c.ScaleUps, match)
		c.Summary.ScaleUps.add(match.Result, match.TheirEventsMayHaveExpired)
	}

	c.ScaleDowns = compareRemovals(in, start, within, since)
	for _, node := range c.ScaleDowns {
		c.Summary.ScaleDowns.add(node.Result, node.TheirEventsMayHaveExpired)
	}
	c.Summary.Differences = c.Summary.ScaleUps.differences() + c.Summary.ScaleDowns.differences()
	return c
}

// within says whether what happened at t is compared: whether it is in the
// window, or within the tolerance of it.
func (in *Input) within(t time.Time) bool {
	return !t.Before(in.Now.Add(-in.Window-in.Tolerance)) && !t.After(in.Now.Add(in.Tolerance))
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (s *ScaleUpSide) inWindow(start time.Time) bool {
	return s != nil && !s.Time.Time.Before(start)
}

// theirScaleUps groups the events within into bursts: one scale-up per
// message and time.
func theirScaleUps(events []TheirScaleUpEvent, pods map[string]PodCreation, within func(time.Time) bool, tolerance time.Duration) []*ScaleUpSide {
	byMessage := map[string][]TheirScaleUpEvent{}
	for _, e := range events {
		if within(e.Time) {
			byMessage[e.Message] = append(byMessage[e.Message], e)
		}
	}
	var sides []*ScaleUpSide
	for _, message := range slices.Sorted(maps.Keys(byMessage)) {
		burst := byMessage[message]
		slices.SortFunc(burst, func(a, b TheirScaleUpEvent) int {
			return cmp.Or(a.Time.Compare(b.Time), strings.Compare(a.Pod, b.Pod))
		})
		var side *ScaleUpSide
		var last time.Time
		for _, e := range burst {
			if side == nil || e.Time.Sub(last) > tolerance {
				side = newTheirScaleUp(message, e.Time)
				sides = append(sides, side)
			}
			last = e.Time
			if !slices.Contains(side.Pods, e.Pod) {
				side.Pods = append(side.Pods, e.Pod)
			}
			if created, ok := pods[e.Pod]; ok && (e.UID == "" || created.UID == "" || e.UID == created.UID) {
				if side.OldestPodCreationTime == nil || created.Created.Before(side.OldestPodCreationTime.Time) {
					side.OldestPodCreationTime = &metav1.Time{Time: created.Created}
				}
			}
		}
	}
	for _, side := range sides {
		slices.Sort(side.Pods)
		side.PodCount = int32(len(side.Pods))
		side.Latency = latency(side.Time.Time, side.OldestPodCreationTime)
	}
	return sides
}

func newTheirScaleUp(message string, at time.Time) *ScaleUpSide {
	groups, err := parseScaleUpMessage(message)
	side := &ScaleUpSide{Time: metav1.Time{Time: at}, NodeGroups: groups, Message: message}
	if side.NodeGroups == nil {
		side.NodeGroups = []GroupChange{}
	}
	if err != nil {
		side.Problem = err.Error()
	}
	return side
}

func ourScaleUp(d *autoscalingv1alpha1.DryRunDecision) *ScaleUpSide {
	side := &ScaleUpSide{
		Time: d.Time, NodeGroups: []GroupChange{}, Pods: slices.Sorted(slices.Values(d.Pods)),
		PodCount: max(d.PodCount, int32(len(d.Pods))), OldestPodCreationTime: d.OldestPodCreationTime,
	}
	for _, g := range d.NodeGroups {
		side.NodeGroups = append(side.NodeGroups, GroupChange{ID: g.ID, Delta: g.Delta})
	}
	side.Latency = latency(d.Time.Time, d.OldestPodCreationTime)
	return side
}

// latency is how long after created decided is, never negative.
func latency(decided time.Time, created *metav1.Time) *metav1.Duration {
	if created == nil {
		return nil
	}
	return &metav1.Duration{Duration: max(decided.Sub(created.Time), 0)}
}

// matchScaleUps pairs scale-ups of both sides, the best pairs first, and
// returns the pairs and the scale-ups left alone, in the order of time.
func matchScaleUps(theirs, ours []*ScaleUpSide, tolerance time.Duration) []ScaleUpComparison {
	type candidate struct {
		their, our           int
		commonPods, commonNG int
		apart                time.Duration
	}
	var candidates []candidate
	for i, t := range theirs {
		for j, o := range ours {
			apart := t.Time.Sub(o.Time.Time).Abs()
			if apart > tolerance {
				continue
			}
			c := candidate{their: i, our: j, apart: apart,
				commonPods: sets.New(t.Pods...).Intersection(sets.New(o.Pods...)).Len(),
				commonNG:   groupIDs(t).Intersection(groupIDs(o)).Len()}
			if c.commonPods > 0 || c.commonNG > 0 {
				candidates = append(candidates, c)
			}
		}
	}
	slices.SortFunc(candidates, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.commonPods, a.commonPods), cmp.Compare(b.commonNG, a.commonNG),
			cmp.Compare(a.apart, b.apart), cmp.Compare(a.their, b.their), cmp.Compare(a.our, b.our))
	})
	theirMatch, ourMatch := map[int]bool{}, map[int]bool{}
	var matches []ScaleUpComparison
	for _, c := range candidates {
		if theirMatch[c.their] || ourMatch[c.our] {
			continue
		}
		theirMatch[c.their], ourMatch[c.our] = true, true
		matches = append(matches, ScaleUpComparison{Theirs: theirs[c.their], Ours: ours[c.our], CommonPods: int32(c.commonPods)})
	}
	for i, t := range theirs {
		if !theirMatch[i] {
			matches = append(matches, ScaleUpComparison{Theirs: t})
		}
	}
	for j, o := range ours {
		if !ourMatch[j] {
			matches = append(matches, ScaleUpComparison{Ours: o})
		}
	}
	slices.SortStableFunc(matches, func(a, b ScaleUpComparison) int {
		return a.time().Compare(b.time())
	})
	return matches
}

// time is the earlier of the two sides' times.
func (m *ScaleUpComparison) time() time.Time {
	switch {
	case m.Theirs == nil:
		return m.Ours.Time.Time
	case m.Ours == nil:
		return m.Theirs.Time.Time
	}
	return minTime(m.Theirs.Time.Time, m.Ours.Time.Time)
}

func groupIDs(side *ScaleUpSide) sets.Set[string] {
	ids := sets.New[string]()
	for _, g := range side.NodeGroups {
		ids.Insert(g.ID)
	}
	return ids
}

// deltas is the nodes added to each group.
func deltas(side *ScaleUpSide) map[string]int32 {
	added := map[string]int32{}
	for _, g := range side.NodeGroups {
		added[g.ID] += g.Delta
	}
	return added
}

// classify sets the result of a match, and how its sides differ.
func (m *ScaleUpComparison) classify() {
	switch {
	case m.Ours == nil:
		m.Result = OnlyTheirs
	case m.Theirs == nil:
		m.Result = OnlyOurs
	case m.Theirs.Problem != "":
		m.Result, m.Difference = Differ, "their message was not understood"
	case !groupIDs(m.Theirs).Equal(groupIDs(m.Ours)):
		m.Result, m.Difference = Differ, "node groups"
	case !maps.Equal(deltas(m.Theirs), deltas(m.Ours)):
		m.Result, m.Difference = Differ, "node counts"
	default:
		m.Result = Agree
	}
}

// compareRemovals compares the nodes each side removed or would remove:
// each node once, at its first time within.
func compareRemovals(in Input, start time.Time, within func(time.Time) bool, since time.Time) []NodeComparison {
	first := func(times map[string]time.Time, node string, at time.Time) {
		if !within(at) {
			return
		}
		if t, ok := times[node]; !ok || at.Before(t) {
			times[node] = at
		}
	}
	theirs, ours := map[string]time.Time{}, map[string]time.Time{}
	for _, d := range in.TheirScaleDowns {
		first(theirs, d.Node, d.Time)
	}
	for _, d := range in.Decisions {
		if d.Kind == autoscalingv1alpha1.ScaleDownDecision {
			for _, node := range d.Nodes {
				first(ours, node, d.Time.Time)
			}
		}
	}
	nodes := []NodeComparison{}
	for _, node := range sets.List(sets.KeySet(theirs).Union(sets.KeySet(ours))) {
		n := NodeComparison{Node: node}
		their, hasTheirs := theirs[node]
		our, hasOurs := ours[node]
		if (!hasTheirs || their.Before(start)) && (!hasOurs || our.Before(start)) {
			continue
		}
		if hasTheirs {
			n.Theirs = &metav1.Time{Time: their}
		}
		if hasOurs {
			n.Ours = &metav1.Time{Time: our}
		}
		switch {
		case hasTheirs && hasOurs:
			n.Result = Agree
		case hasTheirs:
			n.Result = OnlyTheirs
		default:
			n.Result = OnlyOurs
			n.TheirEventsMayHaveExpired = our.Before(since)
		}
		nodes = append(nodes, n)
	}
	slices.SortStableFunc(nodes, func(a, b NodeComparison) int {
		return cmp.Or(a.time().Compare(b.time()), strings.Compare(a.Node, b.Node))
	})
	return nodes
}

// time is the earlier of the two sides' times.
func (n *NodeComparison) time() time.Time {
	switch {
	case n.Theirs == nil:
		return n.Ours.Time
	case n.Ours == nil:
		return n.Theirs.Time
	}
	return minTime(n.Theirs.Time, n.Ours.Time)
}
