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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
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
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/retry"
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

	// MinSize and MaxSize come from the size annotations; MinSize is what
	// Options.MinSize makes of the annotated one, when set.
	MinSize() int
	MaxSize() int
	// WithMinSize returns the resource with Options.MinSize set to rule.
	WithMinSize(rule nodegroups.MinSizeRule) Resource
	// Labels are the resource's own labels.
	Labels() map[string]string
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
	// lowering its replicas could remove Machines other than the marked ones:
	// its RollingOut condition, its up-to-date replicas, several active
	// MachineSets, or a generation (e.g. a new template) that its controller
	// has not observed yet and that was not the autoscaler's own write.
	RolloutReason(ctx context.Context) (string, error)
	// CheckScaleDown reads the resource and its Cluster afresh from the API
	// server and returns an error that says why lowering its replicas by
	// removing must not happen now: it is gone, being deleted, paused, no
	// longer annotated, rolling out, or would go below MinSize.
	CheckScaleDown(ctx context.Context, removing int) error
	// ReplicasOverwritten says, when another writer changed the replicas
	// after the autoscaler last wrote them, what happened; else "". It
	// stays until the autoscaler writes them again.
	ReplicasOverwritten() string
	// UpdateReplicas reads the resource and its Cluster afresh, asks change
	// for the new replicas and writes them through /scale with the
	// resourceVersion read. When another writer got in between, it starts
	// again from a fresh read, so neither change is lost, and what it
	// checks is what it writes on. It refuses a resource that is gone,
	// paused, being deleted or no longer annotated (*NotScalableError), a
	// decrease while it rolls out (*NotScalableError), and a write that
	// moves the replicas below MinSize or above MaxSize (*OutOfBoundsError).
	// It returns the replicas written.
	UpdateReplicas(ctx context.Context, change func(current int) (int, error)) (int, error)
	// MarkMachineForDeletion sets the delete-machine annotation, so that
	// Cluster API removes this Machine first when the replicas go down, and
	// records on the Machine that the autoscaler placed it.
	MarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error
	// UnmarkMachineForDeletion removes the delete-machine annotation when
	// the autoscaler placed it for Options.Owner (IsMarkedBy); a mark
	// placed by anyone else stays.
	UnmarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error
	// CheckMarks reads the Machines afresh from the API server and refuses
	// (*NotScalableError) when one no longer carries a delete-machine
	// mark, or carries the autoscaler's mark of another ClusterAutoscaler:
	// lowering the replicas then would let Cluster API choose which
	// Machine goes. Called between the read and the write of the replicas.
	CheckMarks(ctx context.Context, machines []*clusterv1.Machine) error
	// WithListed returns the resource reading its MachineSets and Machines
	// from listed instead of its reader (Machines, RolloutReason), for
	// the reads of one listing of node groups.
	WithListed(listed *Listed) Resource
}

// Listed are the MachineSets and Machines of a namespace listed once, by
// the UID of their controller: the resources of one listing of node
// groups find theirs there, where each listing them would filter all of
// them, groups × objects in all.
type Listed struct {
	machineSets map[types.UID][]*clusterv1.MachineSet
	machines    map[types.UID][]*clusterv1.Machine
}

// NewListed indexes the listed MachineSets and Machines.
func NewListed(machineSets []clusterv1.MachineSet, machines []clusterv1.Machine) *Listed {
	l := &Listed{machineSets: map[types.UID][]*clusterv1.MachineSet{}, machines: map[types.UID][]*clusterv1.Machine{}}
	for i := range machineSets {
		if owner := metav1.GetControllerOf(&machineSets[i]); owner != nil {
			l.machineSets[owner.UID] = append(l.machineSets[owner.UID], &machineSets[i])
		}
	}
	for i := range machines {
		if owner := metav1.GetControllerOf(&machines[i]); owner != nil {
			l.machines[owner.UID] = append(l.machines[owner.UID], &machines[i])
		}
	}
	return l
}

// MarkedAnnotation records on a Machine that the autoscaler set its
// delete-machine annotation, so that only such marks are ever removed:
// an operator's or another tool's mark is theirs. Its value names the
// ClusterAutoscaler that placed it and when (ownership.Stamp).
const MarkedAnnotation = "autoscaling.cluster.x-k8s.io/delete-machine"

