// Package simulator decides where pods would schedule on a snapshot of a
// cluster, with the predicates of kube-scheduler that matter for
// autoscaling: resources, node name, node selector and required node
// affinity, taints, unschedulable nodes, host ports, required inter-pod
// affinity and anti-affinity and hard topology spread, volumes (volumes.go)
// and DRA resource claims (dra.go).
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
// state, once for the groups that share terms or labels, and keeps the
// cache up to date through its own changes (PlaceOn, AddNode, RemoveNode,
// SchedulePods). Its Fork and Revert fork the snapshot and the cache
// together, so that simulations in a row share what was computed before
// the fork. Any other change to the snapshot makes it recompute. It is not
// safe for concurrent use.
type Scheduler struct {
	snap   *snapshot.Snapshot
	logger klog.Logger
	// cache holds what the inter-pod predicates need. The scheduler's own
	// changes to the snapshot go through it, so that it follows them
	// instead of computing everything again.
	cache preFilterCache
	// volumes resolves claims against the snapshot's storage objects,
	// which simulations do not change.
	volumes *volumeIndex
	// dra allocates resource claims, and follows the allocations the
	// simulation makes through forks.
	dra *draIndex
	// claims are, on a branch (Branches), the resolved claims of the
	// groups it simulates, which the groups keep on other schedulers:
	// the branches share the groups.
	claims map[*PodGroup]*podClaims
	// scans are those of NewScans, which follow the forks.
	scans []*Scans
}

// NewScheduler returns a Scheduler working on snap.
func NewScheduler(ctx context.Context, snap *snapshot.Snapshot) *Scheduler {
	logger := klog.FromContext(ctx)
	s := &Scheduler{
		snap: snap, logger: logger,
		cache:   newPreFilterCache(logger, snap),
		volumes: newVolumeIndex(snap.Storage()),
		dra:     newDRAIndex(ctx, snap.DRA()),
	}
	s.dra.allocatePlaced(snap)
	return s
}

// Branches returns n schedulers, each on a branch of the snapshot
// (snapshot.Snapshot.Branch) with what s derived so far, for simulations
// of groups on n goroutines that start from the state of s: they give the
// answers s would. It first derives what the scheduler keeps in the groups
// themselves, so that the branches only read the groups; each branch
// keeps the claims of DRA pods, which follow its allocations, apart. s
// must not be used while its branches are,
// and a branch's Revert and Commit must not go below the fork it starts
// in.
func (s *Scheduler) Branches(n int, groups []*PodGroup) []*Scheduler {
	for _, group := range groups {
		s.state(group)
	}
	branches := make([]*Scheduler, n)
	for i := range branches {
		snap := s.snap.Branch()
		branches[i] = &Scheduler{
			snap: snap, logger: s.logger,
			cache: s.cache.branch(snap), volumes: s.volumes, dra: s.dra.branch(),
			claims: map[*PodGroup]*podClaims{},
		}
	}
	return branches
}

// Snapshot is the snapshot the scheduler works on.
func (s *Scheduler) Snapshot() *snapshot.Snapshot { return s.snap }

// Fork forks the snapshot and the scheduler's cache.
func (s *Scheduler) Fork() {
	s.cache.fork()
	s.snap.Fork()
	s.dra.fork()
	for _, scans := range s.scans {
		scans.fork()
	}
}

// Revert drops the changes to the snapshot and the cache since Fork. It
// does nothing when there is no fork.
func (s *Scheduler) Revert() {
	if s.cache.level() == 0 {
		return
	}
	s.snap.Revert()
	s.cache.revert()
	s.dra.revert()
	for _, scans := range s.scans {
		scans.revert()
	}
}

// Commit keeps the changes to the snapshot and the cache since Fork in the
// level below. It does nothing when there is no fork.
func (s *Scheduler) Commit() {
	if s.cache.level() == 0 {
		return
	}
	s.snap.Commit()
	s.cache.commit()
	s.dra.commit()
	for _, scans := range s.scans {
		scans.commit()
	}
}

