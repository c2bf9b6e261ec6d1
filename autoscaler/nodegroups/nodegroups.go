// Package nodegroups defines what the engine needs from the infrastructure:
// node groups it can read and resize. Cluster API implements it in clusterapi/.
package nodegroups

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// NodeGroup is a set of nodes built from one template that the engine can
// resize. Implementations are read once per loop (see Provider), so
// the getters are cheap and never call an API server; only the methods taking
// a context do.
type NodeGroup interface {
	// ID identifies the group across loops, e.g. "MachineDeployment/ns/name".
	ID() string
	// MinSize and MaxSize are the bounds the group may be resized within.
	MinSize() int
	MaxSize() int
	// Labels are the labels of the object behind the group, which the
	// engine's scheduled minimums select groups by.
	Labels() map[string]string
	// WithMinSize returns the group whose min size is what rule gives for
	// the one its annotations set: in MinSize, and in the checks of the
	// methods that lower the target size, which ask rule again, at that
	// moment, for the annotations they read afresh.
	WithMinSize(rule MinSizeRule) NodeGroup
	// TargetSize is the number of nodes the group has been asked to have.
	TargetSize() int
	// Instances are the members of the group, including those that have no
	// node yet and those being deleted.
	Instances() []Instance
	// Options are the per-group overrides of the engine's defaults.
	Options() GroupOptions
	// ScaleDownBlockedReason is non-empty while the group must not lose nodes
	// for a reason of its own, such as a rollout in progress.
	ScaleDownBlockedReason() string

	// TemplateNode returns the node a new member of the group would become,
	// from what the group publishes, without the DaemonSet pods that would
	// run on it. The engine asks when no member of the group shows it
	// (scale from zero), and, when pods have DRA claims, which devices a
	// young member whose drivers publish none yet waits for while no member
	// publishes any; it names the node and drops its startup, status
	// and condition taints itself (nodefacts.Rules.TemplateNode). The node
	// may carry the CSI attach limits (snapshot.AttachLimitsAnnotation) and
	// the DRA devices (snapshot.TemplateDevicesAnnotation) of a new member,
	// which the engine reads from it. It returns an error that says why
	// when the group cannot tell, in which case it cannot scale from zero:
	// a *ReadError when what it needs could not be read. It bounds its reads itself: the engine asks every group in the
	// same loop, and a read that hangs must cost one group, not the loop.
	TemplateNode(ctx context.Context) (*corev1.Node, error)
	// IncreaseSize raises the target size by delta (> 0) within MaxSize.
	IncreaseSize(ctx context.Context, delta int) error
	// CheckScaleDown reads the group afresh and returns a *RefusedError
	// that says why removing `removing` of its nodes must not happen now:
	// the group is rolling out, paused, being deleted or gone, no longer
	// autoscaled, or would go below its min size; any other error means
	// that it could not tell. Every destructive step of a scale-down asks it
	// first, because a decision taken minutes earlier, when the drain
	// started, may no longer hold.
	CheckScaleDown(ctx context.Context, removing int) error
	// DeleteNodes removes the given registered nodes of the group and lowers
	// the target size accordingly. It checks what CheckScaleDown checks at
	// the moment it lowers the target size, and returns a *RefusedError
	// when that fails or when the group is changing in a way that could
	// make the infrastructure remove other nodes (e.g. an instance being
	// replaced, or the mark that picks an instance gone or another
	// ClusterAutoscaler's).
	DeleteNodes(ctx context.Context, nodes []*corev1.Node) error
	// CancelDeletion gives back nodes that DeleteNodes handed to the
	// infrastructure and that it did not remove (e.g. another writer set
	// the target size back): it removes the marks DeleteNodes placed on
	// their instances, unless their removal has started.
	CancelDeletion(ctx context.Context, nodes []*corev1.Node) error
	// DeleteInstances removes members of the group that have not registered a
	// node (failed or never provisioned) and lowers the target size.
	DeleteInstances(ctx context.Context, instances []Instance) error
	// DecreaseTargetSize lowers the target size by delta (> 0) by giving up
	// instances that do not exist yet; it never removes registered nodes.
	DecreaseTargetSize(ctx context.Context, delta int) error
	// RemovesChosenInstances tells whether DeleteNodes and DeleteInstances
	// remove exactly the nodes and instances they are given: false when
	// lowering the target size lets the infrastructure choose which
	// instances go (a MachinePool whose provider does not support
	// MachinePool Machines), or when the group cannot tell yet. The engine
	// adds to such a group nothing it may have to take back one by one,
	// such as the nodes of an atomic scale-up.
	RemovesChosenInstances() bool
}

