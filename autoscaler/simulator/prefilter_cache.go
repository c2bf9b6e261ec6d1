// The Scheduler's pre-filter cache: per pod-group signature, the states
// that the inter-pod predicates need, derived from the snapshot like
// kube-scheduler's PreFilter state. The scheduler's own changes to the
// snapshot go through the cache, which notes them; a state catches up with
// them when next used. The cache is rebuilt when the snapshot changes
// behind its back, and saved and restored per fork level.

package simulator

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// preFilterCache keeps the states of the pod groups the scheduler looks
// at, one per part of their signature, so that groups with the same terms,
// or the same labels, share the counts derived from the snapshot, and so
// that each placement updates the counts instead of all being computed
// again.
type preFilterCache struct {
	// snap is the scheduler's snapshot, which the states are derived from.
	snap   *snapshot.Snapshot
	logger klog.Logger
	// version is the snapshot version that antiAffinityPods and changes
	// reflect.
	version uint64
	// antiAffinityPods are the placed pods with required anti-affinity,
	// which the states of the labels part count.
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
	// resyncs counts the times the cache was rebuilt: revert tells by it
	// whether changes still extends the changes it saved.
	resyncs int
	// forks saves the cache at each fork; len(forks) is the fork level.
	forks []savedCache
	// shared is, in a branch (branch), its first fork level: the states
	// of lower levels are shared with the cache it was branched from and
	// the other branches. A copy of one takes the branch's own matches,
	// by original in sharedMatches, which every fork of the branch adds
	// to as forks of the original add to its matches.
	shared        int
	sharedMatches map[*podState]map[*snapshot.Identity]podMatch
	// index is the placed pods by identity as they were after the first
	// index.at changes, built at the second computation of counts since
	// the last rebuild: the counts of a group's terms are then those of
	// the pods of the identities its terms match, caught up with the
	// changes since, instead of a pass over every pod of the cluster.
	// Saved and restored with the fork level it was built at, as the
	// changes it counts on are; read only, shared by branches.
	index *podIndex
	// fullPasses counts the computations over the whole snapshot since
	// the last rebuild.
	fullPasses int
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

// savedCache is the cache at a fork. Changes made after the fork are
// appended beyond the saved slice's length, so it stays what it was.
type savedCache struct {
	version          uint64
	antiAffinityPods []placedPod
	states, tracked  [partCount]partStates
	changes          []change
	lastAntiAffinity int
	resyncs          int
	index            *podIndex
}

// newPreFilterCache returns the cache of a scheduler working on snap.
func newPreFilterCache(logger klog.Logger, snap *snapshot.Snapshot) preFilterCache {
	c := preFilterCache{
		snap: snap, logger: logger,
		states:    newPartStates(),
		stateKeys: [partCount]map[*snapshot.PodInfo]*snapshot.PodInfo{{}, {}},
		keys:      map[string]*snapshot.PodInfo{},
	}
	c.resync()
	return c
}

// level is the fork level: the number of forks neither reverted nor
// committed.
func (c *preFilterCache) level() int { return len(c.forks) }

// fork saves the cache, up to date with the snapshot, for revert to
// restore.
func (c *preFilterCache) fork() {
	c.sync()
	c.forks = append(c.forks, savedCache{
		version: c.version, antiAffinityPods: c.antiAffinityPods,
		states: clonePartStates(c.states), tracked: clonePartStates(c.tracked),
		changes: c.changes, lastAntiAffinity: c.lastAntiAffinity, resyncs: c.resyncs,
		index: c.index,
	})
}

// branch returns a copy of the cache, up to date, for a scheduler on a
// branch of the snapshot (snapshot.Snapshot.Branch), one level deeper so
// that the states both hold are copied before either changes them. The
// slices are clipped: what the copy appends goes to arrays of its own.
func (c *preFilterCache) branch(snap *snapshot.Snapshot) preFilterCache {
	c.sync()
	b := preFilterCache{
		snap: snap, logger: c.logger, version: c.version,
		antiAffinityPods: slices.Clip(c.antiAffinityPods),
		states:           clonePartStates(c.states), tracked: clonePartStates(c.tracked),
		stateKeys: [partCount]map[*snapshot.PodInfo]*snapshot.PodInfo{
			maps.Clone(c.stateKeys[termsPart]), maps.Clone(c.stateKeys[labelsPart]),
		},
		keys:    maps.Clone(c.keys),
		changes: slices.Clip(c.changes), lastAntiAffinity: c.lastAntiAffinity, resyncs: c.resyncs,
		forks: slices.Clip(c.forks), sharedMatches: map[*podState]map[*snapshot.Identity]podMatch{},
		index: c.index, fullPasses: c.fullPasses,
	}
	b.fork()
	b.shared = b.level()
	return b
}

// own returns a copy of st for the current fork level to change.
func (c *preFilterCache) own(st *podState) *podState {
	copied := st.clone(c.level())
	if st.level < c.shared && st.matches != nil {
		// Other branches read the original's.
		matches, ok := c.sharedMatches[st]
		if !ok {
			matches = maps.Clone(st.matches)
			c.sharedMatches[st] = matches
		}
		copied.matches = matches
	}
	return copied
}

// revert restores the cache saved by the last fork, which must be there,
// as the snapshot reverts to what it was then.
func (c *preFilterCache) revert() {
	saved := c.forks[len(c.forks)-1]
	c.forks = c.forks[:len(c.forks)-1]
	c.version, c.antiAffinityPods = saved.version, saved.antiAffinityPods
	c.states, c.tracked = saved.states, saved.tracked
	if c.resyncs == saved.resyncs {
		// The saved changes, in the array the fork may have grown: the
		// next fork appends without growing it again.
		c.changes = c.changes[:len(saved.changes)]
	} else {
		// A rebuild since the fork started another array.
		c.changes = saved.changes
	}
	c.lastAntiAffinity, c.resyncs, c.index = saved.lastAntiAffinity, saved.resyncs, saved.index
}

// commit keeps the states of the last fork, which must be there, in the
// level below, as the snapshot keeps its changes.
func (c *preFilterCache) commit() {
	c.forks = c.forks[:len(c.forks)-1]
	// The states of the committed level now belong to the one below; no
	// saved cache refers to them.
	for _, states := range c.states {
		for _, st := range states {
			// Written only when it changes: a branch's lower levels hold
			// states that other branches read.
			if st.level > c.level() {
				st.level = c.level()
			}
		}
	}
}

// prepare computes the counts of the states of groups in one pass over the
// snapshot.
func (c *preFilterCache) prepare(groups []*PodGroup) {
	c.sync()
	var stale []*podState
	for _, group := range groups {
		for _, part := range parts {
			if st := c.staleState(c.stateKey(group, part), part); st != nil {
				stale = append(stale, st)
			}
		}
	}
	c.computeCounts(stale)
}

// statesOf returns the states of group's terms and labels, up to date with
// the snapshot.
func (c *preFilterCache) statesOf(group *PodGroup) (terms, labels *podState) {
	c.sync()
	return c.partState(group, termsPart), c.partState(group, labelsPart)
}

// partState returns a part of the group's state, up to date.
func (c *preFilterCache) partState(group *PodGroup, part statePart) *podState {
	key := c.stateKey(group, part)
	if st, ok := c.tracked[part][key]; ok {
		if st.synced < len(c.changes) {
			st = c.catchUp(st)
		}
		return st
	}
	if st := c.staleState(key, part); st != nil {
		c.computeCounts([]*podState{st})
		return st
	}
	return c.states[part][key]
}

// stateKey returns the key of the state of a part of group's signature.
func (c *preFilterCache) stateKey(group *PodGroup, part statePart) *snapshot.PodInfo {
	if key, ok := c.stateKeys[part][group.info]; ok {
		return key
	}
	sig := signature(part, group.info.Pod)
	key, ok := c.keys[sig]
	if !ok {
		key = group.info
		c.keys[sig] = key
	}
	c.stateKeys[part][group.info] = key
	return key
}

// catchUp applies to a tracked state the changes it has not seen, as
// kube-scheduler's PreFilter extensions would have one by one, and returns
// it, copied first when a lower fork level owns it.
func (c *preFilterCache) catchUp(st *podState) *podState {
	if st.part == labelsPart && c.lastAntiAffinity <= st.synced {
		// Only pods with anti-affinity change the labels part.
		return st
	}
	if st.level != c.level() {
		st = c.own(st)
		c.states[st.part][st.info], c.tracked[st.part][st.info] = st, st
	}
	for _, ch := range c.changes[st.synced:] {
		if st.part == labelsPart {
			st.countChangedAntiAffinity(c.snap, ch)
			continue
		}
		switch {
		case ch.pod != nil:
			st.countPod(c.snap, ch.pod, ch.node, st.spreadEligibility(c.logger, ch.node), 1)
		case ch.removed:
			st.removeNode(c.logger, c.snap, ch.node, ch.pods)
		default:
			st.addNode(c.logger, c.snap, ch.node, ch.pods)
		}
	}
	st.synced = len(c.changes)
	return st
}

// staleState returns the state of a part under key, owned by the current
// fork level, when its counts must be computed; nil when it is up to date.
func (c *preFilterCache) staleState(key *snapshot.PodInfo, part statePart) *podState {
	st, ok := c.states[part][key]
	if !ok {
		st = newPodState(key, part, c.level())
		c.states[part][key] = st
	}
	if _, upToDate := c.tracked[part][key]; upToDate || !st.needsCounts(len(c.antiAffinityPods)) {
		return nil
	}
	if st.level != c.level() {
		st = c.own(st)
		c.states[part][key] = st
	}
	return st
}

// computeCounts computes the counts of states from the snapshot, and
// tracks the states from then on.
func (c *preFilterCache) computeCounts(states []*podState) {
	if len(states) == 0 {
		return
	}
	// Only the terms of groups need a pass over the pods; the labels part
	// counts the few pods with anti-affinity.
	passes := slices.ContainsFunc(states, func(st *podState) bool { return st.part == termsPart && st.hasOwnTerms() })
	if passes && c.index == nil && c.fullPasses > 0 {
		c.index = newPodIndex(c.snap, len(c.changes))
	}
	if !passes || c.index == nil {
		if passes {
			c.fullPasses++
		}
		computeCounts(c.logger, c.snap, c.antiAffinityPods, states)
		for _, st := range states {
			st.synced = len(c.changes)
			c.tracked[st.part][st.info] = st
		}
		return
	}
	labelsStates := slices.DeleteFunc(slices.Clone(states), func(st *podState) bool { return st.part != labelsPart })
	computeCounts(c.logger, c.snap, c.antiAffinityPods, labelsStates)
	for _, st := range labelsStates {
		st.synced = len(c.changes)
		c.tracked[st.part][st.info] = st
	}
	termsStates := slices.DeleteFunc(slices.Clone(states), func(st *podState) bool { return st.part != termsPart })
	c.index.computeCounts(c.logger, c.snap, termsStates)
	for _, st := range termsStates {
		// Counted as of the index, then caught up; new at this level,
		// not copied.
		st.synced = c.index.at
		c.tracked[st.part][st.info] = c.catchUp(st)
	}
}

// place adds a pod to the snapshot.
func (c *preFilterCache) place(pod *snapshot.PodInfo, node *corev1.Node) {
	c.sync()
	// The node exists: the caller found it in this snapshot.
	_ = c.snap.AddPod(pod, node.Name)
	antiAffinity := len(pod.RequiredAntiAffinityTerms) > 0
	if antiAffinity {
		c.antiAffinityPods = append(c.antiAffinityPods, placedPod{pod: pod, node: node})
	}
	c.record(change{node: node, pod: pod, antiAffinity: antiAffinity})
}

// addNode adds a node, with the pods on it, to the snapshot.
func (c *preFilterCache) addNode(nodeInfo *snapshot.NodeInfo) error {
	c.sync()
	if err := c.snap.AddNode(nodeInfo); err != nil {
		return err
	}
	node := nodeInfo.Node()
	for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
		c.antiAffinityPods = append(c.antiAffinityPods, placedPod{pod: pod, node: node})
	}
	c.record(change{node: node, pods: nodeInfo.Pods(), antiAffinity: len(nodeInfo.PodsWithRequiredAntiAffinity()) > 0})
	return nil
}

