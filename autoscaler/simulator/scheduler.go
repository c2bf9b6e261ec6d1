// Package simulator decides where pods would schedule on a snapshot of a
// cluster, with the predicates of kube-scheduler that matter for
// autoscaling: resources, node name, node selector and required node
// affinity, taints, unschedulable nodes, host ports, required inter-pod
// affinity and anti-affinity and hard topology spread. Volumes and dynamic
// resources are not simulated.
//
// Both directions use it: scale-up places pending pods on template nodes,
// scale-down places the pods of candidate nodes on the remaining ones:
//
//	snap.Fork()
//	defer snap.Revert()
//	_ = snap.RemoveNode(candidate.Name())
//	sched := simulator.NewScheduler(ctx, snap)
//	result := sched.SchedulePods(podsOf(candidate), simulator.ScheduleOptions{NodeFilter: notBeingRemoved})
//	// len(result.Unschedulable) == 0: the candidate can go.
package simulator

import (
	"context"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// ReasonNodeNotFound is returned when asked about a node the snapshot lacks.
const ReasonNodeNotFound = "node(s) not found in the snapshot"

// Scheduler places pods on the nodes of one snapshot. It caches what it
// derives from the snapshot per pod group, like kube-scheduler's PreFilter
// state, and keeps the cache up to date through its own changes (PlaceOn,
// AddNode, SchedulePods). Its Fork and Revert fork the snapshot and the
// cache together, so that simulations in a row share what was computed
// before the fork. Any other change to the snapshot makes it recompute. It
// is not safe for concurrent use.
type Scheduler struct {
	snap   *snapshot.Snapshot
	logger klog.Logger
	// version is the snapshot version that antiAffinityPods reflects.
	version          uint64
	antiAffinityPods []placedPod
	// states are keyed by the parsed pod shared by a group and its subsets;
	// tracked are those whose counts are up to date with the snapshot, kept
	// so through the scheduler's own changes; withOwnTerms are the tracked
	// ones that every placement may change, the others only care about pods
	// with anti-affinity.
	states, tracked, withOwnTerms map[*snapshot.PodInfo]*podState
	// forks saves the cache at each Fork; len(forks) is the fork level.
	forks []savedCache
}

// placedPod is a pod with required anti-affinity and the node it is on.
type placedPod struct {
	pod  *snapshot.PodInfo
	node *corev1.Node
}

type savedCache struct {
	version          uint64
	antiAffinityPods []placedPod
	states, tracked  map[*snapshot.PodInfo]*podState
	withOwnTerms     map[*snapshot.PodInfo]*podState
}

// NewScheduler returns a Scheduler working on snap.
func NewScheduler(ctx context.Context, snap *snapshot.Snapshot) *Scheduler {
	s := &Scheduler{
		snap: snap, logger: klog.FromContext(ctx),
		states: map[*snapshot.PodInfo]*podState{},
	}
	s.resync()
	return s
}

// Snapshot is the snapshot the scheduler works on.
func (s *Scheduler) Snapshot() *snapshot.Snapshot { return s.snap }

// Fork forks the snapshot and the scheduler's cache.
func (s *Scheduler) Fork() {
	s.sync()
	s.snap.Fork()
	s.forks = append(s.forks, savedCache{
		version: s.version, antiAffinityPods: s.antiAffinityPods,
		states: maps.Clone(s.states), tracked: maps.Clone(s.tracked), withOwnTerms: maps.Clone(s.withOwnTerms),
	})
}

// Revert drops the changes to the snapshot and the cache since Fork. It
// does nothing when there is no fork.
func (s *Scheduler) Revert() {
	if len(s.forks) == 0 {
		return
	}
	s.snap.Revert()
	saved := s.forks[len(s.forks)-1]
	s.forks = s.forks[:len(s.forks)-1]
	s.version, s.antiAffinityPods = saved.version, saved.antiAffinityPods
	s.states, s.tracked, s.withOwnTerms = saved.states, saved.tracked, saved.withOwnTerms
}

// Commit keeps the changes to the snapshot and the cache since Fork in the
// level below. It does nothing when there is no fork.
func (s *Scheduler) Commit() {
	if len(s.forks) == 0 {
		return
	}
	s.snap.Commit()
	s.forks = s.forks[:len(s.forks)-1]
	// The states of the committed level now belong to the one below; no
	// saved cache refers to them.
	for _, st := range s.states {
		st.level = min(st.level, len(s.forks))
	}
}

// Prepare computes now what the predicates need for groups, in one pass
// over the snapshot, so that the forks that follow share it instead of each
// computing it again.
func (s *Scheduler) Prepare(groups ...*PodGroup) {
	s.sync()
	var stale []*podState
	for _, group := range groups {
		if st := s.staleState(group); st != nil {
			stale = append(stale, st)
		}
	}
	s.computeCounts(stale)
}

// Check tells why pod does not fit the named node; nil when it fits.
func (s *Scheduler) Check(pod *corev1.Pod, nodeName string) []string {
	return s.CheckGroup(NewPodGroup(pod), nodeName)
}

// CheckGroup tells why the pods of group do not fit the named node; nil
// when one more of them fits.
func (s *Scheduler) CheckGroup(group *PodGroup, nodeName string) []string {
	nodeInfo := s.snap.NodeInfo(nodeName)
	if nodeInfo == nil {
		return []string{ReasonNodeNotFound}
	}
	reasons, _ := s.state(group).check(s.logger, nodeInfo, nil)
	return reasons
}

// PlaceOn places pod, a member of group, on the named node when it fits,
// and otherwise says why not.
func (s *Scheduler) PlaceOn(group *PodGroup, pod *corev1.Pod, nodeName string) []string {
	if reasons := s.CheckGroup(group, nodeName); reasons != nil {
		return reasons
	}
	s.place(group.podInfo(pod), s.snap.NodeInfo(nodeName).Node())
	return nil
}

// AddNode adds a node, with the pods on it, to the snapshot.
func (s *Scheduler) AddNode(nodeInfo *snapshot.NodeInfo) error {
	s.sync()
	if err := s.snap.AddNode(nodeInfo); err != nil {
		return err
	}
	node := nodeInfo.Node()
	for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
		s.antiAffinityPods = append(s.antiAffinityPods, placedPod{pod: pod, node: node})
	}
	s.updateTracked(len(nodeInfo.PodsWithRequiredAntiAffinity()) > 0, func(st *podState) {
		st.addNode(s.logger, s.snap, node, nodeInfo.Pods())
		for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
			st.addExistingAntiAffinity(s.snap, pod, node)
		}
		st.updateSpreadMinimums()
	})
	s.version = s.snap.Version()
	return nil
}