// IsMarkedByAutoscaler tells whether the Machine's delete-machine mark is
// the autoscaler's, whichever ClusterAutoscaler placed it.
func IsMarkedByAutoscaler(machine *clusterv1.Machine) bool {
	_, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]
	_, ours := machine.Annotations[MarkedAnnotation]
	return marked && ours
}

// IsMarkedBy tells whether the Machine's delete-machine mark is the
// autoscaler's, placed for the ClusterAutoscaler of owner or by a version
// that recorded none (ownership.PlacedBy).
func IsMarkedBy(machine *clusterv1.Machine, owner types.UID) bool {
	return IsMarkedByAutoscaler(machine) && ownership.PlacedBy(machine.Annotations[MarkedAnnotation], owner)
}

// Options are what New needs besides the object.
type Options struct {
	// Client reads and writes Cluster API objects in the management cluster.
	Client client.Client
	// Cluster owns the resource; a paused Cluster pauses its resources. Required.
	Cluster *clusterv1.Cluster
	// Clock stamps deletion marks.
	Clock clock.PassiveClock
	// Owner is the UID of the ClusterAutoscaler whose engine marks
	// Machines: its marks say so, and it removes only those. Required to
	// mark.
	Owner types.UID
	// APIReader reads, from the API server rather than a cache, what a
	// write decides on; Client when nil.
	APIReader client.Reader
	// Writes remembers the autoscaler's writes of replicas across reads of
	// the resource; nil remembers nothing.
	Writes *Writes
	// MinSize, when set, gives the min size from the one the annotations
	// set, each time they are read: the engine's scheduled minimums. It is
	// capped at the max size.
	MinSize nodegroups.MinSizeRule
}

// New returns the Resource for a MachineDeployment, a MachineSet or a
// MachinePool. It fails
// with an *AnnotationError when the object's annotations are wrong. Callers
// decide whether the object asks to be autoscaled (HasSizeAnnotations) and
// whether a MachineSet is standalone (IsStandalone). The Resource never
// modifies obj, which may be a cache's object: its writes work on copies
// read afresh.
func New(obj client.Object, opts Options) (Resource, error) {
	r := &resource{client: opts.Client, clock: opts.Clock, obj: obj, opts: opts}
	switch o := obj.(type) {
	case *clusterv1.MachineDeployment:
		r.kind = KindMachineDeployment
		r.clusterName = o.Spec.ClusterName
		r.selector = o.Spec.Selector
		r.template = o.Spec.Template
	case *clusterv1.MachineSet:
		r.kind = KindMachineSet
		r.clusterName = o.Spec.ClusterName
		r.selector = o.Spec.Selector
		r.template = o.Spec.Template
	case *clusterv1.MachinePool:
		r.kind = KindMachinePool
		r.clusterName = o.Spec.ClusterName
		r.selector = machinePoolMachineSelector(o)
		r.template = o.Spec.Template
	default:
		return nil, fmt.Errorf("%T %s is not a MachineDeployment, a MachineSet or a MachinePool", obj, klog.KObj(obj))
	}
	r.id = ID(r.kind, obj.GetNamespace(), obj.GetName())
	r.replicas, _ = SpecReplicas(obj)
	if opts.Cluster == nil {
		return nil, fmt.Errorf("%s: the Cluster it belongs to is required", r.ID())
	}
	if r.clock == nil {
		r.clock = clock.RealClock{}
	}
	r.apiReader, r.reader = opts.APIReader, opts.Client
	if r.apiReader == nil {
		r.apiReader = opts.Client
	}
	r.apiReader = retryingReader{Reader: r.apiReader}
	r.paused = annotations.IsPaused(opts.Cluster, obj)

	var err error
	if r.annotatedMinSize, r.maxSize, err = sizeBounds(r.ID(), obj.GetAnnotations()); err != nil {
		return nil, err
	}
	r.applyMinSize()
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
	// AnnotatedMinSize is the min-size annotation's, when a scheduled
	// minimum made MinSize of it (Options.MinSize).
	AnnotatedMinSize *int
}

func (e *OutOfBoundsError) Error() string {
	message := fmt.Sprintf("%s: refusing to change replicas from %d to %d, outside the bounds [%d, %d] set by the %q and %q annotations",
		e.ID, e.Current, e.Desired, e.MinSize, e.MaxSize, MinSizeAnnotation, MaxSizeAnnotation)
	if e.AnnotatedMinSize != nil {
		message += fmt.Sprintf(" and the scheduled minimums (annotated min size %d)", *e.AnnotatedMinSize)
	}
	return message
}