// removeNode removes a node, with the pods on it, from the snapshot.
func (c *preFilterCache) removeNode(name string) error {
	c.sync()
	nodeInfo := c.snap.NodeInfo(name)
	if err := c.snap.RemoveNode(name); err != nil {
		return err
	}
	antiAffinity := len(nodeInfo.PodsWithRequiredAntiAffinity()) > 0
	if antiAffinity {
		// A copy: a saved fork may share the slice.
		c.antiAffinityPods = slices.DeleteFunc(slices.Clone(c.antiAffinityPods), func(placed placedPod) bool {
			return placed.node.Name == name
		})
	}
	c.record(change{node: nodeInfo.Node(), pods: nodeInfo.Pods(), removed: true, antiAffinity: antiAffinity})
	return nil
}

// record notes a change made to the snapshot through the cache, for the
// tracked states to catch up with.
func (c *preFilterCache) record(ch change) {
	c.changes = append(c.changes, ch)
	if ch.antiAffinity {
		c.lastAntiAffinity = len(c.changes)
	}
	c.version = c.snap.Version()
}

// forget drops the states of groups that only the scheduler knew, so that
// a scheduler used for many simulations does not keep, nor update, the
// states of every group it ever saw. The counted terms states stay, under
// their signature: the next group of the same terms, such as the pods of
// the next scale-down candidate of the same app, catches up with the
// changes since instead of counting every pod again. There is one per
// set of terms, such as an app's spread, not one per group.
func (c *preFilterCache) forget(groups []*PodGroup) {
	for _, group := range groups {
		for _, part := range parts {
			key, ok := c.stateKeys[part][group.info]
			if !ok {
				continue
			}
			delete(c.stateKeys[part], group.info)
			if _, counted := c.tracked[part][key]; counted && part == termsPart {
				continue
			}
			if key == group.info {
				// Groups of the signature that remain compute it again.
				delete(c.states[part], key)
				delete(c.tracked[part], key)
				delete(c.keys, signature(part, key.Pod))
			}
		}
	}
}

// sync rebuilds the cache when the snapshot changed behind its back. The
// changes made through the cache call it first: recording one takes the
// snapshot's version as the cache's, which would hide an earlier change.
func (c *preFilterCache) sync() {
	if c.version != c.snap.Version() {
		c.resync()
	}
}

// resync rebuilds the cache: states are computed again when next used.
func (c *preFilterCache) resync() {
	// New ones: a saved fork may share the old ones.
	c.tracked, c.changes, c.lastAntiAffinity = newPartStates(), nil, 0
	c.resyncs++
	c.index, c.fullPasses = nil, 0
	c.antiAffinityPods = nil
	for _, nodeInfo := range c.snap.NodeInfos() {
		for _, pod := range nodeInfo.PodsWithRequiredAntiAffinity() {
			c.antiAffinityPods = append(c.antiAffinityPods, placedPod{pod: pod, node: nodeInfo.Node()})
		}
	}
	c.version = c.snap.Version()
}
