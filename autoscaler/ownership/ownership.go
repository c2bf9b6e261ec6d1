// Package ownership records, in the annotations the autoscaler leaves
// behind (the delete-machine mark on a Machine, the deletion taint and the
// cordon on a Node), which ClusterAutoscaler placed them, and tells an
// engine which of them it may take back. Two ClusterAutoscalers of one
// Cluster, such as the one deleted and the one created in its place, or
// the owner before and after a switch, never take back each other's.
package ownership

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// separator ends the UID in a value. UIDs never contain it, nor do the
// times that versions before recorded alone.
const separator = "/"

// Stamp is the value of such an annotation: the UID of the
// ClusterAutoscaler that placed it, then what it records besides, such as
// when, e.g. "6b2b7c1e-…/2026-12-06T18:00:00Z".
func Stamp(placer types.UID, detail string) string {
	return string(placer) + separator + detail
}

// Parse splits a value made by Stamp. A value without a UID, as versions
// before wrote, has placer "".
func Parse(value string) (placer types.UID, detail string) {
	uid, rest, found := strings.Cut(value, separator)
	if !found {
		return "", value
	}
	return types.UID(uid), rest
}

// PlacedBy tells whether the value was placed by the ClusterAutoscaler of
// uid, or by a version that recorded no ClusterAutoscaler: the autoscaler
// ran one engine per Cluster then, and what it left is the current
// owner's, so that an upgrade loses nothing.
func PlacedBy(value string, uid types.UID) bool {
	placer, _ := Parse(value)
	return placer == "" || placer == uid
}

// ClusterAutoscalers finds ClusterAutoscalers by UID.
type ClusterAutoscalers interface {
	// Find returns the namespace and name of the ClusterAutoscaler of uid;
	// found is false when none exists.
	Find(ctx context.Context, uid types.UID) (key types.NamespacedName, found bool, err error)
}

// Owner is the ClusterAutoscaler on whose behalf an engine marks Machines
// and taints Nodes.
type Owner struct {
	// UID is the ClusterAutoscaler's.
	UID types.UID
	// ClusterAutoscalers tells which other ClusterAutoscalers exist; when
	// nil, every other one is taken to exist, and nothing it placed is
	// ever taken back.
	ClusterAutoscalers ClusterAutoscalers
}

// Remembering returns the owner, looking each other ClusterAutoscaler up
// once until forget is called: a loop asks about the same few for every
// node or Machine that carries their marks, and a lookup may list them
// all. Call forget when they may have come or gone since, as each loop
// starts. Lookups that fail are not remembered.
func (o Owner) Remembering() (owner Owner, forget func()) {
	if o.ClusterAutoscalers == nil {
		return o, func() {}
	}
	remembered := &rememberedClusterAutoscalers{from: o.ClusterAutoscalers, found: map[types.UID]lookup{}}
	o.ClusterAutoscalers = remembered
	return o, remembered.forget
}

type rememberedClusterAutoscalers struct {
	from ClusterAutoscalers
	// mu is held through a lookup, so that callers at once that ask for
	// the same UID look it up once.
	mu    sync.Mutex
	found map[types.UID]lookup
}

type lookup struct {
	key   types.NamespacedName
	found bool
}

func (r *rememberedClusterAutoscalers) Find(ctx context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.found[uid]; ok {
		return l.key, l.found, nil
	}
	key, found, err := r.from.Find(ctx, uid)
	if err != nil {
		return key, found, err
	}
	r.found[uid] = lookup{key: key, found: found}
	return key, found, nil
}

func (r *rememberedClusterAutoscalers) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.found)
}

// Stamp is the value of an annotation this owner places.
func (o Owner) Stamp(detail string) string { return Stamp(o.UID, detail) }

// Claim is how an owner stands to an annotation of the autoscaler's.
type Claim struct {
	// Placer is the UID the value names; "" when it names none.
	Placer types.UID
	// Orphaned is set when Placer names a ClusterAutoscaler that no
	// longer exists: nobody else will ever take it back, so the owner
	// adopts it.
	Orphaned bool
	// Another is set when Placer names another ClusterAutoscaler that
	// exists: its engine acts, and the annotation is its.
	Another bool
	// Holder names that ClusterAutoscaler, when Another and known.
	Holder types.NamespacedName
}

// Ours tells whether the owner may take the annotation back: it placed
// it, a version that recorded no ClusterAutoscaler did, or a
// ClusterAutoscaler that no longer exists did.
func (c Claim) Ours() bool { return !c.Another }

// PlacedBy says who placed the annotation, for messages.
func (c Claim) PlacedBy() string {
	switch {
	case c.Placer == "":
		return "a capi-autoscaler version that recorded no ClusterAutoscaler"
	case c.Holder.Name != "":
		return fmt.Sprintf("ClusterAutoscaler %s (UID %s)", c.Holder, c.Placer)
	case c.Orphaned:
		return fmt.Sprintf("ClusterAutoscaler UID %s, which no longer exists", c.Placer)
	default:
		return fmt.Sprintf("ClusterAutoscaler UID %s", c.Placer)
	}
}

// Claim says how the owner stands to an annotation's value. It looks up
// the ClusterAutoscaler the value names only when that is another one.
func (o Owner) Claim(ctx context.Context, value string) (Claim, error) {
	placer, _ := Parse(value)
	claim := Claim{Placer: placer}
	if PlacedBy(value, o.UID) {
		return claim, nil
	}
	if o.ClusterAutoscalers == nil {
		claim.Another = true
		return claim, nil
	}
	key, found, err := o.ClusterAutoscalers.Find(ctx, placer)
	if err != nil {
		return Claim{}, fmt.Errorf("looking for ClusterAutoscaler UID %s, which placed an annotation: %w", placer, err)
	}
	claim.Orphaned, claim.Another, claim.Holder = !found, found, key
	return claim, nil
}