type resource struct {
	client client.Client
	// reader reads the resource's Machines and MachineSets: the client's
	// cache, or the API server for a resource read afresh.
	reader    client.Reader
	apiReader client.Reader
	clock     clock.PassiveClock
	obj       client.Object
	opts      Options

	// id is ID's, which every loop asks for many times per group.
	id          string
	kind        string
	clusterName string
	replicas    int
	selector    metav1.LabelSelector
	template    clusterv1.MachineTemplateSpec
	minSize     int
	maxSize     int
	options     nodegroups.GroupOptions
	paused      bool

	// annotatedMinSize is the min-size annotation's; minSize is what
	// Options.MinSize makes of it.
	annotatedMinSize int
	// listed, when set, holds the Machines and MachineSets read instead
	// of the reader's (WithListed).
	listed *Listed
}

var _ Resource = &resource{}

func (r *resource) ID() string                                     { return r.id }
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
func (r *resource) Labels() map[string]string                      { return r.obj.GetLabels() }
func (r *resource) MachineTemplate() clusterv1.MachineTemplateSpec { return r.template }

func (r *resource) WithMinSize(rule nodegroups.MinSizeRule) Resource {
	with := *r
	with.opts.MinSize = rule
	with.applyMinSize()
	return &with
}

func (r *resource) WithListed(listed *Listed) Resource {
	with := *r
	with.listed = listed
	return &with
}

// applyMinSize sets the effective min size from the annotated one.
func (r *resource) applyMinSize() {
	r.minSize = r.annotatedMinSize
	if r.opts.MinSize != nil {
		r.minSize = min(max(r.opts.MinSize(r.annotatedMinSize), 0), r.maxSize)
	}
}

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
		err := &OutOfBoundsError{ID: r.ID(), Current: current, Desired: desired, MinSize: r.minSize, MaxSize: r.maxSize}
		if r.opts.MinSize != nil {
			err.AnnotatedMinSize = ptr.To(r.annotatedMinSize)
		}
		return err
	}
	return nil
}

func (r *resource) UpdateReplicas(ctx context.Context, change func(current int) (int, error)) (int, error) {
	log := ctrl.LoggerFrom(ctx).WithValues(r.kind, klog.KObj(r.obj))
	var written int
	err := retry.OnConflict(func() error {
		fresh, err := r.fresh(ctx)
		if err != nil {
			return err
		}
		if err := fresh.checkScalable(); err != nil {
			return err
		}
		current := fresh.replicas
		desired, err := change(current)
		if err != nil {
			return err
		}
		if desired < current {
			err = fresh.checkScaleDown(ctx, current, desired)
		} else {
			err = fresh.checkBounds(current, desired)
		}
		if err != nil {
			return err
		}
		if desired == current {
			written = current
			return nil
		}
		// The resourceVersion of the object read: a write that changed it
		// since, such as a new template, makes this one conflict and be
		// checked again.
		scale := &autoscalingv1.Scale{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace(), Name: r.Name(), ResourceVersion: fresh.obj.GetResourceVersion()},
			Spec:       autoscalingv1.ScaleSpec{Replicas: int32(desired)},
		}
		if err := r.client.SubResource("scale").Update(ctx, r.obj, client.WithSubResourceBody(scale)); err != nil {
			log.V(4).Info("Writing replicas failed", "from", current, "to", desired, "err", err.Error())
			return fmt.Errorf("writing the replicas of %s: %w", r.ID(), err)
		}
		// A change of spec.replicas raises the generation by one.
		r.opts.Writes.record(r.ID(), desired, fresh.obj.GetGeneration()+1, r.clock.Now())
		log.V(2).Info("Changed replicas", "from", current, "to", desired)
		written = desired
		return nil
	})
	return written, err
}

func (r *resource) CheckScaleDown(ctx context.Context, removing int) error {
	fresh, err := r.fresh(ctx)
	if err != nil {
		return err
	}
	return fresh.checkScaleDown(ctx, fresh.replicas, fresh.replicas-removing)
}

