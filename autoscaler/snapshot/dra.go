package snapshot

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
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

// TemplateDevicesAnnotation, on the node a node group returns to scale from
// zero (nodegroups.NodeGroup.TemplateNode), says which node-local DRA
// devices a new node of the group would publish, as TemplateDevices.String
// formats them: "driver=count", e.g. "gpu.nvidia.com=2". The engine turns it
// into the template's ResourceSlice (TemplateDevices.ResourceSlices); real
// nodes never carry it, their slices are read.
const TemplateDevicesAnnotation = "autoscaling.cluster.x-k8s.io/template-devices"

// TemplateDeviceType is the "type" attribute of the devices of
// TemplateDevices, as the upstream Cluster API provider sets it and as
// GPU drivers such as NVIDIA's publish it for whole GPUs.
const TemplateDeviceType = "gpu"

// TemplateDevices describe the node-local DRA devices of a node that does
// not exist yet, the way the upstream Cluster API provider describes them
// from the dra-driver and gpu-count annotations: Count devices of Driver,
// with no attribute but their type. The zero value describes none.
type TemplateDevices struct {
	Driver string
	Count  int
}

// TemplateDevicesOf reads the DRA devices the template node of a group
// carries (TemplateDevicesAnnotation); the zero value when it carries
// none.
func TemplateDevicesOf(node *corev1.Node) (TemplateDevices, error) {
	value, ok := node.Annotations[TemplateDevicesAnnotation]
	if !ok {
		return TemplateDevices{}, nil
	}
	devices, err := ParseTemplateDevices(value)
	if err != nil {
		return TemplateDevices{}, fmt.Errorf("annotation %s: %w", TemplateDevicesAnnotation, err)
	}
	return devices, nil
}

// ParseTemplateDevices parses the value of TemplateDevicesAnnotation and
// validates it (TemplateDevices.Validate).
func ParseTemplateDevices(value string) (TemplateDevices, error) {
	driver, count, found := strings.Cut(value, "=")
	if !found {
		return TemplateDevices{}, fmt.Errorf("%q is not driver=count", value)
	}
	n, err := strconv.Atoi(count)
	if err != nil {
		return TemplateDevices{}, fmt.Errorf("the device count of %s, %q, is not a count", driver, count)
	}
	devices := TemplateDevices{Driver: driver, Count: n}
	if err := devices.Validate(); err != nil {
		return TemplateDevices{}, err
	}
	return devices, nil
}

// Validate says why devices cannot be published: a driver name that is not
// a DNS subdomain (as ResourceSlices require), or a count that is not
// between 1 and the number of devices one ResourceSlice can hold.
func (d TemplateDevices) Validate() error {
	if errs := validation.IsDNS1123Subdomain(d.Driver); len(errs) > 0 {
		return fmt.Errorf("the driver name %q is not a DNS subdomain: %s", d.Driver, strings.Join(errs, "; "))
	}
	if d.Count < 1 || d.Count > resourceapi.ResourceSliceMaxDevices {
		return fmt.Errorf("%d devices of %s: a node publishes between 1 and %d in one ResourceSlice", d.Count, d.Driver, resourceapi.ResourceSliceMaxDevices)
	}
	return nil
}

// String formats devices as TemplateDevicesAnnotation does.
func (d TemplateDevices) String() string { return d.Driver + "=" + strconv.Itoa(d.Count) }

// ResourceSlices returns the slice of the devices local to node: one pool
// named after the node, devices named gpu-0, gpu-1... with the "type"
// attribute TemplateDeviceType, as the upstream Cluster API provider
// builds them. None when devices is the zero value.
func (d TemplateDevices) ResourceSlices(node string) []*resourceapi.ResourceSlice {
	if d.Count == 0 {
		return nil
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + d.Driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   d.Driver,
			NodeName: &node,
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  make([]resourceapi.Device, d.Count),
		},
	}
	for i := range slice.Spec.Devices {
		slice.Spec.Devices[i] = resourceapi.Device{
			Name: "gpu-" + strconv.Itoa(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"type": {StringValue: ptr.To(TemplateDeviceType)},
			},
		}
	}
	return []*resourceapi.ResourceSlice{slice}
}
