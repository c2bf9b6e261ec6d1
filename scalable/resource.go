// Package scalable puts the three kinds of Cluster API objects the autoscaler
// resizes, MachineDeployments, standalone MachineSets and MachinePools,
// behind one interface. Replicas are read and written through the /scale subresource
// with optimistic concurrency, so a concurrent writer is never overwritten.
package scalable

import (
	"context"
	"fmt"
	"strings"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/annotations"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/labels/format"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// Kinds of scalable resources.
const (
	KindMachineDeployment = "MachineDeployment"
	KindMachineSet        = "MachineSet"
	KindMachinePool       = "MachinePool"
)

// Resource is a MachineDeployment, a standalone MachineSet or a MachinePool
// that asks to be autoscaled. The getters describe the object as it was read; the methods
// taking a context talk to the API server.
type Resource interface {
	// ID is "Kind/namespace/name", e.g. "MachineDeployment/default/md-0".
	ID() string
	Kind() string
	Namespace() string
	Name() string
	ClusterName() string

	// MinSize and MaxSize come from the size annotations.
	MinSize() int
	MaxSize() int
	// Options are the per-group overrides from the autoscaling-options annotations.
	Options() nodegroups.GroupOptions
	// Replicas is spec.replicas as read.
	Replicas() int
	// Paused is true when the Cluster or the resource itself is paused.
	Paused() bool
	// Deleting is true when the resource is being deleted.
	Deleting() bool

	// Annotations are the resource's own annotations (capacity hints live there).
	Annotations() map[string]string
	// MachineTemplate is what new Machines are made from: labels,
	// annotations, taints, infrastructure template and failure domain.
	MachineTemplate() clusterv1.MachineTemplateSpec

	// Machines lists the Machines the resource owns, as Cluster API does:
	// matching its selector and controlled by it (for a MachineDeployment,
	// by one of its MachineSets). A MachinePool has Machines only when its
	// infrastructure provider supports MachinePool Machines.
	Machines(ctx context.Context) ([]*clusterv1.Machine, error)
	// ProviderIDs reads afresh the provider IDs of the instances the
	// infrastructure reports for a MachinePool (spec.providerIDList),
	// whether or not they have Machines. It returns nil for a
	// MachineDeployment or MachineSet, whose instances are all Machines.
	ProviderIDs(ctx context.Context) ([]string, error)
	// RolloutReason is non-empty while a MachineDeployment rolls out, when
	// lowering its replicas could remove Machines other than the marked ones.
	RolloutReason(ctx context.Context) (string, error)
	// UpdateReplicas reads the replicas through /scale, asks change for the
	// new value and writes it with the resourceVersion read. When another
	// writer got in between, it starts again from a fresh read, so neither
	// change is lost. A write that moves the replicas below MinSize or above
	// MaxSize is refused with an *OutOfBoundsError. It returns the replicas
	// written.
	UpdateReplicas(ctx context.Context, change func(current int) (int, error)) (int, error)
	// MarkMachineForDeletion sets the delete-machine annotation, so that
	// Cluster API removes this Machine first when the replicas go down.
	MarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error
	// UnmarkMachineForDeletion removes the delete-machine annotation.
	UnmarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error
}

// Options are what New needs besides the object.
type Options struct {
	// Client reads and writes Cluster API objects in the management cluster.
	Client client.Client
	// Cluster owns the resource; a paused Cluster pauses its resources. Required.
	Cluster *clusterv1.Cluster
	// Clock stamps deletion marks.
	Clock clock.PassiveClock
}

// New returns the Resource for a MachineDeployment, a MachineSet or a
// MachinePool. It fails
// with an *AnnotationError when the object's annotations are wrong. Callers
// decide whether the object asks to be autoscaled (HasSizeAnnotations) and
// whether a MachineSet is standalone (IsStandalone).
func New(obj client.Object, opts Options) (Resource, error) {
	r := &resource{client: opts.Client, clock: opts.Clock, obj: obj}
	switch o := obj.(type) {
	case *clusterv1.MachineDeployment:
		r.kind = KindMachineDeployment
		r.clusterName = o.Spec.ClusterName
		r.replicas = int(ptr.Deref(o.Spec.Replicas, 0))
		r.selector = o.Spec.Selector
		r.template = o.Spec.Template
	case *clusterv1.MachineSet:
		r.kind = KindMachineSet
		r.clusterName = o.Spec.ClusterName
		r.replicas = int(ptr.Deref(o.Spec.Replicas, 0))
		r.selector = o.Spec.Selector
		r.template = o.Spec.Template
	case *clusterv1.MachinePool:
		r.kind = KindMachinePool
		r.clusterName = o.Spec.ClusterName
		r.replicas = int(ptr.Deref(o.Spec.Replicas, 0))
		r.selector = machinePoolMachineSelector(o)
		r.template = o.Spec.Template
	default:
		return nil, fmt.Errorf("%T %s is not a MachineDeployment, a MachineSet or a MachinePool", obj, klog.KObj(obj))
	}
	if opts.Cluster == nil {
		return nil, fmt.Errorf("%s: the Cluster it belongs to is required", r.ID())
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.paused = annotations.IsPaused(opts.Cluster, obj)

	var err error
	if r.minSize, r.maxSize, err = sizeBounds(r.ID(), obj.GetAnnotations()); err != nil {
		return nil, err
	}
	if r.options, err = groupOptions(r.ID(), obj.GetAnnotations()); err != nil {
		return nil, err
	}
	return r, nil
}

// IsStandalone tells whether a MachineSet is a node group of its own, that is
// not controlled by a MachineDeployment (whose annotations it inherits).
func IsStandalone(ms *clusterv1.MachineSet) bool {
	owner := metav1.GetControllerOf(ms)
	if owner == nil || owner.Kind != KindMachineDeployment {
		return true
	}
	gv, err := schema.ParseGroupVersion(owner.APIVersion)
	return err != nil || gv.Group != clusterv1.GroupVersion.Group
}

// machinePoolMachineSelector selects the Machines the MachinePool controller
// creates for the instances of a pool, by the labels it gives them.
func machinePoolMachineSelector(mp *clusterv1.MachinePool) metav1.LabelSelector {
	return metav1.LabelSelector{MatchLabels: map[string]string{
		clusterv1.MachinePoolNameLabel: format.MustFormatValue(mp.Name),
		clusterv1.ClusterNameLabel:     mp.Spec.ClusterName,
	}}
}

// ID formats the ID of a scalable resource: kind/namespace/name.
func ID(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// ParseID splits an ID made by ID; ok is false for anything else.
func ParseID(id string) (kind, namespace, name string, ok bool) {
	kind, rest, _ := strings.Cut(id, "/")
	namespace, name, ok = strings.Cut(rest, "/")
	if !ok || kind == "" || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", "", false
	}
	return kind, namespace, name, true
}

// NotScalableError says why a resource refuses to change.
type NotScalableError struct {
	ID     string
	Reason string
}

func (e *NotScalableError) Error() string {
	return fmt.Sprintf("%s cannot be scaled: %s", e.ID, e.Reason)
}

// OutOfBoundsError refuses a size outside the node group's bounds.
type OutOfBoundsError struct {
	ID               string
	Current, Desired int
	MinSize, MaxSize int
}

func (e *OutOfBoundsError) Error() string {
	return fmt.Sprintf("%s: refusing to change replicas from %d to %d, outside the bounds [%d, %d] set by the %q and %q annotations",
		e.ID, e.Current, e.Desired, e.MinSize, e.MaxSize, MinSizeAnnotation, MaxSizeAnnotation)
}

type resource struct {
	client client.Client
	clock  clock.PassiveClock
	obj    client.Object

	kind        string
	clusterName string
	replicas    int
	selector    metav1.LabelSelector
	template    clusterv1.MachineTemplateSpec
	minSize     int
	maxSize     int
	options     nodegroups.GroupOptions
	paused      bool
}

var _ Resource = &resource{}

func (r *resource) ID() string                                     { return ID(r.kind, r.obj.GetNamespace(), r.obj.GetName()) }
func (r *resource) Kind() string                                   { return r.kind }
func (r *resource) Namespace() string                              { return r.obj.GetNamespace() }
func (r *resource) Name() string                                   { return r.obj.GetName() }
func (r *resource) ClusterName() string                            { return r.clusterName }
func (r *resource) MinSize() int                                   { return r.minSize }
func (r *resource) MaxSize() int                                   { return r.maxSize }
func (r *resource) Options() nodegroups.GroupOptions               { return r.options }
func (r *resource) Replicas() int                                  { return r.replicas }
func (r *resource) Paused() bool                                   { return r.paused }
func (r *resource) Deleting() bool                                 { return !r.obj.GetDeletionTimestamp().IsZero() }
func (r *resource) Annotations() map[string]string                 { return r.obj.GetAnnotations() }
func (r *resource) MachineTemplate() clusterv1.MachineTemplateSpec { return r.template }

func (r *resource) checkScalable() error {
	switch {
	case r.paused:
		return &NotScalableError{ID: r.ID(), Reason: fmt.Sprintf("paused (Cluster spec.paused or the %q annotation)", clusterv1.PausedAnnotation)}
	case r.Deleting():
		return &NotScalableError{ID: r.ID(), Reason: "being deleted"}
	}
	return nil
}

// checkBounds refuses to move the replicas out of the bounds. A resource
// already outside them may still move towards them.
func (r *resource) checkBounds(current, desired int) error {
	if desired > current && desired > r.maxSize || desired < current && desired < r.minSize {
		return &OutOfBoundsError{ID: r.ID(), Current: current, Desired: desired, MinSize: r.minSize, MaxSize: r.maxSize}
	}
	return nil
}

func (r *resource) UpdateReplicas(ctx context.Context, change func(current int) (int, error)) (int, error) {
	if err := r.checkScalable(); err != nil {
		return 0, err
	}
	log := ctrl.LoggerFrom(ctx).WithValues(r.kind, klog.KObj(r.obj))
	var written int
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		scale := &autoscalingv1.Scale{}
		if err := r.client.SubResource("scale").Get(ctx, r.obj, scale); err != nil {
			return fmt.Errorf("reading the replicas of %s: %w", r.ID(), err)
		}
		current := int(scale.Spec.Replicas)
		desired, err := change(current)
		if err != nil {
			return err
		}
		if err := r.checkBounds(current, desired); err != nil {
			return err
		}
		if desired == current {
			written = current
			return nil
		}
		scale.Spec.Replicas = int32(desired)
		if err := r.client.SubResource("scale").Update(ctx, r.obj, client.WithSubResourceBody(scale)); err != nil {
			log.V(4).Info("Writing replicas failed", "from", current, "to", desired, "err", err.Error())
			return fmt.Errorf("writing the replicas of %s: %w", r.ID(), err)
		}
		log.V(2).Info("Changed replicas", "from", current, "to", desired)
		written = desired
		return nil
	})
	return written, err
}

