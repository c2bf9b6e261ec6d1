package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// maxCleanupRetryInterval is the longest wait between attempts to reach an
// unreachable workload cluster during deletion.
const maxCleanupRetryInterval = 30 * time.Second

// reconcileDelete stops the engine and removes what it left behind: the
// delete-machine annotations on the Cluster's Machines and the scale-down
// taints on the workload cluster's Nodes. Replicas stay as they are. When
// the workload cluster stays unreachable for WorkloadCleanupTimeout the
// taints are left, with a warning event, rather than blocking the deletion
// forever.
func (r *ClusterAutoscalerReconciler) reconcileDelete(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(ca, CleanupFinalizer) {
		return ctrl.Result{}, nil
	}
	r.stopEngine(ctx, client.ObjectKeyFromObject(ca))

	cleanup, err := r.ownsMarks(ctx, ca)
	if err != nil {
		return ctrl.Result{}, err
	}
	if cleanup {
		if err := r.clearDeleteMachineAnnotations(ctx, ca); err != nil {
			return ctrl.Result{}, err
		}
		retryAfter, err := r.removeScaleDownTaints(ctx, ca)
		if err != nil || retryAfter > 0 {
			return ctrl.Result{RequeueAfter: retryAfter}, err
		}
	}

	controllerutil.RemoveFinalizer(ca, CleanupFinalizer)
	ctrl.LoggerFrom(ctx).Info("Removed the ClusterAutoscaler's engine and marks")
	return ctrl.Result{}, nil
}

// ownsMarks says whether the delete-machine annotations and scale-down
// taints on the Cluster may be the ClusterAutoscaler's. Not when the Cluster
// is gone or going, with its Nodes and Machines, nor when another
// ClusterAutoscaler owns the Cluster: they are that one's.
func (r *ClusterAutoscalerReconciler) ownsMarks(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (bool, error) {
	cluster := &clusterv1.Cluster{}
	if err := r.Client.Get(ctx, clusterKey(ca), cluster); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if !cluster.DeletionTimestamp.IsZero() {
		return false, nil
	}
	owner, err := r.clusterOwner(ctx, ca)
	if err != nil {
		return false, err
	}
	return owner.Name == ca.Name, nil
}

// clearDeleteMachineAnnotations removes the delete-machine annotation from
// the Cluster's Machines of MachineSets and MachinePools that are not being
// deleted. A Machine keeps it while its MachineDeployment, MachineSet or
// MachinePool wants fewer Machines than it has: a scale-down is under way
// and the annotation picks the Machine that goes. It runs when no engine
// runs for the ClusterAutoscaler: at deletion, and before an engine starts.
func (r *ClusterAutoscalerReconciler) clearDeleteMachineAnnotations(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) error {
	machines := &clusterv1.MachineList{}
	if err := r.Client.List(ctx, machines, client.InNamespace(ca.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: ca.Spec.ClusterName}); err != nil {
		return fmt.Errorf("listing the Machines of Cluster %s: %w", clusterKey(ca), err)
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
		if _, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]; !marked {
			continue
		}
		inFlight, err := r.scaleDownInFlight(ctx, ca.Namespace, group, live[group])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if inFlight {
			ctrl.LoggerFrom(ctx).Info("Keeping the delete-machine annotation of a Machine whose scale-down is under way", "Machine", klog.KObj(machine))
			continue
		}
		original := machine.DeepCopy()
		delete(machine.Annotations, clusterv1.DeleteMachineAnnotation)
		if err := r.Client.Patch(ctx, machine, client.MergeFrom(original)); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the delete-machine annotation of Machine %s: %w", klog.KObj(machine), err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Removed the delete-machine annotation", "Machine", klog.KObj(machine))
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
func (r *ClusterAutoscalerReconciler) scaleDownInFlight(ctx context.Context, namespace string, group machineGroup, live int) (bool, error) {
	key := client.ObjectKey{Namespace: namespace, Name: group.name}
	var replicas *int32
	var err error
	switch group.kind {
	case scalable.KindMachineDeployment:
		deployment := &clusterv1.MachineDeployment{}
		err = r.Client.Get(ctx, key, deployment)
		replicas = deployment.Spec.Replicas
	case scalable.KindMachinePool:
		pool := &clusterv1.MachinePool{}
		err = r.Client.Get(ctx, key, pool)
		replicas = pool.Spec.Replicas
	default:
		machineSet := &clusterv1.MachineSet{}
		err = r.Client.Get(ctx, key, machineSet)
		replicas = machineSet.Spec.Replicas
	}
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the replicas of %s: %w", key, err)
	}
	return replicas != nil && int(*replicas) < live, nil
}

// removeScaleDownTaints removes the engine's taints from the workload
// cluster's Nodes. While the cluster is unreachable it asks to be retried
// after a while, until WorkloadCleanupTimeout after the deletion, when it
// gives up.
func (r *ClusterAutoscalerReconciler) removeScaleDownTaints(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (time.Duration, error) {
	workload, err := r.ClusterCache.GetClient(ctx, clusterKey(ca))
	if err != nil {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			return 0, err
		}
		waited := r.Clock.Since(ca.DeletionTimestamp.Time)
		if waited < r.WorkloadCleanupTimeout {
			setCondition(ca, autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason, fmt.Sprintf(
				"Waiting up to %s after deletion for the workload cluster, to remove the scale-down taints from its Nodes: %v", r.WorkloadCleanupTimeout, err))
			return min(r.WorkloadCleanupTimeout-waited, maxCleanupRetryInterval), nil
		}
		ctrl.LoggerFrom(ctx).Info("Giving up removing the scale-down taints of an unreachable workload cluster", "waited", r.WorkloadCleanupTimeout)
		r.Recorder.Eventf(ca, nil, corev1.EventTypeWarning, autoscalingv1alpha1.WorkloadClusterUnreachableReason, cleanupAction,
			"The workload cluster could not be reached within %s of the deletion: the %s and %s taints stay on the Nodes that have them",
			r.WorkloadCleanupTimeout, nodefacts.ToBeDeletedTaint, nodefacts.DeletionCandidateTaint)
		return 0, nil
	}

	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes); err != nil {
		return 0, fmt.Errorf("listing the Nodes of workload cluster %s: %w", clusterKey(ca), err)
	}
	var errs []error
	for i := range nodes.Items {
		node := &nodes.Items[i]
		taints := withoutScaleDownTaints(node.Spec.Taints)
		if len(taints) == len(node.Spec.Taints) {
			continue
		}
		original := node.DeepCopy()
		node.Spec.Taints = taints
		if scaledown.HasDeletionTaint(original) && ca.Spec.ScaleDown != nil && ptr.Deref(ca.Spec.ScaleDown.CordonNodeBeforeTerminating, false) {
			// The engine cordoned the nodes it was removing.
			node.Spec.Unschedulable = false
		}
		if err := workload.Patch(ctx, node, client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing the scale-down taints of Node %s: %w", node.Name, err))
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Removed the scale-down taints", "Node", klog.KObj(node))
	}
	return 0, kerrors.NewAggregate(errs)
}

// withoutScaleDownTaints returns taints without the engine's own, or taints
// itself when it has none of them.
func withoutScaleDownTaints(taints []corev1.Taint) []corev1.Taint {
	kept := make([]corev1.Taint, 0, len(taints))
	for _, taint := range taints {
		if !nodefacts.IsAutoscalerTaint(taint.Key) {
			kept = append(kept, taint)
		}
	}
	if len(kept) == len(taints) {
		return taints
	}
	return kept
}
