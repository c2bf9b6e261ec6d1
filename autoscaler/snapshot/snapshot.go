// Package snapshot holds the state of one cluster that the engine simulates
// on: nodes with the pods on them, pending pods, node groups with their
// template nodes, DaemonSets, PodDisruptionBudgets and which controllers
// of pods exist.
//
// Simulations change a Snapshot inside a fork and throw the changes away:
//
//	snap.Fork()
//	defer snap.Revert()
//	_ = snap.RemoveNode(candidate)
//	// ... place the candidate's pods elsewhere with the simulator ...
//
// Forks are layers: Fork is O(1), a node is copied the first time a fork
// changes it, and Revert drops the layer. Forks nest; Commit folds the top
// layer into the one below. Nothing in this package knows Cluster API.
package snapshot

import (
	"cmp"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// Input is what a Snapshot is built from, as read from the cluster.
type Input struct {
	Nodes []*corev1.Node
	// Pods are the pods of the cluster. A pod with spec.nodeName is placed
	// on that node (dropped when the node is not in Nodes); one without is
	// pending. Pods that have finished are ignored.
	Pods []*corev1.Pod
	// CachedPods are more pods of the cluster, in the compact form a cache
	// keeps them in; they are treated as Pods are. They must not be
	// modified in place: a Pod is parsed once, by the first snapshot that
	// holds it.
	CachedPods           []*Pod
	DaemonSets           []*appsv1.DaemonSet
	PodDisruptionBudgets []*policyv1.PodDisruptionBudget
	// Namespaces give the labels that affinity terms' namespace selectors
	// match; they may be left out when no pod uses namespace selectors.
	Namespaces []*corev1.Namespace
	// PersistentVolumeClaims, PersistentVolumes and StorageClasses are what
	// the volume predicates read; CSINodes give nodes their CSI attach
	// limits. StorageError, when set, is why they could not be read: the
	// simulator then reports pods with claims as not evaluated instead of
	// guessing where they fit.
	PersistentVolumeClaims []*corev1.PersistentVolumeClaim
	PersistentVolumes      []*corev1.PersistentVolume
	StorageClasses         []*storagev1.StorageClass
	CSINodes               []*storagev1.CSINode
	StorageError           error
	// ResourceSlices, DeviceClasses, ResourceClaims and
	// ResourceClaimTemplates are what the simulator's DRA claim check
	// reads; node-local slices go to their nodes. DRAError, when set, is
	// why they could not be read: pods with resource claims are then
	// reported as not evaluated.
	ResourceSlices         []*resourceapi.ResourceSlice
	DeviceClasses          []*resourceapi.DeviceClass
	ResourceClaims         []*resourceapi.ResourceClaim
	ResourceClaimTemplates []*resourceapi.ResourceClaimTemplate
	DRAError               error
	// Controllers are the controllers whose pods scale-down may evict,
	// read as metadata: a pod whose controller is gone is not recreated
	// elsewhere. ControllersError, when set, is why they could not be
	// read: no such controller can be told to exist.
	Controllers      []*metav1.PartialObjectMetadata
	ControllersError error
	// NodeGroups are the autoscaled node groups; nodes are mapped to them
	// through their instances' node names.
	NodeGroups []nodegroups.NodeGroup
}

// Snapshot is the simulated state of one cluster. It is not safe for
// concurrent use.
type Snapshot struct {
	// layers[0] is the state read from the cluster; each fork adds one.
	layers []*layer
	// version identifies the content: every change takes a new value from
	// versions, Revert returns to the value at Fork.
	version, versions uint64
	// orders is the last order given to a node (see NodeInfo.order).
	orders uint64

	pending         []*corev1.Pod
	daemonSets      []*appsv1.DaemonSet
	pdbs            []*policyv1.PodDisruptionBudget
	namespaceLabels map[string]labels.Set
	storage         *Storage
	dra             *DRA
	controllers     sets.Set[types.UID]
	controllersErr  error

	groups      []nodegroups.NodeGroup
	groupByNode map[string]nodegroups.NodeGroup
	groupNodes  map[string][]string
	templates   map[string]*NodeInfo
}

// New builds a Snapshot. Node group templates are added with SetTemplate.
func New(in Input) *Snapshot {
	base := newLayer()
	s := &Snapshot{
		layers:          []*layer{base},
		daemonSets:      in.DaemonSets,
		pdbs:            in.PodDisruptionBudgets,
		namespaceLabels: make(map[string]labels.Set, len(in.Namespaces)),
		storage:         newStorage(&in),
		dra:             newDRA(&in),
		controllers:     make(sets.Set[types.UID], len(in.Controllers)),
		controllersErr:  in.ControllersError,
		groups:          in.NodeGroups,
		groupByNode:     map[string]nodegroups.NodeGroup{},
		groupNodes:      map[string][]string{},
		templates:       map[string]*NodeInfo{},
	}
	for _, node := range in.Nodes {
		if _, exists := base.nodes[node.Name]; exists {
			continue
		}
		info := NewNodeInfo(node)
		info.order = s.nextOrder()
		base.nodes[node.Name] = info
		base.added = append(base.added, node.Name)
	}
	for _, csiNode := range in.CSINodes {
		if node, ok := base.nodes[csiNode.Name]; ok {
			node.attachLimits = attachLimitsOf(csiNode)
		}
	}
	var withSlices []*NodeInfo
	for _, slice := range in.ResourceSlices {
		if node, ok := base.nodes[LocalSliceNode(slice)]; ok {
			if len(node.resourceSlices) == 0 {
				withSlices = append(withSlices, node)
			}
			node.resourceSlices = append(node.resourceSlices, slice)
		}
	}
	for _, node := range withSlices {
		node.countDevices()
	}
	parser := newParser()
	for _, pod := range in.Pods {
		switch {
		case finished(pod.Status.Phase):
		case pod.Spec.NodeName == "":
			s.pending = append(s.pending, pod)
		default:
			s.place(base, parser, NewPod(pod))
		}
	}
	for _, pod := range in.CachedPods {
		switch {
		case pod.Finished():
		case pod.NodeName == "":
			// Scale-up reads whole pods; pending pods are few.
			s.pending = append(s.pending, pod.Full())
		default:
			s.place(base, parser, pod)
		}
	}
	for _, controller := range in.Controllers {
		s.controllers.Insert(controller.UID)
	}
	for _, namespace := range in.Namespaces {
		s.namespaceLabels[namespace.Name] = labels.Set(namespace.Labels)
	}
	for _, group := range in.NodeGroups {
		for _, instance := range group.Instances() {
			if _, ok := base.nodes[instance.NodeName]; ok {
				s.groupByNode[instance.NodeName] = group
				s.groupNodes[group.ID()] = append(s.groupNodes[group.ID()], instance.NodeName)
			}
		}
	}
	return s
}

// place adds a bound pod of the input to its node, unless the node is not
// in the snapshot.
func (s *Snapshot) place(base *layer, parser *parser, pod *Pod) {
	if node, ok := base.nodes[pod.NodeName]; ok {
		node.addPod(parser.parse(pod))
	}
}

// Fork starts a layer of changes that Revert drops or Commit keeps.
func (s *Snapshot) Fork() {
	l := newLayer()
	l.forkVersion = s.version
	s.layers = append(s.layers, l)
}

// Branch returns a snapshot that shows what s shows now and changes apart
// from it, in a fork of its own, so that simulations on several goroutines
// can start from one state: a branch writes nothing that s or another
// branch holds. s must not change while its branches are in use, and a
// branch must not be reverted or committed below the fork it starts in.
func (s *Snapshot) Branch() *Snapshot {
	// The lists of the shared layers, built now: a branch that read them
	// first would write them.
	s.NodeInfos()
	branch := *s
	// Clipped: the branch's forks append to an array of its own.
	branch.layers = slices.Clip(s.layers)
	branch.Fork()
	return &branch
}

// Revert drops the changes made since the last Fork. It does nothing when
// there is no fork.
func (s *Snapshot) Revert() {
	if len(s.layers) == 1 {
		return
	}
	s.version = s.top().forkVersion
	s.layers = s.layers[:len(s.layers)-1]
}

// Commit keeps the changes made since the last Fork in the layer below, so
// that the next Revert drops them together with that layer's. It does
// nothing when there is no fork.
func (s *Snapshot) Commit() {
	if len(s.layers) == 1 {
		return
	}
	top := s.layers[len(s.layers)-1]
	s.layers = s.layers[:len(s.layers)-1]
	if top.unchanged() {
		return
	}
	below := s.layers[len(s.layers)-1]
	isBase := len(s.layers) == 1
	// The top layer's list is the list of the merged layer, unless a node
	// that the top layer added takes back the place of one the layer below
	// removed.
	keepList := top.list != nil
	for name := range top.deleted {
		if i := slices.Index(below.added, name); i >= 0 {
			below.added = slices.Delete(below.added, i, i+1)
		} else if !isBase {
			below.deleted[name] = true
		}
		delete(below.nodes, name)
	}
	for name, info := range top.nodes {
		below.nodes[name] = info
	}
	for _, name := range top.added {
		if below.deleted[name] {
			delete(below.deleted, name)
			hidden, _ := s.find(name, len(s.layers)-2)
			below.nodes[name].order = hidden.order
			keepList = false
		} else {
			below.added = append(below.added, name)
		}
	}
	below.list = nil
	if keepList {
		below.list = top.list
	}
}

// Version identifies the nodes and pods of the snapshot: it changes with
// every change and is never reused, except that Revert returns to the
// version the snapshot had at Fork. Derived state that records the version
// it was computed at can tell whether it is still valid.
func (s *Snapshot) Version() uint64 { return s.version }

func (s *Snapshot) changed() {
	s.versions++
	s.version = s.versions
}

// NodeInfos are the nodes in a stable order: the input order, then added
// nodes in the order they were added. Do not modify the slice.
func (s *Snapshot) NodeInfos() []*NodeInfo { return s.list(len(s.layers) - 1) }

// NodeInfo returns the node with the given name, or nil.
func (s *Snapshot) NodeInfo(name string) *NodeInfo {
	info, _ := s.find(name, len(s.layers)-1)
	return info
}

// PodsOn returns the pods on the named node, none when the node is not in
// the snapshot. Outside forks they are the pods read from the cluster.
func (s *Snapshot) PodsOn(nodeName string) []*Pod {
	info := s.NodeInfo(nodeName)
	if info == nil {
		return nil
	}
	pods := make([]*Pod, 0, len(info.pods))
	for _, pod := range info.pods {
		pods = append(pods, pod.Pod)
	}
	return pods
}

// AddNode adds a node with the pods already on it; the snapshot takes
// ownership of info.
func (s *Snapshot) AddNode(info *NodeInfo) error {
	if s.NodeInfo(info.Name()) != nil {
		return fmt.Errorf("node %s is already in the snapshot", info.Name())
	}
	top := s.top()
	top.nodes[info.Name()] = info
	if top.deleted[info.Name()] {
		// Back in the place of the node this layer removed.
		delete(top.deleted, info.Name())
		hidden, _ := s.find(info.Name(), len(s.layers)-2)
		info.order = hidden.order
		if top.list != nil {
			top.list = slices.Insert(top.list, position(top.list, info.order), info)
		}
	} else {
		info.order = s.nextOrder()
		top.added = append(top.added, info.Name())
		if top.list != nil {
			top.list = append(top.list, info)
		}
	}
	s.changed()
	return nil
}

// RemoveNode removes a node and the pods on it.
func (s *Snapshot) RemoveNode(name string) error {
	info := s.NodeInfo(name)
	if info == nil {
		return fmt.Errorf("node %s is not in the snapshot", name)
	}
	top := s.top()
	delete(top.nodes, name)
	if i := slices.Index(top.added, name); i >= 0 {
		top.added = slices.Delete(top.added, i, i+1)
	} else if len(s.layers) > 1 {
		top.deleted[name] = true
	}
	if top.list != nil {
		i := position(top.list, info.order)
		top.list = slices.Delete(top.list, i, i+1)
	}
	s.changed()
	return nil
}

// AddPod places a pod on a node.
func (s *Snapshot) AddPod(pod *PodInfo, nodeName string) error {
	info := s.writable(nodeName)
	if info == nil {
		return fmt.Errorf("cannot place pod %s/%s: node %s is not in the snapshot", pod.Pod.Namespace, pod.Pod.Name, nodeName)
	}
	info.addPod(pod)
	s.changed()
	return nil
}

// RemovePod removes a pod from a node.
func (s *Snapshot) RemovePod(namespace, name, nodeName string) error {
	info := s.NodeInfo(nodeName)
	if info == nil {
		return fmt.Errorf("cannot remove pod %s/%s: node %s is not in the snapshot", namespace, name, nodeName)
	}
	if !slices.ContainsFunc(info.pods, func(p *PodInfo) bool { return p.Pod.Name == name && p.Pod.Namespace == namespace }) {
		return fmt.Errorf("pod %s/%s is not on node %s", namespace, name, nodeName)
	}
	s.writable(nodeName).removePod(namespace, name)
	s.changed()
	return nil
}

// PendingPods are the pods of the input that had no node. Placing them in
// a simulation does not change this list.
func (s *Snapshot) PendingPods() []*corev1.Pod { return s.pending }

// DaemonSets of the cluster.
func (s *Snapshot) DaemonSets() []*appsv1.DaemonSet { return s.daemonSets }

// PodDisruptionBudgets of the cluster.
func (s *Snapshot) PodDisruptionBudgets() []*policyv1.PodDisruptionBudget { return s.pdbs }

// Storage is what the snapshot knows of the cluster's volumes.
func (s *Snapshot) Storage() *Storage { return s.storage }

// DRA is what the snapshot knows of the cluster's DRA objects.
func (s *Snapshot) DRA() *DRA { return s.dra }

// ControllerExists tells whether the input's controllers hold one with
// the given UID, which an owner reference names; the error is why they
// could not be read.
func (s *Snapshot) ControllerExists(uid types.UID) (bool, error) {
	if s.controllersErr != nil {
		return false, s.controllersErr
	}
	return s.controllers.Has(uid), nil
}

// NamespaceLabels returns the labels of a namespace, nil when unknown.
func (s *Snapshot) NamespaceLabels(namespace string) labels.Set { return s.namespaceLabels[namespace] }

// NodeGroups are the autoscaled node groups.
func (s *Snapshot) NodeGroups() []nodegroups.NodeGroup { return s.groups }

// NodeGroupOf returns the node group of a node of the input, or nil when
// the node is not autoscaled (control plane, unmanaged nodes).
func (s *Snapshot) NodeGroupOf(nodeName string) nodegroups.NodeGroup { return s.groupByNode[nodeName] }

// RegisteredNodes are the names of the input's nodes that belong to a group.
func (s *Snapshot) RegisteredNodes(groupID string) []string { return s.groupNodes[groupID] }

// SetTemplate records the node a new member of the group would become,
// with the DaemonSet pods that would run on it.
func (s *Snapshot) SetTemplate(groupID string, template *NodeInfo) {
	s.templates[groupID] = template
}

// Template returns the template of a group, or nil when it has none.
func (s *Snapshot) Template(groupID string) *NodeInfo { return s.templates[groupID] }

// layer is one level of changes. nodes holds the node infos this layer
// added or changed (copied on write); deleted the names it removed that a
// lower layer has; added the names it introduced, in order.
type layer struct {
	nodes   map[string]*NodeInfo
	deleted map[string]bool
	added   []string
	// list caches the visible nodes once the layer has changes; changes
	// patch it rather than rebuild it, which would cost every fork O(nodes).
	list []*NodeInfo
	// forkVersion is the snapshot's version when the layer was forked.
	forkVersion uint64
}

func newLayer() *layer {
	return &layer{nodes: map[string]*NodeInfo{}, deleted: map[string]bool{}}
}

// unchanged tells whether the layer shows exactly the nodes of the one below.
func (l *layer) unchanged() bool {
	return len(l.nodes) == 0 && len(l.deleted) == 0 && len(l.added) == 0
}

func (s *Snapshot) top() *layer { return s.layers[len(s.layers)-1] }

// find looks a node up from layer i down and returns the layer that owns it.
func (s *Snapshot) find(name string, i int) (*NodeInfo, int) {
	for ; i >= 0; i-- {
		l := s.layers[i]
		if info, ok := l.nodes[name]; ok {
			return info, i
		}
		if l.deleted[name] {
			return nil, -1
		}
	}
	return nil, -1
}

// writable returns the top layer's own copy of a node, copying it first.
func (s *Snapshot) writable(name string) *NodeInfo {
	info, owner := s.find(name, len(s.layers)-1)
	if info == nil || owner == len(s.layers)-1 {
		return info
	}
	top := s.top()
	info = info.clone()
	top.nodes[name] = info
	if top.list != nil {
		top.list[position(top.list, info.order)] = info
	}
	return info
}

// list returns the visible nodes of layer i. A layer without changes shows
// the list of the one below; the others build their own from it once.
func (s *Snapshot) list(i int) []*NodeInfo {
	l := s.layers[i]
	if l.list != nil {
		return l.list
	}
	var parent []*NodeInfo
	if i > 0 {
		parent = s.list(i - 1)
		if l.unchanged() {
			// Not cached: the layer's first change must not patch the
			// parent's list.
			return parent
		}
	}
	// The parent's list without the removed nodes, copied in one pass: a
	// scale-down candidate's fork removes one node from thousands.
	removed := make([]int, 0, len(l.deleted))
	for name := range l.deleted {
		hidden, _ := s.find(name, i-1)
		removed = append(removed, position(parent, hidden.order))
	}
	slices.Sort(removed)
	list := make([]*NodeInfo, 0, len(parent)-len(removed)+len(l.added))
	from := 0
	for _, j := range removed {
		list = append(list, parent[from:j]...)
		from = j + 1
	}
	list = append(list, parent[from:]...)
	for name, info := range l.nodes {
		if !l.deleted[name] && i > 0 && s.hasNode(name, i-1) {
			list[position(list, info.order)] = info
		}
	}
	for _, name := range l.added {
		list = append(list, l.nodes[name])
	}
	l.list = list
	return list
}

// hasNode tells whether layer i shows the named node.
func (s *Snapshot) hasNode(name string, i int) bool {
	info, _ := s.find(name, i)
	return info != nil
}

func (s *Snapshot) nextOrder() uint64 {
	s.orders++
	return s.orders
}

// position returns the index of the node with the given order in a list,
// which is sorted by order.
func position(list []*NodeInfo, order uint64) int {
	i, _ := slices.BinarySearchFunc(list, order, func(info *NodeInfo, order uint64) int {
		return cmp.Compare(info.order, order)
	})
	return i
}