// checkScaleDown says why the replicas must not go from current down to
// desired, on the resource as it was read.
func (r *resource) checkScaleDown(ctx context.Context, current, desired int) error {
	if err := r.checkScalable(); err != nil {
		return err
	}
	reason, err := r.RolloutReason(ctx)
	if err != nil {
		return err
	}
	if reason != "" {
		return &NotScalableError{ID: r.ID(), Reason: reason}
	}
	return r.checkBounds(current, desired)
}

// fresh reads the resource and its Cluster again from the API server.
func (r *resource) fresh(ctx context.Context) (*resource, error) {
	obj, ok := r.obj.DeepCopyObject().(client.Object)
	if !ok {
		return nil, fmt.Errorf("%s: cannot copy %T", r.ID(), r.obj)
	}
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(r.obj), obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &NotScalableError{ID: r.ID(), Reason: "it no longer exists"}
		}
		return nil, fmt.Errorf("reading %s: %w", r.ID(), err)
	}
	if !HasSizeAnnotations(obj.GetAnnotations()) {
		return nil, &NotScalableError{ID: r.ID(), Reason: "it no longer has the autoscaler's size annotations"}
	}
	cluster := &clusterv1.Cluster{}
	if err := r.apiReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace(), Name: r.clusterName}, cluster); err != nil {
		return nil, fmt.Errorf("reading Cluster %s of %s: %w", r.clusterName, r.ID(), err)
	}
	opts := r.opts
	opts.Cluster = cluster
	fresh, err := New(obj, opts)
	if err != nil {
		return nil, err
	}
	// What is decided on a fresh read must not come from a cache.
	fresh.(*resource).reader = r.apiReader
	return fresh.(*resource), nil
}

