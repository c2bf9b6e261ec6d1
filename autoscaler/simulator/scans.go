package simulator

import (
	"maps"
	"math"
	"sort"
	"strconv"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Scans remember, across the SchedulePods calls that share them, up to
// where in the snapshot's node order the pods of each kind are known not
// to fit, so that a pass that places the pods of one node after another
// does not try again, for every pod, the nodes that earlier pods filled.
//
// Placing pods only fills nodes: a node that a pod did not fit for a
// reason that lasts (resources, pod slots, ports, selectors, taints,
// anti-affinity) does not fit an identical pod later either, until a
// revert takes pods away or a node is added or replaced. Scans follow the
// scheduler's forks, and forget everything when a node is added or
// replaced or the snapshot changes behind the scheduler's back. Pods whose
// fit depends on other pods (pod affinity, topology spread) or that claim
// DRA devices are not remembered.
//
// The calls that share Scans must use the same NodeFilter: a node it
// leaves out is remembered as not fitting.
type Scans struct {
	sched *Scheduler
	// firstFit is, by scan key, the order (snapshot.NodeInfo.Order) of the
	// first node that pods of the key may fit: none before it does.
	firstFit map[string]uint64
	// undo holds the values firstFit had before each change, and marks
	// where each fork's changes start in it.
	undo  []scanChange
	marks []int
	// resyncs is the scheduler cache's count of rebuilds when the scans
	// were last valid.
	resyncs int
}

type scanChange struct {
	key   string
	order uint64
	known bool
}

// NewScans returns empty scans that follow the scheduler's forks.
func (s *Scheduler) NewScans() *Scans {
	scans := &Scans{sched: s, firstFit: map[string]uint64{}, resyncs: s.cache.resyncs}
	for range s.cache.level() {
		scans.fork()
	}
	s.scans = append(s.scans, scans)
	return scans
}

// Branch returns scans for branch, one of the Branches of sc's scheduler
// made since sc last changed, that know what sc knows and follow the
// branch's forks, so that simulations on the branch skip the nodes sc
// would have them skip.
func (sc *Scans) Branch(branch *Scheduler) *Scans {
	scans := branch.NewScans()
	scans.firstFit = maps.Clone(sc.firstFit)
	scans.resyncs = sc.resyncs
	return scans
}

func (sc *Scans) fork() { sc.marks = append(sc.marks, len(sc.undo)) }

func (sc *Scans) revert() {
	mark := sc.marks[len(sc.marks)-1]
	sc.marks = sc.marks[:len(sc.marks)-1]
	for i := len(sc.undo) - 1; i >= mark; i-- {
		change := sc.undo[i]
		if change.known {
			sc.firstFit[change.key] = change.order
		} else {
			delete(sc.firstFit, change.key)
		}
	}
	sc.undo = sc.undo[:mark]
}

// commit keeps the changes since the fork for the level below to revert.
func (sc *Scans) commit() {
	sc.marks = sc.marks[:len(sc.marks)-1]
	if len(sc.marks) == 0 {
		sc.undo = sc.undo[:0]
	}
}

func (sc *Scans) set(key string, order uint64) {
	old, known := sc.firstFit[key]
	if len(sc.marks) > 0 {
		sc.undo = append(sc.undo, scanChange{key: key, order: old, known: known})
	}
	sc.firstFit[key] = order
}

// forget drops what the scans know: nodes may fit again.
func (sc *Scans) forget() {
	for key := range sc.firstFit {
		if len(sc.marks) > 0 {
			sc.undo = append(sc.undo, scanChange{key: key, order: sc.firstFit[key], known: true})
		}
		delete(sc.firstFit, key)
	}
}

// syncWith forgets what the scans know when the scheduler's cache was
// rebuilt since they were last used: the snapshot changed behind its back.
func (sc *Scans) syncWith(cache *preFilterCache) {
	cache.sync()
	if sc.resyncs != cache.resyncs {
		sc.forget()
		sc.resyncs = cache.resyncs
	}
}

// start is the index in nodes of the first node that pods of group may
// fit, as far as the scans know; from when they do not remember group.
func (sc *Scans) start(group *PodGroup, nodes []*snapshot.NodeInfo, from int) int {
	key := group.scanKey()
	if key == "" {
		return from
	}
	order, ok := sc.firstFit[key]
	if !ok {
		return from
	}
	return max(from, sort.Search(len(nodes), func(i int) bool { return nodes[i].Order() >= order }))
}

// record notes that no node of nodes before index next fits pods of group.
func (sc *Scans) record(group *PodGroup, nodes []*snapshot.NodeInfo, next int) {
	key := group.scanKey()
	if key == "" {
		return
	}
	order := uint64(math.MaxUint64)
	if next < len(nodes) {
		order = nodes[next].Order()
	}
	if known, ok := sc.firstFit[key]; !ok || order > known {
		sc.set(key, order)
	}
}

// scanKey is what decides whether a pod of the group fits a node for
// reasons that last, for the groups Scans remember; "" for the others.
func (g *PodGroup) scanKey() string {
	if !g.scanKeyKnown {
		g.scanKeyKnown = true
		if !g.interPod && len(g.first.Spec.ResourceClaims) == 0 {
			requests := g.info.Requests
			g.scanKeyValue = fitKey(g) + "/cpu=" + strconv.FormatInt(requests.MilliCPU, 10) + "/memory=" + strconv.FormatInt(requests.Memory, 10)
		}
	}
	return g.scanKeyValue
}