func (r *resource) Machines(ctx context.Context) ([]*clusterv1.Machine, error) {
	owners, err := r.machineOwners(ctx)
	if err != nil {
		return nil, err
	}
	selector, err := metav1.LabelSelectorAsSelector(&r.selector)
	if err != nil {
		return nil, fmt.Errorf("%s has an invalid selector: %w", r.ID(), err)
	}
	machines := &clusterv1.MachineList{}
	if err := r.client.List(ctx, machines, client.InNamespace(r.Namespace()), client.MatchingLabelsSelector{Selector: selector}); err != nil {
		return nil, fmt.Errorf("listing the Machines of %s: %w", r.ID(), err)
	}
	var owned []*clusterv1.Machine
	for i := range machines.Items {
		machine := &machines.Items[i]
		if owner := metav1.GetControllerOf(machine); owner != nil && owners.Has(owner.UID) {
			owned = append(owned, machine)
		}
	}
	return owned, nil
}

// machineOwners returns the UIDs of the objects whose Machines belong to the
// resource: the MachineSets of a MachineDeployment, or else the resource
// itself.
func (r *resource) machineOwners(ctx context.Context) (sets.Set[types.UID], error) {
	if r.kind != KindMachineDeployment {
		return sets.New(r.obj.GetUID()), nil
	}
	machineSets, err := r.machineSets(ctx)
	if err != nil {
		return nil, err
	}
	owners := sets.New[types.UID]()
	for _, ms := range machineSets {
		owners.Insert(ms.UID)
	}
	return owners, nil
}