func (r *resource) ReplicasOverwritten() string {
	return r.opts.Writes.overwritten(r.ID(), r.obj.GetGeneration(), r.replicas)
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
	if r.listed != nil {
		var owned []*clusterv1.Machine
		for uid := range owners {
			for _, machine := range r.listed.machines[uid] {
				if machine.Namespace == r.Namespace() && selector.Matches(labels.Set(machine.Labels)) {
					owned = append(owned, machine)
				}
			}
		}
		return owned, nil
	}
	machines := &clusterv1.MachineList{}
	if err := r.reader.List(ctx, machines, client.InNamespace(r.Namespace()), client.MatchingLabelsSelector{Selector: selector}); err != nil {
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
	if r.listed != nil {
		var controlled []*clusterv1.MachineSet
		for _, ms := range r.listed.machineSets[r.obj.GetUID()] {
			if ms.Namespace == r.Namespace() && ms.Labels[clusterv1.MachineDeploymentNameLabel] == r.Name() {
				controlled = append(controlled, ms)
			}
		}
		return controlled, nil
	}
	list := &clusterv1.MachineSetList{}
	if err := r.reader.List(ctx, list, client.InNamespace(r.Namespace()),
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
	if err := r.reader.Get(ctx, client.ObjectKeyFromObject(r.obj), mp); err != nil {
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
	if md.Generation > md.Status.ObservedGeneration && !r.opts.Writes.own(r.ID(), md.Status.ObservedGeneration, md.Generation) {
		return fmt.Sprintf("%s is rolling out (generation %d, e.g. a new template, not yet observed by its controller, which observed %d)",
			r.ID(), md.Generation, md.Status.ObservedGeneration), nil
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
	if r.opts.Owner == "" {
		return fmt.Errorf("marking Machine %s of %s for deletion: no ClusterAutoscaler UID to record in the mark", klog.KObj(machine), r.ID())
	}
	original := machine.DeepCopy()
	if machine.Annotations == nil {
		machine.Annotations = map[string]string{}
	}
	now := r.clock.Now().UTC().Format(time.RFC3339)
	machine.Annotations[clusterv1.DeleteMachineAnnotation] = now
	machine.Annotations[MarkedAnnotation] = ownership.Stamp(r.opts.Owner, now)
	if err := r.client.Patch(ctx, machine, client.MergeFrom(original)); err != nil {
		return fmt.Errorf("marking Machine %s of %s for deletion: %w", klog.KObj(machine), r.ID(), err)
	}
	ctrl.LoggerFrom(ctx).V(2).Info("Marked Machine for deletion", "Machine", klog.KObj(machine), r.kind, klog.KObj(r.obj))
	return nil
}

func (r *resource) UnmarkMachineForDeletion(ctx context.Context, machine *clusterv1.Machine) error {
	removed, err := RemoveMark(ctx, r.client, r.apiReader, machine, r.opts.Owner)
	if err != nil {
		return fmt.Errorf("removing the deletion mark of Machine %s of %s: %w", klog.KObj(machine), r.ID(), err)
	}
	if removed {
		ctrl.LoggerFrom(ctx).V(2).Info("Removed deletion mark from Machine", "Machine", klog.KObj(machine), r.kind, klog.KObj(r.obj))
	}
	return nil
}

// RemoveMark removes the delete-machine mark of a Machine when the
// autoscaler placed it for owner (IsMarkedBy), and says whether it did. The
// write holds only on the Machine as checked: when it changed since, it is
// read again from reader, so that a mark another ClusterAutoscaler placed
// in between is never removed. A Machine that is gone has no mark.
func RemoveMark(ctx context.Context, c client.Client, reader client.Reader, machine *clusterv1.Machine, owner types.UID) (bool, error) {
	removed := false
	err := retry.OnConflict(func() error {
		if !IsMarkedBy(machine, owner) {
			return nil
		}
		original := machine.DeepCopy()
		delete(machine.Annotations, clusterv1.DeleteMachineAnnotation)
		delete(machine.Annotations, MarkedAnnotation)
		patchErr := c.Patch(ctx, machine, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(patchErr) {
			removed = patchErr == nil
			return patchErr
		}
		if err := reader.Get(ctx, client.ObjectKeyFromObject(original), machine); err != nil {
			return err
		}
		return patchErr
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return removed, err
}

func (r *resource) CheckMarks(ctx context.Context, machines []*clusterv1.Machine) error {
	for _, machine := range machines {
		fresh := &clusterv1.Machine{}
		err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(machine), fresh)
		if apierrors.IsNotFound(err) {
			return &NotScalableError{ID: r.ID(), Reason: fmt.Sprintf("Machine %s is gone; not lowering the replicas for it", machine.Name)}
		}
		if err != nil {
			return fmt.Errorf("reading Machine %s of %s: %w", klog.KObj(machine), r.ID(), err)
		}
		_, marked := fresh.Annotations[clusterv1.DeleteMachineAnnotation]
		placedBy, ours := fresh.Annotations[MarkedAnnotation]
		switch {
		case !marked:
			return &NotScalableError{ID: r.ID(), Reason: fmt.Sprintf("Machine %s no longer carries the %s annotation, so lowering the replicas "+
				"would let Cluster API choose which Machine goes", machine.Name, clusterv1.DeleteMachineAnnotation)}
		case ours && !ownership.PlacedBy(placedBy, r.opts.Owner):
			return &NotScalableError{ID: r.ID(), Reason: fmt.Sprintf("Machine %s is now marked for deletion by another ClusterAutoscaler (%s=%q), "+
				"whose engine lowers the replicas for it", machine.Name, MarkedAnnotation, placedBy)}
		}
	}
	return nil
}

// EmptyObject is an empty object of the kind, namespace and name of a
// resource ID, to read it into, or nil when the ID names no
// MachineDeployment, MachineSet or MachinePool.
func EmptyObject(id string) client.Object {
	kind, namespace, name, ok := ParseID(id)
	if !ok {
		return nil
	}
	var obj client.Object
	switch kind {
	case KindMachineDeployment:
		obj = &clusterv1.MachineDeployment{}
	case KindMachineSet:
		obj = &clusterv1.MachineSet{}
	case KindMachinePool:
		obj = &clusterv1.MachinePool{}
	default:
		return nil
	}
	obj.SetNamespace(namespace)
	obj.SetName(name)
	return obj
}

// SpecReplicas is spec.replicas of a MachineDeployment, MachineSet or
// MachinePool; ok is false for other objects and when it is unset.
func SpecReplicas(obj client.Object) (replicas int, ok bool) {
	var value *int32
	switch o := obj.(type) {
	case *clusterv1.MachineDeployment:
		value = o.Spec.Replicas
	case *clusterv1.MachineSet:
		value = o.Spec.Replicas
	case *clusterv1.MachinePool:
		value = o.Spec.Replicas
	}
	return int(ptr.Deref(value, 0)), value != nil
}