// Prepare computes now what the predicates need for groups, in one pass
// over the snapshot, so that the forks that follow share it instead of each
// computing it again.
func (s *Scheduler) Prepare(groups ...*PodGroup) {
	s.cache.prepare(groups)
}

// Check tells why pod does not fit the named node; nil when it fits.
func (s *Scheduler) Check(pod *corev1.Pod, nodeName string) []string {
	group := NewPodGroup(pod)
	defer s.cache.forget([]*PodGroup{group})
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
	s.place(group, pod, s.snap.NodeInfo(nodeName))
	return nil, false
}

// place places pod, a member of group that fits nodeInfo, there: its
// claims take the devices they were allocated.
func (s *Scheduler) place(group *PodGroup, pod *corev1.Pod, nodeInfo *snapshot.NodeInfo) {
	s.cache.place(group.podInfo(pod), nodeInfo.Node())
	if claims := s.claimsOf(group); claims != nil {
		claims.place(nodeInfo)
	}
}

// AddNode adds a node, with the pods on it, to the snapshot.
func (s *Scheduler) AddNode(nodeInfo *snapshot.NodeInfo) error {
	s.forgetScans()
	return s.cache.addNode(nodeInfo)
}

// RemoveNode removes a node, with the pods on it, from the snapshot. The
// cache is updated rather than recomputed, so that removing one node costs
// what is on that node, not what is in the cluster.
// The claims allocated on the node's devices are released: the node's
// pods take them elsewhere.
func (s *Scheduler) RemoveNode(name string) error {
	if err := s.cache.removeNode(name); err != nil {
		return err
	}
	s.dra.releaseNode(name)
	return nil
}

// ReplaceNode replaces the node of the same name by nodeInfo, such as the
// node as it will be once started, with the pods on it. Unlike RemoveNode
// then AddNode, the claims allocated on the node's devices stay: its pods
// keep them.
func (s *Scheduler) ReplaceNode(nodeInfo *snapshot.NodeInfo) error {
	s.forgetScans()
	if err := s.cache.removeNode(nodeInfo.Name()); err != nil {
		return err
	}
	return s.cache.addNode(nodeInfo)
}

// forgetScans makes the scans forget where pods do not fit: a node added
// or replaced, even at a place known not to fit, may fit now.
func (s *Scheduler) forgetScans() {
	for _, scans := range s.scans {
		scans.forget()
	}
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
	// Scans, when set, remember across calls which nodes pods do not fit
	// (see Scans): pods skip, without looking at them, the nodes that
	// pods of the same kind did not fit in earlier calls.
	Scans *Scans
	// StopAtUnschedulable stops at the first pod that fits nowhere and
	// whose fit does not depend on other pods, leaving the pods after it
	// out of the result, for callers that give up when one pod does not
	// fit, such as scale-down.
	StopAtUnschedulable bool
}

// Placement is where a pod was placed.
type Placement struct {
	Pod      *corev1.Pod
	NodeName string
	// Group is the pod's group, whose parsed form a later call may reuse
	// to place the pod elsewhere (PodGroup.Subset).
	Group *PodGroup
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
	defer s.Forget(groups)
	return s.ScheduleGroups(groups, opts)
}