// MinSizeRule is a group's min size at the time it is asked, from the one
// its annotations set.
type MinSizeRule func(annotated int) int

// Provider discovers the node groups of one cluster.
type Provider interface {
	// NodeGroups returns the autoscaled node groups of the cluster, read
	// afresh. Groups that are misconfigured are reported in Problems and
	// left out, or kept when the problem only limits what they can do, so
	// that one bad group never stops the others.
	NodeGroups(ctx context.Context) (List, error)
}

// List is the result of one discovery.
type List struct {
	Groups []NodeGroup
	// Problems say what is wrong with groups: ones that exist but cannot be
	// autoscaled, and ones in Groups that can do less than they should.
	Problems []Problem
}

// RefusedError says why a node group refuses a change now; the change may
// be asked again later.
type RefusedError struct {
	Reason string
	// Err is the cause, when the refusal comes from another error.
	Err error
}

func (e *RefusedError) Error() string { return e.Reason }

func (e *RefusedError) Unwrap() error { return e.Err }

// ReadError says that a node group could not read what an answer needs,
// such as its infrastructure template: the read failed, or did not answer
// within the group's bound. Unlike an answer that says no (a template that
// publishes no capacity, say), it is a problem of the group, which the
// engine reports as it reports the Problems of discovery.
type ReadError struct {
	Err error
}

func (e *ReadError) Error() string { return e.Err.Error() }

func (e *ReadError) Unwrap() error { return e.Err }

// ReasonTemplateUnreadable is the Problem reason of a group whose
// TemplateNode returned a *ReadError: it cannot scale up from zero until
// its template can be read.
const ReasonTemplateUnreadable = "TemplateUnreadable"

// ReasonReplicasOverwritten is the Problem reason of a group whose target
// size another writer changed after the autoscaler set it, e.g. a GitOps
// tool or a ClusterClass topology writing back the replicas it declares.
const ReasonReplicasOverwritten = "ReplicasOverwritten"

// Problem explains why a would-be node group is not autoscaled, or what a
// node group cannot do.
type Problem struct {
	// ID identifies the resource in the same format as NodeGroup.ID.
	ID string
	// Reason is a CamelCase machine-readable cause, e.g. "InvalidAnnotation".
	Reason string
	// Message tells a user what is wrong and how to fix it.
	Message string
	// Kept is true when the group is in Groups all the same, e.g. with a bad
	// scale-from-zero hint it still scales while it has nodes.
	Kept bool
}

// InstanceState is the lifecycle phase of a node group member.
type InstanceState string

const (
	// InstanceCreating is a member being provisioned; it may have no node yet.
	InstanceCreating InstanceState = "Creating"
	// InstanceRunning is a provisioned member.
	InstanceRunning InstanceState = "Running"
	// InstanceDeleting is a member being removed.
	InstanceDeleting InstanceState = "Deleting"
)

// Instance is one member of a node group.
type Instance struct {
	// ID is unique within the group (the provider ID once known, else a
	// name of the implementation's choosing).
	ID string
	// NodeName is the name of the node the instance registered as, or empty.
	NodeName string
	// Name is the name of the machine behind the instance, when it has one.
	// Many providers (Docker, vSphere, OpenStack, Azure, GCP) register the
	// node under it, which tells before it registers what it will be called.
	Name  string
	State InstanceState
	// Removable is true when DeleteInstances can remove the instance while
	// it has no node. Only removable instances are given up when they stay
	// unregistered too long; the others (e.g. a MachinePool member known
	// only by its provider ID) are left to their infrastructure.
	Removable bool
	// Error is set when provisioning failed and will not recover by itself.
	Error *InstanceError
	// Created is when the API server created the object behind the
	// instance (its Machine), to the second; zero when unknown. Owner
	// names what created it, e.g. "MachineSet/md-0-x7k2p" (for a
	// MachineDeployment, the MachineSet that controls its Machine) or
	// "MachinePool/mp-0"; "" when unknown. The engine credits an instance
	// to a raise of the target size only when it was created at or after
	// the raise was written, by an owner the group's instances had then;
	// an instance without Created is credited to none, so a rollback
	// never removes it.
	Created time.Time
	Owner   string
}

// InstanceError says why an instance could not be provisioned.
type InstanceError struct {
	// Reason is a CamelCase cause, e.g. "InfrastructureProvisioningFailed".
	Reason  string
	Message string
}

