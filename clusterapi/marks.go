package clusterapi

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// MarkReleaseOptions say whose delete-machine marks ReleaseDeletionMarks
// removes, and through what.
type MarkReleaseOptions struct {
	// Client removes the marks.
	Client client.Client
	// APIReader reads the Machines and their groups from the API server:
	// a cache may not have seen yet the replicas that an engine lowered
	// after marking. Client when nil.
	APIReader client.Reader
	// Cluster is the namespace and name of the Cluster.
	Cluster types.NamespacedName
	// Owner is the ClusterAutoscaler that owns the Cluster, whose engine
	// holds the Cluster's Lease.
	Owner ownership.Owner
}

// ReleaseDeletionMarks removes the delete-machine marks that the
// autoscaler placed on the Cluster's Machines for the owner, or for a
// ClusterAutoscaler that no longer exists, or before marks named one
// (ownership.Owner.Claim), and that no scale-down still needs. A mark stays
// while the Machine's MachineDeployment, MachineSet or MachinePool wants
// fewer Machines than it has: a scale-down is under way and the mark picks
// the Machine that goes. Marks that an operator or another tool placed
// are never touched, nor those of another ClusterAutoscaler that exists,
// which are logged. Call it from the manager that holds the Cluster's
// Lease, while no engine runs for the Cluster: before one starts, and when
// the ClusterAutoscaler is deleted.
func ReleaseDeletionMarks(ctx context.Context, opts MarkReleaseOptions) error {
	log := ctrl.LoggerFrom(ctx)
	reader := opts.APIReader
	if reader == nil {
		reader = opts.Client
	}
	machines := &clusterv1.MachineList{}
	if err := reader.List(ctx, machines, client.InNamespace(opts.Cluster.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: opts.Cluster.Name}); err != nil {
		return fmt.Errorf("listing the Machines of Cluster %s: %w", opts.Cluster, err)
	}
	live := map[machineGroup]int{}
	groupOf := map[*clusterv1.Machine]machineGroup{}
	for i := range machines.Items {
		machine := &machines.Items[i]
		group, ok := machineGroupOf(machine)
		if !ok || !machine.DeletionTimestamp.IsZero() {
			continue
		}
		live[group]++
		groupOf[machine] = group
	}

	var errs []error
	for machine, group := range groupOf {
		if !scalable.IsMarkedByAutoscaler(machine) {
			continue
		}
		claim, err := opts.Owner.Claim(ctx, machine.Annotations[scalable.MarkedAnnotation])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !claim.Ours() {
			log.Info("Keeping the delete-machine annotation that another ClusterAutoscaler placed", "Machine", klog.KObj(machine), "placedBy", claim.PlacedBy())
			continue
		}
		inFlight, err := scaleDownInFlight(ctx, reader, opts.Cluster.Namespace, group, live[group])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if inFlight {
			log.Info("Keeping the delete-machine annotation of a Machine whose scale-down is under way", "Machine", klog.KObj(machine))
			continue
		}
		// Removed only while it names the ClusterAutoscaler judged above:
		// one placed since by another is never removed.
		placer, _ := ownership.Parse(machine.Annotations[scalable.MarkedAnnotation])
		removed, err := scalable.RemoveMark(ctx, opts.Client, reader, machine, placer)
		if err != nil {
			errs = append(errs, fmt.Errorf("removing the delete-machine annotation of Machine %s: %w", klog.KObj(machine), err))
			continue
		}
		if removed {
			log.Info("Removed the delete-machine annotation", "Machine", klog.KObj(machine), "placedBy", claim.PlacedBy())
		}
	}
	return kerrors.NewAggregate(errs)
}

// machineGroup names the MachineDeployment, MachineSet or MachinePool that
// decides how many Machines of its kind there are.
type machineGroup struct {
	kind string
	name string
}

// machineGroupOf is the group of a Machine that a MachineSet or a
// MachinePool controls; other Machines, such as those of a control plane,
// have none.
func machineGroupOf(machine *clusterv1.Machine) (machineGroup, bool) {
	owner := metav1.GetControllerOf(machine)
	switch {
	case owner == nil:
		return machineGroup{}, false
	case owner.Kind == scalable.KindMachinePool:
		return machineGroup{kind: scalable.KindMachinePool, name: owner.Name}, true
	case owner.Kind != scalable.KindMachineSet:
		return machineGroup{}, false
	}
	if deployment, ok := machine.Labels[clusterv1.MachineDeploymentNameLabel]; ok {
		return machineGroup{kind: scalable.KindMachineDeployment, name: deployment}, true
	}
	return machineGroup{kind: scalable.KindMachineSet, name: owner.Name}, true
}

// scaleDownInFlight says whether a group wants fewer Machines than the live
// ones it has.
func scaleDownInFlight(ctx context.Context, c client.Reader, namespace string, group machineGroup, live int) (bool, error) {
	obj := scalable.EmptyObject(scalable.ID(group.kind, namespace, group.name))
	err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the replicas of %s %s: %w", group.kind, klog.KObj(obj), err)
	}
	replicas, ok := scalable.SpecReplicas(obj)
	return ok && replicas < live, nil
}