// Forget drops what the scheduler derived for groups that only its caller
// knows, once the caller is done with them for now, so that a scheduler
// used for many simulations neither keeps, nor updates, nor copies at
// every fork, the states of every group it ever saw. A group forgotten
// may be scheduled again: what it needs is derived anew.
func (s *Scheduler) Forget(groups []*PodGroup) {
	s.cache.forget(groups)
	for _, group := range groups {
		delete(s.claims, group)
	}
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
	if opts.Scans != nil {
		if opts.Scans.sched != s {
			panic("simulator: Scans of another scheduler")
		}
		opts.Scans.syncWith(&s.cache)
	}
	var result ScheduleResult
	for len(groups) > 0 {
		pass, stopped := s.schedulePass(groups, opts)
		result.Scheduled = append(result.Scheduled, pass.Scheduled...)
		if stopped {
			result.Unschedulable = append(result.Unschedulable, pass.Unschedulable...)
			break
		}
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
// fits it, and tells whether it stopped at an unschedulable pod
// (StopAtUnschedulable).
//
// Placing pods only fills nodes, so a pod group that does not fit a node
// will not fit it later in the same pass, unless topology spread or pod
// affinity was what failed: siblings skip the nodes known not to fit
// instead of trying every node again, and so do the pods of the same kind
// in later calls, through opts.Scans.
func (s *Scheduler) schedulePass(groups []*PodGroup, opts ScheduleOptions) (result ScheduleResult, stopped bool) {
	buffer := make([]string, 0, 8)
	for _, group := range groups {
		scan := groupScan{cursor: opts.FromNode, reasons: map[string]int{}}
		if opts.Scans != nil {
			scan.cursor = opts.Scans.start(group, s.snap.NodeInfos(), opts.FromNode)
		}
		skipped := scan.cursor > opts.FromNode
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
				unschedulable := Unschedulable{Pod: pod, Nodes: scan.tried + transientTried, Reasons: reasons}
				if skipped {
					// The reasons of the nodes it skipped were not recorded.
					unschedulable = s.unschedulable(group, pod, opts)
				}
				result.Unschedulable = append(result.Unschedulable, unschedulable)
				if opts.StopAtUnschedulable && !group.interPod {
					s.recordScan(group, scan, opts)
					return result, true
				}
				continue
			}
			s.place(group, pod, nodes[placedOn])
			result.Scheduled = append(result.Scheduled, Placement{Pod: pod, NodeName: nodes[placedOn].Name(), Group: group})
		}
		s.recordScan(group, scan, opts)
	}
	return result, false
}

// recordScan tells opts.Scans where the group's scan stopped.
func (s *Scheduler) recordScan(group *PodGroup, scan groupScan, opts ScheduleOptions) {
	if opts.Scans != nil && scan.failed == nil {
		opts.Scans.record(group, s.snap.NodeInfos(), scan.cursor)
	}
}

// unschedulable checks the pod, a member of group that fits no node, on
// every node opts lets it try, and says why it fits none of them.
func (s *Scheduler) unschedulable(group *PodGroup, pod *corev1.Pod, opts ScheduleOptions) Unschedulable {
	st := s.state(group)
	u := Unschedulable{Pod: pod, Reasons: map[string]int{}}
	buffer := make([]string, 0, 8)
	for _, nodeInfo := range s.snap.NodeInfos()[opts.FromNode:] {
		if opts.NodeFilter != nil && !opts.NodeFilter(nodeInfo) {
			continue
		}
		u.Nodes++
		unfit, _ := st.check(s.logger, group, nodeInfo, buffer[:0])
		countReasons(u.Reasons, unfit)
	}
	return u
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
	terms, labels := s.cache.statesOf(group)
	if group.self == nil {
		group.self = terms.selfTermsOf(s.snap, group.info.Pod)
	}
	if group.volumes == nil && len(group.info.Claims) > 0 {
		group.volumes = s.volumes.resolve(group.info)
	}
	return groupState{terms: terms, labels: labels, self: group.self, volumes: group.volumes, claims: s.claimsOf(group)}
}

// claimsOf returns the resolved claims of group, nil when its pods have
// none. The claims follow the allocations of one scheduler: a group that
// another scheduler looked at resolves them again, and a branch keeps its
// own.
func (s *Scheduler) claimsOf(group *PodGroup) *podClaims {
	if len(group.first.Spec.ResourceClaims) == 0 {
		return nil
	}
	if s.claims != nil {
		claims, ok := s.claims[group]
		if !ok {
			claims = s.dra.resolve(group.first)
			s.claims[group] = claims
		}
		return claims
	}
	if group.claims == nil || group.claims.index != s.dra {
		group.claims = s.dra.resolve(group.first)
	}
	return group.claims
}
