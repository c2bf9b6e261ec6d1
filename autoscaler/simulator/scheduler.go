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
//	sched := simulator.NewScheduler(ctx, snap)
//	sched.Fork()
//	defer sched.Revert()
//	_ = sched.RemoveNode(candidate.Name())
//	result := sched.SchedulePods(podsOf(candidate), simulator.ScheduleOptions{NodeFilter: notBeingRemoved})
//	// len(result.Unschedulable) == 0: the candidate can go.
package simulator

import (
	"context"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// ReasonNodeNotFound is returned when asked about a node the snapshot lacks.
const ReasonNodeNotFound = "node(s) not found in the snapshot"

// Scheduler places pods on the nodes of one snapshot. It caches what it
// derives from the snapshot for pod groups, like kube-scheduler's PreFilter
// state, once for the groups that share terms or labels, and keeps the cache up to date through its own changes (PlaceOn,
// AddNode, RemoveNode, SchedulePods). Its Fork and Revert fork the snapshot
// and the cache together, so that simulations in a row share what was
// computed before the fork. Any other change to the snapshot makes it
// recompute. It is not safe for concurrent use.
type Scheduler struct {
	snap   *snapshot.Snapshot
	logger klog.Logger
	// version is the snapshot version that antiAffinityPods and changes
	// reflect.
	version          uint64
	antiAffinityPods []placedPod
	// states, per part, are keyed by the parsed pod of the first group of
	// the part's signature; stateKeys maps, per part, the parsed pod of
	// every group (shared by its subsets) to that key, and keys maps
	// signatures to keys: groups with the same terms, or the same labels,
	// share a state, such as the pods without owners of one app. tracked
	// are the states whose counts follow the snapshot through the
	// scheduler's own changes. A tracked state catches up with changes
	// when it is used: a group done with costs nothing when others are
	// placed.
	states, tracked [partCount]partStates
	stateKeys       [partCount]map[*snapshot.PodInfo]*snapshot.PodInfo
	keys            map[string]*snapshot.PodInfo
	changes         []change
	// lastAntiAffinity is the number of changes up to the last one with
	// anti-affinity, the only ones that matter to groups without terms.
	lastAntiAffinity int
	// resyncs counts the times the cache was recomputed.
	resyncs int
	// forks saves the cache at each Fork; len(forks) is the fork level.
	forks []savedCache
	// volumes resolves claims against the snapshot's storage objects,
	// which simulations do not change.
	volumes *volumeIndex
}

// partStates are the states of one part, keyed by the parsed pod of the
// first group of their signature.
type partStates map[*snapshot.PodInfo]*podState

// parts are the parts of a group's state.
var parts = [partCount]statePart{termsPart, labelsPart}

// newPartStates returns empty maps, one per part.
func newPartStates() [partCount]partStates {
	return [partCount]partStates{{}, {}}
}

// clonePartStates copies the maps, not the states.
func clonePartStates(states [partCount]partStates) [partCount]partStates {
	return [partCount]partStates{maps.Clone(states[termsPart]), maps.Clone(states[labelsPart])}
}

// change is one of the scheduler's own changes to the snapshot: a pod
// placed on node, or node added or removed with the pods on it.
type change struct {
	node    *corev1.Node
	pod     *snapshot.PodInfo
	pods    []*snapshot.PodInfo
	removed bool
	// antiAffinity tells whether the change involves pods with required
	// anti-affinity, which matter to every group.
	antiAffinity bool
}

// placedPod is a pod with required anti-affinity and the node it is on.
type placedPod struct {
	pod  *snapshot.PodInfo
	node *corev1.Node
}

// savedCache is the cache at a Fork. Changes made after the fork are
// appended beyond the saved slice's length, so it stays what it was.
type savedCache struct {
	version          uint64
	antiAffinityPods []placedPod
	states, tracked  [partCount]partStates
	changes          []change
	lastAntiAffinity int
	resyncs          int
}

// NewScheduler returns a Scheduler working on snap.
func NewScheduler(ctx context.Context, snap *snapshot.Snapshot) *Scheduler {
	s := &Scheduler{
		snap: snap, logger: klog.FromContext(ctx),
		states:    newPartStates(),
		stateKeys: [partCount]map[*snapshot.PodInfo]*snapshot.PodInfo{{}, {}},
		keys:      map[string]*snapshot.PodInfo{},
		volumes:   newVolumeIndex(snap.Storage()),
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
		states: clonePartStates(s.states), tracked: clonePartStates(s.tracked),
		changes: s.changes, lastAntiAffinity: s.lastAntiAffinity, resyncs: s.resyncs,
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
	s.states, s.tracked = saved.states, saved.tracked
	if s.resyncs == saved.resyncs {
		// The saved changes, in the array the fork may have grown: the
		// next fork appends without growing it again.
		s.changes = s.changes[:len(saved.changes)]
	} else {
		s.changes = saved.changes
	}
	s.lastAntiAffinity, s.resyncs = saved.lastAntiAffinity, saved.resyncs
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
	for _, states := range s.states {
		for _, st := range states {
			st.level = min(st.level, len(s.forks))
		}
	}
}

// Prepare computes now what the predicates need for groups, in one pass
// over the snapshot, so that the forks that follow share it instead of each
// computing it again.
func (s *Scheduler) Prepare(groups ...*PodGroup) {
	s.sync()
	var stale []*podState
	for _, group := range groups {
		for _, part := range parts {
			if st := s.staleState(s.stateKey(group, part), part); st != nil {
				stale = append(stale, st)
			}
		}
	}
	s.computeCounts(stale)
}

// Check tells why pod does not fit the named node; nil when it fits.
func (s *Scheduler) Check(pod *corev1.Pod, nodeName string) []string {
	group := NewPodGroup(pod)
	defer s.forget([]*PodGroup{group})
	return s.CheckGroup(group, nodeName)
}

// CheckGroup tells why the pods of group do not fit the named node; nil
// when one more of them fits.
func (s *Scheduler) CheckGroup(group *PodGroup, nodeName string) []string {
	reasons, _ := s.CheckGroupLasting(group, nodeName)
	return reasons
}

// CheckGroupLasting is CheckGroup that also tells whether the failure
// lasts as more pods are placed: only topology spread and pod affinity can
// turn in the pods' favour.
func (s *Scheduler) CheckGroupLasting(group *PodGroup, nodeName string) (reasons []string, lasting bool) {
	nodeInfo := s.snap.NodeInfo(nodeName)
	if nodeInfo == nil {
		return []string{ReasonNodeNotFound}, true
	}
	return s.state(group).check(s.logger, group, nodeInfo, nil)
}

// PlaceOn places pod, a member of group, on the named node when it fits,
// and otherwise says why not.
func (s *Scheduler) PlaceOn(group *PodGroup, pod *corev1.Pod, nodeName string) []string {
	reasons, _ := s.PlaceOnLasting(group, pod, nodeName)
	return reasons
}

// PlaceOnLasting is PlaceOn that also tells, as CheckGroupLasting does,
// whether the failure lasts as more pods are placed.
func (s *Scheduler) PlaceOnLasting(group *PodGroup, pod *corev1.Pod, nodeName string) (reasons []string, lasting bool) {
	if reasons, lasting := s.CheckGroupLasting(group, nodeName); reasons != nil {
		return reasons, lasting
	}
	s.place(group.podInfo(pod), s.snap.NodeInfo(nodeName).Node())
	return nil, false
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
	s.record(change{node: node, pods: nodeInfo.Pods(), antiAffinity: len(nodeInfo.PodsWithRequiredAntiAffinity()) > 0})
	return nil
}

// RemoveNode removes a node, with the pods on it, from the snapshot. The
// cache is updated rather than recomputed, so that removing one node costs
// what is on that node, not what is in the cluster.
func (s *Scheduler) RemoveNode(name string) error {
	s.sync()
	nodeInfo := s.snap.NodeInfo(name)
	if err := s.snap.RemoveNode(name); err != nil {
		return err
	}
	antiAffinity := len(nodeInfo.PodsWithRequiredAntiAffinity()) > 0
	if antiAffinity {
		// A copy: a saved fork may share the slice.
		s.antiAffinityPods = slices.DeleteFunc(slices.Clone(s.antiAffinityPods), func(placed placedPod) bool {
			return placed.node.Name == name
		})
	}
	s.record(change{node: nodeInfo.Node(), pods: nodeInfo.Pods(), removed: true, antiAffinity: antiAffinity})
	return nil
}

// ScheduleOptions tune SchedulePods.
type ScheduleOptions struct {
	// NodeFilter, when set, leaves out the nodes it returns false for, such
	// as other nodes about to be removed.
	NodeFilter func(*snapshot.NodeInfo) bool
	// FromNode leaves out the nodes before this position in snapshot order
	// (Snapshot.NodeInfos), such as the nodes that were there before a
	// simulation added its own, without looking at each of them.
	FromNode int
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
	groups := GroupPods(pods)
	defer s.forget(groups)
	return s.ScheduleGroups(groups, opts)
}

// ScheduleGroups is SchedulePods for pods already grouped.
//
// Like kube-scheduler's queue, it tries again the pods whose failure
// depends on other pods (topology spread, pod affinity) once others were
// placed, until a pass places nothing: a pod that its spread kept off a
// zone fits there once its siblings filled the other zones.
func (s *Scheduler) ScheduleGroups(groups []*PodGroup, opts ScheduleOptions) ScheduleResult {
	// One pass over the snapshot for all the groups, not one per group.
	s.Prepare(groups...)
	var result ScheduleResult
	for len(groups) > 0 {
		pass := s.schedulePass(groups, opts)
		result.Scheduled = append(result.Scheduled, pass.Scheduled...)
		var retry []*PodGroup
		if len(pass.Scheduled) > 0 {
			retry = dependentFailures(groups, pass.Unschedulable)
		}
		if len(retry) == 0 {
			result.Unschedulable = append(result.Unschedulable, pass.Unschedulable...)
			break
		}
		retried := map[*corev1.Pod]bool{}
		for _, group := range retry {
			for _, pod := range group.Pods {
				retried[pod] = true
			}
		}
		for _, u := range pass.Unschedulable {
			if !retried[u.Pod] {
				result.Unschedulable = append(result.Unschedulable, u)
			}
		}
		groups = retry
	}
	return result
}

// dependentFailures returns the groups that depend on other pods,
// restricted to their unschedulable members: the only pods that a
// placement elsewhere can make fit.
func dependentFailures(groups []*PodGroup, unschedulable []Unschedulable) []*PodGroup {
	failed := make(map[*corev1.Pod]bool, len(unschedulable))
	for _, u := range unschedulable {
		failed[u.Pod] = true
	}
	var retry []*PodGroup
	for _, group := range groups {
		if !group.interPod {
			continue
		}
		pods := slices.DeleteFunc(slices.Clone(group.Pods), func(pod *corev1.Pod) bool { return !failed[pod] })
		if len(pods) > 0 {
			retry = append(retry, group.Subset(pods))
		}
	}
	return retry
}

// schedulePass places each pod of groups, in order, on the first node that
// fits it.
//
// Placing pods only fills nodes, so a pod group that does not fit a node
// will not fit it later in the same pass, unless topology spread or pod
// affinity was what failed: siblings skip the nodes known not to fit
// instead of trying every node again.
func (s *Scheduler) schedulePass(groups []*PodGroup, opts ScheduleOptions) ScheduleResult {
	var result ScheduleResult
	buffer := make([]string, 0, 8)
	for _, group := range groups {
		scan := groupScan{cursor: opts.FromNode, reasons: map[string]int{}}
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
				unfit, lasting := st.check(s.logger, group, nodes[i], buffer[:0])
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

// state returns what the predicates need for group, up to date with the
// snapshot.
func (s *Scheduler) state(group *PodGroup) groupState {
	s.sync()
	terms, labels := s.partState(group, termsPart), s.partState(group, labelsPart)
	if group.self == nil {
		group.self = terms.selfTermsOf(s.snap, group.info.Pod)
	}
	if group.volumes == nil && len(group.info.Claims) > 0 {
		group.volumes = s.volumes.resolve(group.info)
	}
	return groupState{terms: terms, labels: labels, self: group.self, volumes: group.volumes}
}

// partState returns a part of the group's state, up to date.
func (s *Scheduler) partState(group *PodGroup, part statePart) *podState {
	key := s.stateKey(group, part)
	if st, ok := s.tracked[part][key]; ok {
		if st.synced < len(s.changes) {
			st = s.catchUp(st)
		}
		return st
	}
	if st := s.staleState(key, part); st != nil {
		s.computeCounts([]*podState{st})
		return st
	}
	return s.states[part][key]
}

// stateKey returns the key of the state of a part of group's signature.
func (s *Scheduler) stateKey(group *PodGroup, part statePart) *snapshot.PodInfo {
	if key, ok := s.stateKeys[part][group.info]; ok {
		return key
	}
	sig := signature(part, group.info.Pod)
	key, ok := s.keys[sig]
	if !ok {
		key = group.info
		s.keys[sig] = key
	}
	s.stateKeys[part][group.info] = key
	return key
}

// catchUp applies to a tracked state the changes it has not seen, as
// kube-scheduler's PreFilter extensions would have one by one, and returns
// it, copied first when a lower fork level owns it.
func (s *Scheduler) catchUp(st *podState) *podState {
	if st.part == labelsPart && s.lastAntiAffinity <= st.synced {
		// Only pods with anti-affinity change the labels part.
		return st
	}
	if st.level != len(s.forks) {
		st = st.clone(len(s.forks))
		s.states[st.part][st.info], s.tracked[st.part][st.info] = st, st
	}
	for _, c := range s.changes[st.synced:] {
		if st.part == labelsPart {
			st.countChangedAntiAffinity(s.snap, c)
			continue
		}
		switch {
		case c.pod != nil:
			st.countPod(s.snap, c.pod, c.node, st.spreadEligibility(s.logger, c.node), 1)
		case c.removed:
			st.removeNode(s.logger, s.snap, c.node, c.pods)
		default:
			st.addNode(s.logger, s.snap, c.node, c.pods)
		}
	}
	st.synced = len(s.changes)
	return st
}

// staleState returns the state of a part under key, owned by the current
// fork level, when its counts must be computed; nil when it is up to date.
func (s *Scheduler) staleState(key *snapshot.PodInfo, part statePart) *podState {
	st, ok := s.states[part][key]
	if !ok {
		st = newPodState(key, part, len(s.forks))
		s.states[part][key] = st
	}
	if _, upToDate := s.tracked[part][key]; upToDate || !st.needsCounts(len(s.antiAffinityPods)) {
		return nil
	}
	if st.level != len(s.forks) {
		st = st.clone(len(s.forks))
		s.states[part][key] = st
	}
	return st
}

func (s *Scheduler) computeCounts(states []*podState) {
	if len(states) == 0 {
		return
	}
	computeCounts(s.logger, s.snap, s.antiAffinityPods, states)
	for _, st := range states {
		st.synced = len(s.changes)
		s.tracked[st.part][st.info] = st
	}
}

// place adds a pod to the snapshot.
func (s *Scheduler) place(pod *snapshot.PodInfo, node *corev1.Node) {
	s.sync()
	// The node exists: the caller found it in this snapshot.
	_ = s.snap.AddPod(pod, node.Name)
	antiAffinity := len(pod.RequiredAntiAffinityTerms) > 0
	if antiAffinity {
		s.antiAffinityPods = append(s.antiAffinityPods, placedPod{pod: pod, node: node})
	}
	s.record(change{node: node, pod: pod, antiAffinity: antiAffinity})
}

// record notes a change the scheduler made to the snapshot, for the
// tracked states to catch up with.
func (s *Scheduler) record(c change) {
	s.changes = append(s.changes, c)
	if c.antiAffinity {
		s.lastAntiAffinity = len(s.changes)
	}
	s.version = s.snap.Version()
}

// forget drops the states of groups that only the scheduler knew, so that
// a scheduler used for many simulations does not keep, nor update, the
// states of every group it ever saw.
func (s *Scheduler) forget(groups []*PodGroup) {
	for _, group := range groups {
		for _, part := range parts {
			key, ok := s.stateKeys[part][group.info]
			if !ok {
				continue
			}
			delete(s.stateKeys[part], group.info)
			if key == group.info {
				// Groups of the signature that remain compute it again.
				delete(s.states[part], key)
				delete(s.tracked[part], key)
				delete(s.keys, signature(part, key.Pod))
			}
		}
	}
}

// sync recomputes the cache when the snapshot changed behind its back.
func (s *Scheduler) sync() {
	if s.version != s.snap.Version() {
		s.resync()
	}
}

func (s *Scheduler) resync() {
	// New ones: a saved fork may share the old ones.
	s.tracked, s.changes, s.lastAntiAffinity = newPartStates(), nil, 0
	s.resyncs++
	s.antiAffinityPods = nil
	for _, nodeInfo := range s.snap.NodeInfos() {
		for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
			s.antiAffinityPods = append(s.antiAffinityPods, placedPod{pod: pod, node: nodeInfo.Node()})
		}
	}
	s.version = s.snap.Version()
}