// ScheduleOptions tune SchedulePods.
type ScheduleOptions struct {
	// NodeFilter, when set, leaves out the nodes it returns false for, such
	// as other nodes about to be removed.
	NodeFilter func(*snapshot.NodeInfo) bool
}

// Placement is where a pod was placed.
type Placement struct {
	Pod      *corev1.Pod
	NodeName string
}

// ScheduleResult is the outcome of SchedulePods.
type ScheduleResult struct {
	Scheduled     []Placement
	Unschedulable []Unschedulable
}

// SchedulePods places each pod on the first node, in snapshot order, that
// it fits, and keeps it there.
func (s *Scheduler) SchedulePods(pods []*corev1.Pod, opts ScheduleOptions) ScheduleResult {
	return s.ScheduleGroups(GroupPods(pods), opts)
}

// ScheduleGroups is SchedulePods for pods already grouped.
//
// Placing pods only fills nodes, so a pod group that does not fit a node
// will not fit it later in the same call, unless topology spread or pod
// affinity was what failed: siblings skip the nodes known not to fit
// instead of trying every node again.
func (s *Scheduler) ScheduleGroups(groups []*PodGroup, opts ScheduleOptions) ScheduleResult {
	var result ScheduleResult
	buffer := make([]string, 0, 8)
	for _, group := range groups {
		scan := groupScan{reasons: map[string]int{}}
		for _, pod := range group.Pods {
			st := s.state(group)
			nodes := s.snap.NodeInfos()
			if group.interPod && scan.failed == nil {
				scan.failed = make([]bool, len(nodes))
			}
			var transient map[string]int
			transientTried, placedOn := 0, -1
			for i := scan.cursor; i < len(nodes); i++ {
				if scan.failed != nil && scan.failed[i] {
					continue
				}
				if opts.NodeFilter != nil && !opts.NodeFilter(nodes[i]) {
					scan.skip(i)
					continue
				}
				unfit, lasting := st.check(s.logger, nodes[i], buffer[:0])
				if unfit == nil {
					placedOn = i
					break
				}
				if lasting {
					scan.skip(i)
					scan.tried++
					countReasons(scan.reasons, unfit)
					continue
				}
				if transient == nil {
					transient = map[string]int{}
				}
				transientTried++
				countReasons(transient, unfit)
			}
			if placedOn < 0 {
				// Later siblings may add to a group's counts: give each pod its own.
				reasons := scan.reasons
				if group.interPod {
					reasons = maps.Clone(scan.reasons)
					for reason, n := range transient {
						reasons[reason] += n
					}
				}
				result.Unschedulable = append(result.Unschedulable, Unschedulable{Pod: pod, Nodes: scan.tried + transientTried, Reasons: reasons})
				continue
			}
			s.place(group.podInfo(pod), nodes[placedOn].Node())
			result.Scheduled = append(result.Scheduled, Placement{Pod: pod, NodeName: nodes[placedOn].Name()})
		}
	}
	return result
}

