// The DRA claim check: whether a pod's ResourceClaims can be allocated
// on a node, with the allocator kube-scheduler's DynamicResources plugin
// uses (k8s.io/dynamic-resource-allocation/structured), and the devices
// the simulation allocated so far. This file is the one owner of "do this
// pod's claims fit this node".

package simulator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Reasons of the claim check, worded like kube-scheduler's
// DynamicResources plugin where it has words for them.
const (
	ReasonClaimNotAvailable    = "resourceclaim not available on the node"
	reasonClaimsNotEvaluated   = "resource claims not evaluated: %v"
	reasonCannotAllocateFormat = "cannot allocate resource claim %s: %s"
	reasonNoMatchingDevices    = "the node's devices cannot satisfy it"
)

// ReasonClaimsNotEvaluated is the reason of pods with resource claims when
// the DRA objects could not be read: they are reported, not guessed.
func ReasonClaimsNotEvaluated(err error) string {
	return fmt.Sprintf(reasonClaimsNotEvaluated, err)
}

// ReasonCannotAllocate is the reason of a pod whose claims, named, cannot
// be allocated on a node, and why.
func ReasonCannotAllocate(claims []string, why string) string {
	return fmt.Sprintf(reasonCannotAllocateFormat, strings.Join(claims, ", "), why)
}

// draFeatures are the allocator features that Kubernetes 1.36 enables by
// default and the simulation supports. Consumable capacity (devices
// shared by several claims) and binding conditions are left out: the
// simulation treats every allocated device as taken by its claim.
var draFeatures = structured.Features{
	AdminAccess:          true,
	PrioritizedList:      true,
	PartitionableDevices: true,
	DeviceTaints:         true,
}

// celCacheSize is the number of compiled CEL selectors kept, as
// kube-scheduler keeps.
const celCacheSize = 10

// draIndex holds the allocations of resource claims, as read from the
// cluster and as the simulation makes them, with an undo log per fork
// level so that the scheduler's Fork and Revert cover them.
type draIndex struct {
	// ctx carries the logger of the allocator, which takes a context.
	ctx      context.Context //nolint:containedctx // the allocator's logger and cancellation, for the scheduler's life
	dra      *snapshot.DRA
	celCache *cel.Cache
	// allocations are the allocated claims, by namespace/name.
	allocations map[string]*resourceapi.AllocationResult
	// undo records the previous allocation of each change made since the
	// first fork; marks are its length at each fork.
	undo  []allocationChange
	marks []int
	// generation changes with every change of allocations.
	generation uint64
	// allocated are the devices the allocations hold, kept with them;
	// holders counts the allocations of each, in case the cluster's claims
	// disagree.
	allocated sets.Set[structured.DeviceID]
	holders   map[structured.DeviceID]int
	// onNode are the claims allocated on the devices of each node
	// (allocationNode), which removing the node releases.
	onNode map[string]sets.Set[string]
}

type allocationChange struct {
	key      string
	previous *resourceapi.AllocationResult
}

func newDRAIndex(ctx context.Context, dra *snapshot.DRA) *draIndex {
	idx := &draIndex{
		ctx: ctx, dra: dra,
		celCache:    cel.NewCache(celCacheSize, cel.Features{}),
		allocations: map[string]*resourceapi.AllocationResult{},
		generation:  1,
		allocated:   sets.New[structured.DeviceID](),
		holders:     map[structured.DeviceID]int{},
		onNode:      map[string]sets.Set[string]{},
	}
	for key, claim := range dra.Claims() {
		if claim.Status.Allocation != nil {
			idx.apply(key, claim.Status.Allocation)
		}
	}
	return idx
}

// allocatePlaced allocates, on their nodes, the claims of the pods of
// snap that are on nodes and whose claims are not allocated: pending pods
// that an earlier step of the loop placed where they will run (the nodes
// they wait for, the room of a buffer), so that other pods do not take
// their devices. Pods bound by kube-scheduler have their claims allocated
// already. Clusters without claims or claim templates pay nothing.
func (idx *draIndex) allocatePlaced(snap *snapshot.Snapshot) {
	if idx.dra.Err() != nil || (len(idx.dra.Claims()) == 0 && !idx.dra.HasTemplates()) {
		return
	}
	for _, nodeInfo := range snap.NodeInfos() {
		for _, info := range nodeInfo.Pods() {
			if len(info.Pod.Spec.ResourceClaims) == 0 {
				continue
			}
			claims := idx.resolve(info.Pod.Full())
			if claims.check(nodeInfo) == "" {
				claims.place(nodeInfo)
			}
		}
	}
}

