package snapshot

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// DRA is what the snapshot knows of the cluster's Dynamic Resource
// Allocation objects, for the simulator's claim check: device classes,
// resource claims and claim templates, and the ResourceSlices that are not
// local to one node (those are on their NodeInfo). It is read-only.
type DRA struct {
	classes   map[string]*resourceapi.DeviceClass
	classList []*resourceapi.DeviceClass
	claims    map[string]*resourceapi.ResourceClaim
	templates map[string]*resourceapi.ResourceClaimTemplate
	shared    []*resourceapi.ResourceSlice
	// err is why the DRA objects could not be read.
	err error
}

func newDRA(in *Input) *DRA {
	d := &DRA{
		classes:   make(map[string]*resourceapi.DeviceClass, len(in.DeviceClasses)),
		classList: in.DeviceClasses,
		claims:    make(map[string]*resourceapi.ResourceClaim, len(in.ResourceClaims)),
		templates: make(map[string]*resourceapi.ResourceClaimTemplate, len(in.ResourceClaimTemplates)),
		err:       in.DRAError,
	}
	for _, class := range in.DeviceClasses {
		d.classes[class.Name] = class
	}
	for _, claim := range in.ResourceClaims {
		d.claims[claim.Namespace+"/"+claim.Name] = claim
	}
	for _, template := range in.ResourceClaimTemplates {
		d.templates[template.Namespace+"/"+template.Name] = template
	}
	for _, slice := range in.ResourceSlices {
		if LocalSliceNode(slice) == "" {
			d.shared = append(d.shared, slice)
		}
	}
	return d
}

// Err is why the DRA objects could not be read; nil when they were. Pods
// with resource claims cannot be evaluated without them.
func (d *DRA) Err() error { return d.err }

// Class returns the named device class, nil when there is none.
func (d *DRA) Class(name string) *resourceapi.DeviceClass { return d.classes[name] }

// Classes are all the device classes. Do not modify the slice.
func (d *DRA) Classes() []*resourceapi.DeviceClass { return d.classList }

// Claim returns the named resource claim, nil when there is none.
func (d *DRA) Claim(namespace, name string) *resourceapi.ResourceClaim {
	return d.claims[namespace+"/"+name]
}

// Claims are all the resource claims, keyed by namespace/name. Do not
// modify the map.
func (d *DRA) Claims() map[string]*resourceapi.ResourceClaim { return d.claims }

// Template returns the named resource claim template, nil when there is
// none.
func (d *DRA) Template(namespace, name string) *resourceapi.ResourceClaimTemplate {
	return d.templates[namespace+"/"+name]
}

// HasTemplates tells whether there are resource claim templates.
func (d *DRA) HasTemplates() bool { return len(d.templates) > 0 }

// SharedSlices are the ResourceSlices of devices that are not local to
// one node (network-attached, selected by node selector or for all
// nodes). Do not modify the slice.
func (d *DRA) SharedSlices() []*resourceapi.ResourceSlice { return d.shared }

// LocalSliceNode is the node whose local devices slice publishes; "" when
// they are not local to one node.
func LocalSliceNode(slice *resourceapi.ResourceSlice) string {
	if slice.Spec.NodeName == nil {
		return ""
	}
	return *slice.Spec.NodeName
}

// renameSlices returns copies of the node-local slices of node from,
// published for node to instead: node name, slice names and pool names are
// renamed so that the devices of the copy are told apart from those of
// the original by the allocator (devices are identified by driver, pool
// and name). Devices are not allocated in slices, only in claims, so the
// copies are unallocated.
func renameSlices(slices []*resourceapi.ResourceSlice, from, to string) []*resourceapi.ResourceSlice {
	if len(slices) == 0 {
		return nil
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(slices))
	for _, slice := range slices {
		copied := slice.DeepCopy()
		copied.Name = renamed(slice.Name, from, to)
		copied.UID = ""
		copied.ResourceVersion = ""
		copied.OwnerReferences = nil
		name := to
		copied.Spec.NodeName = &name
		copied.Spec.Pool.Name = renamed(slice.Spec.Pool.Name, from, to)
		out = append(out, copied)
	}
	return out
}

// renamed replaces the node name from in name by to, or appends to when
// name does not contain it.
func renamed(name, from, to string) string {
	if from != "" && strings.Contains(name, from) {
		return strings.ReplaceAll(name, from, to)
	}
	return name + "-" + to
}