// groupScan remembers, across the pods of a group, the nodes known not to
// fit: those before cursor, or marked in failed for groups whose failures
// are not all lasting.
type groupScan struct {
	cursor  int
	failed  []bool
	tried   int
	reasons map[string]int
}

func (g *groupScan) skip(node int) {
	if g.failed != nil {
		g.failed[node] = true
	} else {
		g.cursor = node + 1
	}
}

func countReasons(counts map[string]int, reasons []string) {
	for _, reason := range reasons {
		counts[reason]++
	}
}

// state returns the group's predicate state, up to date with the snapshot.
func (s *Scheduler) state(group *PodGroup) *podState {
	s.sync()
	if st := s.staleState(group); st != nil {
		s.computeCounts([]*podState{st})
	}
	return s.states[group.info]
}

// staleState returns the group's state, owned by the current fork level,
// when its counts must be computed; nil when it is up to date.
func (s *Scheduler) staleState(group *PodGroup) *podState {
	st, ok := s.states[group.info]
	if !ok {
		st = newPodState(group.info, len(s.forks))
		s.states[group.info] = st
	}
	if _, upToDate := s.tracked[group.info]; upToDate || !st.needsCounts(len(s.antiAffinityPods)) {
		return nil
	}
	if st.level != len(s.forks) {
		st = st.clone(len(s.forks))
		s.states[group.info] = st
	}
	return st
}

func (s *Scheduler) computeCounts(states []*podState) {
	if len(states) == 0 {
		return
	}
	computeCounts(s.logger, s.snap, s.antiAffinityPods, states)
	for _, st := range states {
		s.tracked[st.info] = st
		if st.hasOwnTerms() {
			s.withOwnTerms[st.info] = st
		}
	}
}

// updateTracked calls update with the tracked states that a new pod with
// anti-affinity or not may change, owned by the current fork level so that
// they can be changed.
func (s *Scheduler) updateTracked(antiAffinity bool, update func(*podState)) {
	states := s.withOwnTerms
	if antiAffinity {
		states = s.tracked
	}
	for info, st := range states {
		if st.level != len(s.forks) {
			st = st.clone(len(s.forks))
			s.states[info], s.tracked[info] = st, st
			if st.hasOwnTerms() {
				s.withOwnTerms[info] = st
			}
		}
		update(st)
	}
}

// place adds a pod to the snapshot and updates the states that were up to
// date, as kube-scheduler's PreFilter extensions do.
func (s *Scheduler) place(pod *snapshot.PodInfo, node *corev1.Node) {
	s.sync()
	// The node exists: the caller found it in this snapshot.
	_ = s.snap.AddPod(pod, node.Name)
	if len(pod.RequiredAntiAffinityTerms) > 0 {
		s.antiAffinityPods = append(s.antiAffinityPods, placedPod{pod: pod, node: node})
	}
	s.updateTracked(len(pod.RequiredAntiAffinityTerms) > 0, func(st *podState) {
		eligible := len(st.spread) > 0 && st.spreadEligible(s.logger, node)
		st.addPod(s.snap, pod, node, eligible)
		st.addExistingAntiAffinity(s.snap, pod, node)
		if eligible {
			st.updateSpreadMinimums()
		}
	})
	s.version = s.snap.Version()
}

// sync recomputes the cache when the snapshot changed behind its back.
func (s *Scheduler) sync() {
	if s.version != s.snap.Version() {
		s.resync()
	}
}

func (s *Scheduler) resync() {
	// New ones: a saved fork may share the old ones.
	s.tracked, s.withOwnTerms = map[*snapshot.PodInfo]*podState{}, map[*snapshot.PodInfo]*podState{}
	s.antiAffinityPods = nil
	for _, nodeInfo := range s.snap.NodeInfos() {
		for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
			s.antiAffinityPods = append(s.antiAffinityPods, placedPod{pod: pod, node: nodeInfo.Node()})
		}
	}
	s.version = s.snap.Version()
}