// branch returns a copy of the index for a scheduler on a branch of the
// snapshot, without forks: the branch's forks start from its allocations.
func (idx *draIndex) branch() *draIndex {
	onNode := make(map[string]sets.Set[string], len(idx.onNode))
	for node, keys := range idx.onNode {
		onNode[node] = keys.Clone()
	}
	return &draIndex{
		ctx: idx.ctx, dra: idx.dra, celCache: idx.celCache,
		allocations: maps.Clone(idx.allocations), generation: idx.generation,
		allocated: idx.allocated.Clone(), holders: maps.Clone(idx.holders), onNode: onNode,
	}
}

func (idx *draIndex) fork() { idx.marks = append(idx.marks, len(idx.undo)) }

func (idx *draIndex) revert() {
	if len(idx.marks) == 0 {
		return
	}
	mark := idx.marks[len(idx.marks)-1]
	idx.marks = idx.marks[:len(idx.marks)-1]
	for i := len(idx.undo) - 1; i >= mark; i-- {
		idx.apply(idx.undo[i].key, idx.undo[i].previous)
	}
	if len(idx.undo) > mark {
		idx.generation++
	}
	idx.undo = idx.undo[:mark]
}

// commit keeps the changes since the last fork in the level below.
func (idx *draIndex) commit() {
	if len(idx.marks) == 0 {
		return
	}
	idx.marks = idx.marks[:len(idx.marks)-1]
	if len(idx.marks) == 0 {
		idx.undo = idx.undo[:0]
	}
}

// set allocates the claim key, or releases it when allocation is nil.
func (idx *draIndex) set(key string, allocation *resourceapi.AllocationResult) {
	if len(idx.marks) > 0 {
		idx.undo = append(idx.undo, allocationChange{key: key, previous: idx.allocations[key]})
	}
	idx.apply(key, allocation)
	idx.generation++
}

// apply sets the allocation of the claim key, nil to release it, and
// updates the allocated devices.
func (idx *draIndex) apply(key string, allocation *resourceapi.AllocationResult) {
	if previous := idx.allocations[key]; previous != nil {
		if node := allocationNode(previous); node != "" {
			idx.onNode[node].Delete(key)
		}
		forEachAllocatedDevice(previous, func(id structured.DeviceID) {
			if idx.holders[id]--; idx.holders[id] <= 0 {
				delete(idx.holders, id)
				idx.allocated.Delete(id)
			}
		})
	}
	if allocation == nil {
		delete(idx.allocations, key)
		return
	}
	idx.allocations[key] = allocation
	if node := allocationNode(allocation); node != "" {
		if idx.onNode[node] == nil {
			idx.onNode[node] = sets.New[string]()
		}
		idx.onNode[node].Insert(key)
	}
	forEachAllocatedDevice(allocation, func(id structured.DeviceID) {
		idx.holders[id]++
		idx.allocated.Insert(id)
	})
}

// forEachAllocatedDevice calls f with the devices an allocation takes, as
// kube-scheduler counts them: those with admin access are not taken.
func forEachAllocatedDevice(allocation *resourceapi.AllocationResult, f func(structured.DeviceID)) {
	for _, result := range allocation.Devices.Results {
		if result.AdminAccess != nil && *result.AdminAccess {
			continue
		}
		f(structured.MakeDeviceID(result.Driver, result.Pool, result.Device))
	}
}

// releaseNode releases the claims allocated on devices of the named node,
// which the simulation removes: its pods move, and their claims are
// allocated anew where they go.
func (idx *draIndex) releaseNode(name string) {
	for _, key := range sets.List(idx.onNode[name]) {
		idx.set(key, nil)
	}
}