// machineSets lists the MachineSets a MachineDeployment controls.
func (r *resource) machineSets(ctx context.Context) ([]*clusterv1.MachineSet, error) {
	list := &clusterv1.MachineSetList{}
	if err := r.client.List(ctx, list, client.InNamespace(r.Namespace()),
		client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: r.Name()}); err != nil {
		return nil, fmt.Errorf("listing the MachineSets of %s: %w", r.ID(), err)
	}
	var controlled []*clusterv1.MachineSet
	for i := range list.Items {
		if metav1.IsControlledBy(&list.Items[i], r.obj) {
			controlled = append(controlled, &list.Items[i])
		}
	}
	return controlled, nil
}

func (r *resource) ProviderIDs(ctx context.Context) ([]string, error) {
	if r.kind != KindMachinePool {
		return nil, nil
	}
	mp := &clusterv1.MachinePool{}
	if err := r.client.Get(ctx, client.ObjectKeyFromObject(r.obj), mp); err != nil {
		return nil, fmt.Errorf("reading the provider IDs of %s: %w", r.ID(), err)
	}
	return mp.Spec.ProviderIDList, nil
}

// RolloutReason looks at MachineDeployments only. The instances of a
// MachinePool roll out inside its infrastructure provider, which Cluster API
// does not report.
func (r *resource) RolloutReason(ctx context.Context) (string, error) {
	md, ok := r.obj.(*clusterv1.MachineDeployment)
	if !ok {
		return "", nil
	}
	if conditions.IsTrue(md, clusterv1.MachineDeploymentRollingOutCondition) {
		return fmt.Sprintf("%s is rolling out (condition %s is True)", r.ID(), clusterv1.MachineDeploymentRollingOutCondition), nil
	}
	if md.Status.UpToDateReplicas != nil && md.Status.Replicas != nil && *md.Status.UpToDateReplicas != *md.Status.Replicas {
		return fmt.Sprintf("%s is rolling out (%d of %d replicas up to date)", r.ID(), *md.Status.UpToDateReplicas, *md.Status.Replicas), nil
	}
	machineSets, err := r.machineSets(ctx)
	if err != nil {
		return "", err
	}
	active := 0
	for _, ms := range machineSets {
		if ptr.Deref(ms.Spec.Replicas, 0) > 0 || ptr.Deref(ms.Status.Replicas, 0) > 0 {
			active++
		}
	}
	if active > 1 {
		return fmt.Sprintf("%s is rolling out (%d active MachineSets)", r.ID(), active), nil
	}
	return "", nil
}

func (r *resource) MarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error {
	if err := r.checkScalable(); err != nil {
		return err
	}
	if _, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]; marked {
		return nil
	}
	original := machine.DeepCopy()
	if machine.Annotations == nil {
		machine.Annotations = map[string]string{}
	}
	machine.Annotations[clusterv1.DeleteMachineAnnotation] = r.clock.Now().UTC().Format(time.RFC3339)
	if err := r.client.Patch(ctx, machine, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("marking Machine %s of %s for deletion: %w", klog.KObj(machine), r.ID(), err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Marked Machine for deletion", "Machine", klog.KObj(machine), r.kind, klog.KObj(r.obj))
	return nil
}

func (r *resource) UnmarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error {
	if _, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]; !marked {
		return nil
	}
	original := machine.DeepCopy()
	delete(machine.Annotations, clusterv1.DeleteMachineAnnotation)
	if err := r.client.Patch(ctx, machine, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("removing the deletion mark of Machine %s of %s: %w", klog.KObj(machine), r.ID(), err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Removed deletion mark from Machine", "Machine", klog.KObj(machine), r.kind, klog.KObj(r.obj))
	return nil
}
