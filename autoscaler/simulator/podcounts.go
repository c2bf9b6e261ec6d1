// The pod counts state: for one part of a pod-group signature (see
// statePart), the counts per topology domain that required pod affinity,
// anti-affinity and hard topology spread check a node against. They are
// computed from the whole snapshot in one pass when the pre-filter cache
// has none up to date, then kept up to date change by change; a deeper
// fork level copies a state before changing it.

package simulator

import (
	"encoding/binary"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// statePart says which inter-pod counts a podState keeps. What a group's
// own terms need depends on its terms, not on its labels; what other pods'
// anti-affinity needs depends on its namespace and labels only. Kept apart,
// pods with other labels but the same terms, such as spreads of many apps,
// share the first, and pods with the same labels share the second.
type statePart uint8

const (
	// termsPart counts for the group's own affinity, anti-affinity and
	// spread terms (see termsSignature).
	termsPart statePart = iota
	// labelsPart counts the placed pods whose required anti-affinity terms
	// match the group (see labelsSignature).
	labelsPart
	partCount
)

// podState is what one part of the inter-pod predicates needs about the
// pod groups of one signature: counts per topology domain derived from the
// snapshot, computed up front like kube-scheduler's PreFilter and kept up
// to date as the Scheduler places pods and adds nodes.
type podState struct {
	part statePart
	// info is the first group's; what the part depends on is every
	// group's of the signature.
	info *snapshot.PodInfo
	// nodeAffinity decides which nodes count for spreading.
	nodeAffinity nodeaffinity.RequiredNodeAffinity
	spread       []spreadConstraint

	// affinityCounts counts, per topology domain, pods matching all of the
	// group's required affinity terms; antiAffinityCounts pods matching any
	// of its anti-affinity terms.
	affinityCounts     map[topologyPair]int
	antiAffinityCounts map[topologyPair]int
	// existingAntiAffinity counts, per topology key and value, placed pods
	// whose anti-affinity terms match the group: the keys are few, so a
	// node is checked by its values for them.
	existingAntiAffinity map[string]map[string]int
	// matches remembers which terms pods of an identity match; it depends
	// on nothing else and is shared by copies.
	matches map[*snapshot.Identity]podMatch
	// level is the fork level that owns the state; a deeper level copies
	// it before changing it. synced is how many of the pre-filter cache's
	// changes the counts reflect.
	level, synced int
}

type topologyPair struct{ key, value string }

type spreadConstraint struct {
	maxSkew           int
	minDomains        int
	topologyKey       string
	selector          labels.Selector
	honorNodeAffinity bool
	honorNodeTaints   bool
	domains           domainCounts
}

func newPodState(info *snapshot.PodInfo, part statePart, level int) *podState {
	pod := info.Pod
	state := &podState{part: part, info: info, level: level}
	if part == labelsPart {
		return state
	}
	state.nodeAffinity = nodeaffinity.GetRequiredNodeAffinity(pod.Full())
	state.matches = map[*snapshot.Identity]podMatch{}
	for i := range pod.Spec.TopologySpreadConstraints {
		constraint := &pod.Spec.TopologySpreadConstraints[i]
		if constraint.WhenUnsatisfiable != corev1.DoNotSchedule {
			continue
		}
		selector := spreadSelector(pod, constraint)
		spread := spreadConstraint{
			maxSkew:           int(constraint.MaxSkew),
			minDomains:        1,
			topologyKey:       constraint.TopologyKey,
			selector:          selector,
			honorNodeAffinity: constraint.NodeAffinityPolicy == nil || *constraint.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
			honorNodeTaints:   constraint.NodeTaintsPolicy != nil && *constraint.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
		}
		if constraint.MinDomains != nil {
			spread.minDomains = int(*constraint.MinDomains)
		}
		state.spread = append(state.spread, spread)
	}
	return state
}

// spreadSelector adds the matchLabelKeys values of the pod to the selector,
// as kube-scheduler does.
func spreadSelector(pod *snapshot.Pod, constraint *corev1.TopologySpreadConstraint) labels.Selector {
	selector, err := metav1.LabelSelectorAsSelector(constraint.LabelSelector)
	if err != nil {
		return labels.Nothing()
	}
	for _, key := range constraint.MatchLabelKeys {
		value, ok := pod.Labels[key]
		if !ok {
			continue
		}
		requirement, err := labels.NewRequirement(key, selection.Equals, []string{value})
		if err != nil {
			return labels.Nothing()
		}
		selector = selector.Add(*requirement)
	}
	return selector
}

// hasOwnTerms tells whether the group's own affinity terms or spread
// constraints need counts.
func (st *podState) hasOwnTerms() bool {
	return len(st.info.RequiredAffinityTerms) > 0 || len(st.info.RequiredAntiAffinityTerms) > 0 || len(st.spread) > 0
}

// needsCounts tells whether the part has counts to keep.
func (st *podState) needsCounts(existingAntiAffinityPods int) bool {
	if st.part == labelsPart {
		return existingAntiAffinityPods > 0
	}
	return st.hasOwnTerms()
}

// selfTerms is how the pods of a group match their own terms, which their
// labels decide: groups sharing a terms state may differ there.
type selfTerms struct {
	// spread is 1 for each hard spread constraint whose selector the pods
	// match.
	spread []int
	// affine is true when the pods match all their own affinity terms.
	affine bool
}

// selfTermsOf tells how pod, of a group of the state's terms signature,
// matches the terms.
func (st *podState) selfTermsOf(snap *snapshot.Snapshot, pod *snapshot.Pod) *selfTerms {
	self := &selfTerms{
		spread: make([]int, len(st.spread)),
		affine: matchesAllTerms(snap, st.info.RequiredAffinityTerms, pod),
	}
	for i := range st.spread {
		if st.spread[i].selector.Matches(labels.Set(pod.Labels)) {
			self.spread[i] = 1
		}
	}
	return self
}

// clone returns a copy owned by another fork level.
func (st *podState) clone(level int) *podState {
	copied := *st
	copied.level = level
	copied.affinityCounts = maps.Clone(st.affinityCounts)
	copied.antiAffinityCounts = maps.Clone(st.antiAffinityCounts)
	if st.existingAntiAffinity != nil {
		copied.existingAntiAffinity = make(map[string]map[string]int, len(st.existingAntiAffinity))
		for key, counts := range st.existingAntiAffinity {
			copied.existingAntiAffinity[key] = maps.Clone(counts)
		}
	}
	copied.spread = slices.Clone(st.spread)
	for i := range copied.spread {
		copied.spread[i].domains = st.spread[i].domains.clone()
	}
	return &copied
}

// computeCounts derives the inter-pod counts of states from the whole
// snapshot, in one pass over the pods for all of them.
func computeCounts(logger klog.Logger, snap *snapshot.Snapshot, antiAffinityPods []placedPod, states []*podState) {
	var withOwnTerms []*podState
	for _, st := range states {
		if st.part == labelsPart {
			st.existingAntiAffinity = map[string]map[string]int{}
			for _, placed := range antiAffinityPods {
				st.countExistingAntiAffinity(snap, placed.pod, placed.node, 1)
			}
			continue
		}
		st.affinityCounts = map[topologyPair]int{}
		st.antiAffinityCounts = map[topologyPair]int{}
		for i := range st.spread {
			st.spread[i].domains = newDomainCounts()
		}
		if st.hasOwnTerms() {
			withOwnTerms = append(withOwnTerms, st)
		}
	}
	if len(withOwnTerms) > 0 {
		eligible := make([]spreadEligibility, len(withOwnTerms))
		// The states whose terms the pods of an identity match, found once
		// per identity: most pods matter to none of the states.
		counting := map[*snapshot.Identity][]int{}
		for _, nodeInfo := range snap.NodeInfos() {
			node := nodeInfo.Node()
			for i, st := range withOwnTerms {
				eligible[i] = st.registerDomains(logger, node)
			}
			for _, pod := range nodeInfo.Pods() {
				states, known := counting[pod.Identity]
				if !known {
					for i, st := range withOwnTerms {
						if st.match(snap, pod).any() {
							states = append(states, i)
						}
					}
					counting[pod.Identity] = states
				}
				for _, i := range states {
					withOwnTerms[i].countPod(snap, pod, node, eligible[i], 1)
				}
			}
		}
	}
}

// addNode accounts for a node and the pods on it.
func (st *podState) addNode(logger klog.Logger, snap *snapshot.Snapshot, node *corev1.Node, pods []*snapshot.PodInfo) {
	if !st.hasOwnTerms() {
		return
	}
	eligible := st.registerDomains(logger, node)
	for _, pod := range pods {
		st.countPod(snap, pod, node, eligible, 1)
	}
}

// removeNode undoes addNode.
func (st *podState) removeNode(logger klog.Logger, snap *snapshot.Snapshot, node *corev1.Node, pods []*snapshot.PodInfo) {
	if !st.hasOwnTerms() {
		return
	}
	eligible := st.spreadEligibility(logger, node)
	for _, pod := range pods {
		st.countPod(snap, pod, node, eligible, -1)
	}
	for i := range st.spread {
		if st.spread[i].counts(eligible) {
			st.spread[i].domains.removeNode(node.Labels[st.spread[i].topologyKey])
		}
	}
}

// registerDomains adds the node's spread domains, with no pods yet, for the
// constraints the node counts for, and tells which those are.
func (st *podState) registerDomains(logger klog.Logger, node *corev1.Node) spreadEligibility {
	eligible := st.spreadEligibility(logger, node)
	for i := range st.spread {
		if st.spread[i].counts(eligible) {
			st.spread[i].domains.addNode(node.Labels[st.spread[i].topologyKey])
		}
	}
	return eligible
}

// countPod accounts for a pod placed on node (delta 1) or taken away
// (delta -1), except for its own anti-affinity terms (see
// countExistingAntiAffinity).
func (st *podState) countPod(snap *snapshot.Snapshot, pod *snapshot.PodInfo, node *corev1.Node, eligible spreadEligibility, delta int) {
	if !st.hasOwnTerms() {
		return
	}
	info := st.info
	match := st.match(snap, pod)
	if match.allAffinityTerms {
		for i := range info.RequiredAffinityTerms {
			countDomain(st.affinityCounts, node, info.RequiredAffinityTerms[i].TopologyKey, delta)
		}
	}
	for i := range info.RequiredAntiAffinityTerms {
		if match.antiAffinityTerms[i] {
			countDomain(st.antiAffinityCounts, node, info.RequiredAntiAffinityTerms[i].TopologyKey, delta)
		}
	}
	for i := range st.spread {
		// Terminating pods do not count; looked at last, as reading the
		// pod is what costs most here.
		if match.spreadSelectors[i] && st.spread[i].counts(eligible) && pod.Pod.DeletionTimestamp == nil {
			st.spread[i].domains.add(node.Labels[st.spread[i].topologyKey], delta)
		}
	}
}

// podMatch says which of a state's terms a pod matches.
type podMatch struct {
	// allAffinityTerms is true when there are affinity terms and the pod
	// matches them all.
	allAffinityTerms  bool
	antiAffinityTerms []bool
	spreadSelectors   []bool
}

// any tells whether the pod counts for any of the state's terms.
func (m podMatch) any() bool {
	return m.allAffinityTerms || slices.Contains(m.antiAffinityTerms, true) || slices.Contains(m.spreadSelectors, true)
}

// match tells which terms of the state pod matches, remembered per
// identity: replicas share the answer.
func (st *podState) match(snap *snapshot.Snapshot, pod *snapshot.PodInfo) podMatch {
	if m, ok := st.matches[pod.Identity]; ok {
		return m
	}
	info := st.info
	m := podMatch{
		allAffinityTerms:  len(info.RequiredAffinityTerms) > 0 && matchesAllTerms(snap, info.RequiredAffinityTerms, pod.Pod),
		antiAffinityTerms: make([]bool, len(info.RequiredAntiAffinityTerms)),
		spreadSelectors:   make([]bool, len(st.spread)),
	}
	for i := range info.RequiredAntiAffinityTerms {
		m.antiAffinityTerms[i] = info.RequiredAntiAffinityTerms[i].Matches(pod.Pod, snap.NamespaceLabels(pod.Pod.Namespace))
	}
	if pod.Pod.Namespace == info.Pod.Namespace {
		podLabels := labels.Set(pod.Pod.Labels)
		for i := range st.spread {
			m.spreadSelectors[i] = st.spread[i].selector.Matches(podLabels)
		}
	}
	st.matches[pod.Identity] = m
	return m
}

// countChangedAntiAffinity accounts for the anti-affinity terms of the
// pods a change placed, added or removed.
func (st *podState) countChangedAntiAffinity(snap *snapshot.Snapshot, c change) {
	switch {
	case !c.antiAffinity:
	case c.pod != nil:
		st.countExistingAntiAffinity(snap, c.pod, c.node, 1)
	case c.removed:
		for _, pod := range c.pods {
			st.countExistingAntiAffinity(snap, pod, c.node, -1)
		}
	default:
		for _, pod := range c.pods {
			st.countExistingAntiAffinity(snap, pod, c.node, 1)
		}
	}
}

// countExistingAntiAffinity accounts for the anti-affinity terms of a pod
// on node that keep the group away from its domains (delta 1), or for the
// pod being taken away (delta -1).
func (st *podState) countExistingAntiAffinity(snap *snapshot.Snapshot, existing *snapshot.PodInfo, node *corev1.Node, delta int) {
	if len(existing.RequiredAntiAffinityTerms) == 0 {
		return
	}
	incoming := st.info.Pod
	for i := range existing.RequiredAntiAffinityTerms {
		term := &existing.RequiredAntiAffinityTerms[i]
		value, ok := node.Labels[term.TopologyKey]
		if !ok || !term.Matches(incoming, snap.NamespaceLabels(incoming.Namespace)) {
			continue
		}
		counts := st.existingAntiAffinity[term.TopologyKey]
		if counts == nil {
			counts = map[string]int{}
			st.existingAntiAffinity[term.TopologyKey] = counts
		}
		if counts[value] += delta; counts[value] == 0 {
			delete(counts, value)
		}
		if len(counts) == 0 {
			delete(st.existingAntiAffinity, term.TopologyKey)
		}
	}
}

// countDomain changes the count of the node's domain for key. A domain
// whose count falls to zero goes, as if never counted: whether any domain
// is counted matters (see checkInterPodAffinity).
func countDomain(counts map[topologyPair]int, node *corev1.Node, key string, delta int) {
	value, ok := node.Labels[key]
	if !ok {
		return
	}
	pair := topologyPair{key: key, value: value}
	if counts[pair] += delta; counts[pair] == 0 {
		delete(counts, pair)
	}
}

func matchesAllTerms(snap *snapshot.Snapshot, terms []snapshot.AffinityTerm, pod *snapshot.Pod) bool {
	for i := range terms {
		if !terms[i].Matches(pod, snap.NamespaceLabels(pod.Namespace)) {
			return false
		}
	}
	return true
}

// spreadEligibility is what decides which spread constraints a node's
// domains count for, as kube-scheduler's PodTopologySpread decides it: a
// node counts for none unless it has every constraint's topology key, and
// then for each constraint whose inclusion policies it passes.
type spreadEligibility struct {
	keys, affinity, taints bool
}

// counts tells whether a node of that eligibility counts for the
// constraint.
func (c *spreadConstraint) counts(e spreadEligibility) bool {
	return e.keys && (e.affinity || !c.honorNodeAffinity) && (e.taints || !c.honorNodeTaints)
}

// spreadEligibility tells which of the group's spread constraints a node
// counts for.
func (st *podState) spreadEligibility(logger klog.Logger, node *corev1.Node) spreadEligibility {
	var honorAffinity, honorTaints bool
	for i := range st.spread {
		if _, ok := node.Labels[st.spread[i].topologyKey]; !ok {
			return spreadEligibility{}
		}
		honorAffinity = honorAffinity || st.spread[i].honorNodeAffinity
		honorTaints = honorTaints || st.spread[i].honorNodeTaints
	}
	e := spreadEligibility{keys: len(st.spread) > 0, affinity: true, taints: true}
	if honorAffinity {
		match, err := st.nodeAffinity.Match(node)
		e.affinity = err == nil && match
	}
	if honorTaints {
		_, untolerated := findUntoleratedTaint(logger, node, st.info.Pod.Spec.Tolerations)
		e.taints = !untolerated
	}
	return e
}

// podIndex is the placed pods of a snapshot by identity, and its nodes:
// the counts of terms that few identities match, such as the spread of one
// app, are found from those identities' pods, without a pass over all.
type podIndex struct {
	// at is the number of the cache's changes the snapshot had seen.
	at    int
	nodes []*corev1.Node
	// identities are in the order first seen, with their pods.
	identities []*snapshot.Identity
	pods       map[*snapshot.Identity][]indexedPod
	// byLabel are the identities with a label, key and value, in the
	// order first seen: a spread selector that requires a value of a key
	// matches no other identity.
	byLabel map[topologyPair][]*snapshot.Identity
	// domains are the spreadDomains of the nodes by domainsSignature,
	// found at the first state that needs them: every candidate's pods
	// of a scale-down pass are a new group, but spread alike. Branches
	// add to it at once.
	domains sync.Map
}

// spreadDomains is which spread constraints of a state each node of the
// index counts for, and the domains of the eligible nodes per constraint:
// what registerDomains finds node by node. It depends on the constraints'
// topology keys and inclusion policies and on the node selection and
// tolerations they honor, not on the pods they select.
type spreadDomains struct {
	// eligible is per node of the index; nil without spread constraints.
	eligible []spreadEligibility
	// nodes are, per constraint, the eligible nodes per domain.
	nodes []map[string]int
}

// eligibility is which constraints the node at position n counts for.
func (d *spreadDomains) eligibility(n int) spreadEligibility {
	if d.eligible == nil {
		return spreadEligibility{}
	}
	return d.eligible[n]
}

// domainsOf returns the spread domains of the index's nodes for the
// constraints of st, found once per domainsSignature.
func (ix *podIndex) domainsOf(logger klog.Logger, st *podState) *spreadDomains {
	if len(st.spread) == 0 {
		return &spreadDomains{}
	}
	key := domainsSignature(st)
	if found, ok := ix.domains.Load(key); ok {
		return found.(*spreadDomains)
	}
	d := &spreadDomains{eligible: make([]spreadEligibility, len(ix.nodes)), nodes: make([]map[string]int, len(st.spread))}
	for i := range d.nodes {
		d.nodes[i] = map[string]int{}
	}
	for n, node := range ix.nodes {
		eligible := st.spreadEligibility(logger, node)
		d.eligible[n] = eligible
		for i := range st.spread {
			if st.spread[i].counts(eligible) {
				d.nodes[i][node.Labels[st.spread[i].topologyKey]]++
			}
		}
	}
	// A branch that found them at the same time found the same.
	found, _ := ix.domains.LoadOrStore(key, d)
	return found.(*spreadDomains)
}

// domainsSignature is the same for states whose spread constraints count
// the same nodes in the same domains (see spreadEligibility): their
// topology keys and inclusion policies, in order, and the node selection
// and tolerations of the pods when a policy honors them.
func domainsSignature(st *podState) string {
	b := binary.AppendUvarint(nil, uint64(len(st.spread)))
	var honorAffinity, honorTaints bool
	for i := range st.spread {
		c := &st.spread[i]
		b = append(append(b, c.topologyKey...), 0, flag(c.honorNodeAffinity), flag(c.honorNodeTaints))
		honorAffinity = honorAffinity || c.honorNodeAffinity
		honorTaints = honorTaints || c.honorNodeTaints
	}
	spec := st.info.Pod.Spec
	if honorAffinity {
		b = snapshot.AppendLabels(append(b, 'n'), spec.NodeSelector)
		if spec.Affinity != nil && spec.Affinity.NodeAffinity != nil && spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			b = appendMarshalled(append(b, 'N'), spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		}
	}
	if honorTaints {
		for i := range spec.Tolerations {
			b = appendMarshalled(append(b, 't'), &spec.Tolerations[i])
		}
	}
	return string(b)
}

func flag(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// indexedPod is a pod and the position of its node in podIndex.nodes.
type indexedPod struct {
	pod  *snapshot.PodInfo
	node int
}

func newPodIndex(snap *snapshot.Snapshot, at int) *podIndex {
	nodeInfos := snap.NodeInfos()
	ix := &podIndex{
		at: at, nodes: make([]*corev1.Node, len(nodeInfos)),
		pods: map[*snapshot.Identity][]indexedPod{}, byLabel: map[topologyPair][]*snapshot.Identity{},
	}
	for i, nodeInfo := range nodeInfos {
		ix.nodes[i] = nodeInfo.Node()
		for _, pod := range nodeInfo.Pods() {
			pods, seen := ix.pods[pod.Identity]
			if !seen {
				ix.identities = append(ix.identities, pod.Identity)
				for key, value := range pod.Identity.Labels {
					label := topologyPair{key: key, value: value}
					ix.byLabel[label] = append(ix.byLabel[label], pod.Identity)
				}
			}
			ix.pods[pod.Identity] = append(pods, indexedPod{pod: pod, node: i})
		}
	}
	return ix
}

// computeCounts derives the counts of terms states from the pods of the
// index, as computeCounts would have from the snapshot then.
func (ix *podIndex) computeCounts(logger klog.Logger, snap *snapshot.Snapshot, states []*podState) {
	for _, st := range states {
		st.affinityCounts = map[topologyPair]int{}
		st.antiAffinityCounts = map[topologyPair]int{}
		for i := range st.spread {
			st.spread[i].domains = newDomainCounts()
		}
		if !st.hasOwnTerms() {
			continue
		}
		domains := ix.domainsOf(logger, st)
		for i := range st.spread {
			st.spread[i].domains = domainCountsOf(domains.nodes[i])
		}
		for _, identity := range ix.candidates(st) {
			pods := ix.pods[identity]
			if !st.match(snap, pods[0].pod).any() {
				continue
			}
			for _, placed := range pods {
				st.countPod(snap, placed.pod, ix.nodes[placed.node], domains.eligibility(placed.node), 1)
			}
		}
	}
}

// candidates are the identities whose pods may count for the terms of st:
// with spread constraints only, those with a label that each selector
// requires, found by label, each once; otherwise all.
func (ix *podIndex) candidates(st *podState) []*snapshot.Identity {
	if len(st.info.RequiredAffinityTerms) > 0 || len(st.info.RequiredAntiAffinityTerms) > 0 {
		return ix.identities
	}
	var found []*snapshot.Identity
	seen := map[*snapshot.Identity]bool{}
	for i := range st.spread {
		label, ok := requiredLabel(st.spread[i].selector)
		if !ok {
			return ix.identities
		}
		for _, identity := range ix.byLabel[label] {
			if !seen[identity] {
				seen[identity] = true
				found = append(found, identity)
			}
		}
	}
	return found
}

// requiredLabel is a label, key and value, that every set selector
// matches has; false when there is none.
func requiredLabel(selector labels.Selector) (topologyPair, bool) {
	requirements, selectable := selector.Requirements()
	if !selectable {
		return topologyPair{}, false
	}
	for _, r := range requirements {
		if op := r.Operator(); (op == selection.Equals || op == selection.DoubleEquals) && r.Values().Len() == 1 {
			return topologyPair{key: r.Key(), value: r.Values().UnsortedList()[0]}, true
		}
	}
	return topologyPair{}, false
}