// GroupOptions are per-group overrides; nil fields use the engine's
// settings. Settings.For resolves them, and pricing.Table.NodePrice Price.
type GroupOptions struct {
	ScaleDownUtilizationThreshold *float64
	ScaleDownUnneededTime         *time.Duration
	ScaleDownUnreadyTime          *time.Duration
	MaxNodeProvisionTime          *time.Duration
	// Price is what a node of the group costs per hour, when the group
	// says; nil prices it by its instance type or capacity.
	Price *pricing.Price
	// ConsolidationBudget is the most nodes of the group consolidation
	// disrupts at once, in place of the ClusterAutoscaler's budget; nil
	// uses that. CheckConsolidationBudget has accepted it.
	ConsolidationBudget *intstr.IntOrString
}

// CheckConsolidationBudget tells whether budget is a consolidation budget:
// a number of nodes, or a percentage of the group from 0% to 100%.
func CheckConsolidationBudget(budget intstr.IntOrString) error {
	percent := budget.Type == intstr.String
	value, err := intstr.GetScaledValueFromIntOrPercent(&budget, 100, true)
	switch {
	case err != nil:
		return errors.New("neither a number nor a percentage")
	case value < 0 || percent && value > 100:
		return errors.New("not a number of nodes or a percentage from 0% to 100%")
	}
	return nil
}

// MinMaxNodeProvisionTime is the shortest MaxNodeProvisionTime accepted, for
// the whole cluster and as a group's override: a shorter one takes Machines
// that are still booting for Machines that will never register, and deletes
// them. The ClusterAutoscaler CRD's CEL rule states the same value; a test
// of api/v1alpha1 ties the two.
const MinMaxNodeProvisionTime = time.Minute

// Settings are the values of the settings a node group may override. The
// engine's configuration gives them for the whole cluster; For gives them
// for one group.
type Settings struct {
	ScaleDownUtilizationThreshold float64
	ScaleDownUnneededTime         time.Duration
	ScaleDownUnreadyTime          time.Duration
	MaxNodeProvisionTime          time.Duration
}

// For returns the settings that apply to group: its overrides (Options)
// where it has them, s elsewhere. It is the one place overrides are
// resolved; everything that needs a group's setting asks it.
func (s Settings) For(group NodeGroup) Settings {
	overrides := group.Options()
	return Settings{
		ScaleDownUtilizationThreshold: ptr.Deref(overrides.ScaleDownUtilizationThreshold, s.ScaleDownUtilizationThreshold),
		ScaleDownUnneededTime:         ptr.Deref(overrides.ScaleDownUnneededTime, s.ScaleDownUnneededTime),
		ScaleDownUnreadyTime:          ptr.Deref(overrides.ScaleDownUnreadyTime, s.ScaleDownUnreadyTime),
		MaxNodeProvisionTime:          ptr.Deref(overrides.MaxNodeProvisionTime, s.MaxNodeProvisionTime),
	}
}

// ExpectedNodeNames are, by group ID, the names the instances on their
// way will register their nodes under, for the groups whose nodes are
// named after their machines: a group's own nodes tell, and a group that
// has none yet, such as one scaled from zero, is named as the nodes of
// the other groups are, when all of those are named after their machines
// (one infrastructure provider names them all). Its first node is the one
// whose room matters most: no pod of its shape runs anywhere yet.
func ExpectedNodeNames(groups []NodeGroup) map[string][]string {
	namings := make([]nodeNaming, len(groups))
	booting := make([][]string, len(groups))
	clusterNaming := namingUnknown
	for i, group := range groups {
		namings[i], booting[i] = namingOf(group)
		if namings[i] != namingUnknown && clusterNaming != namedOtherwise {
			clusterNaming = namings[i]
		}
	}
	expected := map[string][]string{}
	for i, group := range groups {
		naming := namings[i]
		if naming == namingUnknown {
			naming = clusterNaming
		}
		if naming == namedAfterMachines && len(booting[i]) > 0 {
			expected[group.ID()] = booting[i]
		}
	}
	return expected
}

// nodeNaming is what the registered nodes of a group tell of how its nodes
// are named.
type nodeNaming int

const (
	// namingUnknown: no node registered yet.
	namingUnknown nodeNaming = iota
	namedAfterMachines
	namedOtherwise
)

// namingOf says how the group's nodes are named, and returns the names of
// its instances on their way, which are their nodes' names if their nodes
// are named after them.
func namingOf(group NodeGroup) (nodeNaming, []string) {
	naming := namingUnknown
	var booting []string
	for _, instance := range group.Instances() {
		switch {
		case instance.NodeName != "":
			if instance.NodeName != instance.Name {
				return namedOtherwise, nil
			}
			naming = namedAfterMachines
		case instance.State == InstanceCreating && instance.Error == nil && instance.Name != "":
			booting = append(booting, instance.Name)
		}
	}
	return naming, booting
}