// allocationNode is the one node whose local devices an allocation holds,
// as kube-scheduler records it (a node selector on metadata.name); "" when
// its devices are not local to one node.
func allocationNode(allocation *resourceapi.AllocationResult) string {
	selector := allocation.NodeSelector
	if selector == nil || len(selector.NodeSelectorTerms) != 1 {
		return ""
	}
	term := selector.NodeSelectorTerms[0]
	if len(term.MatchExpressions) != 0 || len(term.MatchFields) != 1 {
		return ""
	}
	field := term.MatchFields[0]
	if field.Key != "metadata.name" || field.Operator != corev1.NodeSelectorOpIn || len(field.Values) != 1 {
		return ""
	}
	return field.Values[0]
}

// allocatedState is the allocator's view of the devices in use.
// The allocator reads the set while it allocates, and keeps nothing of it.
func (idx *draIndex) allocatedState() structured.AllocatedState {
	return structured.AllocatedState{
		AllocatedDevices:         idx.allocated,
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
}

// List and Get make the index the allocator's DeviceClassLister.
func (idx *draIndex) List() ([]*resourceapi.DeviceClass, error) { return idx.dra.Classes(), nil }

func (idx *draIndex) Get(name string) (*resourceapi.DeviceClass, error) {
	if class := idx.dra.Class(name); class != nil {
		return class, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

var _ structured.DeviceClassLister = &draIndex{}

// podClaims are the resource claims of a pod to be placed, resolved
// against the snapshot's DRA objects.
type podClaims struct {
	index *draIndex
	// unresolvable is why the pod fits no node whatever the node: a claim
	// or template missing, or DRA objects that could not be read.
	unresolvable string
	claims       []*resourceapi.ResourceClaim
	// last is the allocation the last check found, for placing the pod
	// there without allocating again.
	last lastAllocation
}

type lastAllocation struct {
	node       string
	generation uint64
	keys       []string
	results    []resourceapi.AllocationResult
}

// claimKey identifies a claim in the index.
func claimKey(claim *resourceapi.ResourceClaim) string { return claim.Namespace + "/" + claim.Name }

// resolve resolves the claims of a pod to be placed; nil when it has
// none. A claim from a template that the resource claim controller has not
// made yet is made here from the template, as the controller will.
func (idx *draIndex) resolve(pod *corev1.Pod) *podClaims {
	if len(pod.Spec.ResourceClaims) == 0 {
		return nil
	}
	pc := &podClaims{index: idx}
	if err := idx.dra.Err(); err != nil {
		pc.unresolvable = ReasonClaimsNotEvaluated(err)
		return pc
	}
	for _, ref := range pod.Spec.ResourceClaims {
		claim, reason := idx.claimOf(pod, ref)
		if reason != "" {
			pc.unresolvable = reason
			return pc
		}
		if claim != nil {
			pc.claims = append(pc.claims, claim)
		}
	}
	return pc
}

// claimOf finds the claim of one of a pod's spec.resourceClaims, or says
// why the pod cannot be scheduled without it; nil and "" when the pod
// needs no claim for it.
func (idx *draIndex) claimOf(pod *corev1.Pod, ref corev1.PodResourceClaim) (*resourceapi.ResourceClaim, string) {
	name := ref.ResourceClaimName
	if name == nil && ref.ResourceClaimTemplateName != nil {
		for _, status := range pod.Status.ResourceClaimStatuses {
			if status.Name != ref.Name {
				continue
			}
			if status.ResourceClaimName == nil {
				return nil, ""
			}
			name = status.ResourceClaimName
		}
		if name == nil {
			template := idx.dra.Template(pod.Namespace, *ref.ResourceClaimTemplateName)
			if template == nil {
				return nil, fmt.Sprintf("resourceclaimtemplate %q not found", *ref.ResourceClaimTemplateName)
			}
			claim := &resourceapi.ResourceClaim{Spec: template.Spec.Spec}
			claim.Namespace, claim.Name = pod.Namespace, pod.Name+"-"+ref.Name
			claim.UID = types.UID(string(pod.UID) + "-" + ref.Name)
			return claim, ""
		}
	}
	if name == nil {
		return nil, ""
	}
	claim := idx.dra.Claim(pod.Namespace, *name)
	switch {
	case claim == nil:
		return nil, fmt.Sprintf("resourceclaim %q not found", *name)
	case claim.DeletionTimestamp != nil:
		return nil, fmt.Sprintf("resourceclaim %q is being deleted", *name)
	}
	return claim, ""
}

// check tells why the claims cannot be allocated on nodeInfo; "" when
// they can. Claims already allocated fit only the nodes their allocation
// selects; the others must be allocated from the node's devices not yet
// allocated to other claims.
func (pc *podClaims) check(nodeInfo *snapshot.NodeInfo) string {
	if pc.unresolvable != "" {
		return pc.unresolvable
	}
	node := nodeInfo.Node()
	idx := pc.index
	var toAllocate []*resourceapi.ResourceClaim
	for _, claim := range pc.claims {
		allocation := idx.allocations[claimKey(claim)]
		if allocation == nil {
			toAllocate = append(toAllocate, claim)
			continue
		}
		if allocation.NodeSelector != nil {
			if match, err := nodeaffinity.NewLazyErrorNodeSelector(allocation.NodeSelector).Match(node); err != nil || !match {
				return ReasonClaimNotAvailable
			}
		}
	}
	if len(toAllocate) == 0 {
		pc.last = lastAllocation{node: node.Name, generation: idx.generation}
		return ""
	}
	names := make([]string, len(toAllocate))
	keys := make([]string, len(toAllocate))
	for i, claim := range toAllocate {
		names[i], keys[i] = claim.Name, claimKey(claim)
	}
	local := nodeInfo.ResourceSlices()
	if len(idx.dra.SharedSlices()) == 0 && needsDevices(toAllocate) && !idx.anyFree(local) {
		// No free device for the node: what the allocator would find,
		// without building one. Most nodes of most clusters have no
		// device, and nodes filled by the pods placed before have no free
		// one.
		return ReasonCannotAllocate(names, reasonNoMatchingDevices)
	}
	slices := make([]*resourceapi.ResourceSlice, 0, len(local)+len(idx.dra.SharedSlices()))
	slices = append(append(slices, local...), idx.dra.SharedSlices()...)
	allocator, err := structured.NewAllocator(idx.ctx, draFeatures, idx.allocatedState(), idx, slices, idx.celCache)
	if err != nil {
		return ReasonCannotAllocate(names, err.Error())
	}
	results, err := allocator.Allocate(idx.ctx, node, toAllocate)
	switch {
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return ReasonCannotAllocate(names, err.Error())
	case err != nil:
		return ReasonCannotAllocate(names, err.Error())
	case len(results) != len(toAllocate):
		return ReasonCannotAllocate(names, reasonNoMatchingDevices)
	}
	pc.last = lastAllocation{node: node.Name, generation: idx.generation, keys: keys, results: results}
	return ""
}

// anyFree tells whether the slices have a device that no claim holds.
func (idx *draIndex) anyFree(slices []*resourceapi.ResourceSlice) bool {
	for _, slice := range slices {
		for i := range slice.Spec.Devices {
			if !idx.allocated.Has(structured.MakeDeviceID(slice.Spec.Driver, slice.Spec.Pool.Name, slice.Spec.Devices[i].Name)) {
				return true
			}
		}
	}
	return false
}

// needsDevices tells whether some claim requests devices: every request
// asks for one at least.
func needsDevices(claims []*resourceapi.ResourceClaim) bool {
	for _, claim := range claims {
		if len(claim.Spec.Devices.Requests) > 0 {
			return true
		}
	}
	return false
}

// place records the allocation of the claims on nodeInfo, where check
// found that they fit: the devices are taken for the next pods.
func (pc *podClaims) place(nodeInfo *snapshot.NodeInfo) {
	if pc.last.node != nodeInfo.Name() || pc.last.generation != pc.index.generation {
		if pc.check(nodeInfo) != "" {
			return
		}
	}
	last := pc.last
	pc.last = lastAllocation{}
	for i, key := range last.keys {
		pc.index.set(key, &last.results[i])
	}
}
