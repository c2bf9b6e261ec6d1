package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
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
func (r *ClusterAutoscalerReconciler) reconcileDelete(ctx context.Context, s *reconcileScope) (ctrl.Result, error) {
	ca := s.ca
	if !controllerutil.ContainsFinalizer(ca, CleanupFinalizer) {
		return ctrl.Result{}, nil
	}
	r.stopEngine(ctx, client.ObjectKeyFromObject(ca))

	cleanup, err := r.ownsMarks(ctx, ca)
	if err != nil {
		return ctrl.Result{}, err
	}
	// Under the Cluster's Lease, as an engine acts: a manager that still
	// runs an engine for the Cluster may be between a mark and its write.
	if cleanup && !r.holdClusterLease(ctx, s) {
		return ctrl.Result{}, nil
	}
	if cleanup {
		if err := clusterapi.ReleaseDeletionMarks(ctx, r.markRelease(ca)); err != nil {
			return ctrl.Result{}, err
		}
		retryAfter, err := r.removeScaleDownTaints(ctx, s)
		if err != nil || retryAfter > 0 {
			return ctrl.Result{RequeueAfter: retryAfter}, err
		}
	}

	r.Leases.Release(client.ObjectKeyFromObject(ca))
	controllerutil.RemoveFinalizer(ca, CleanupFinalizer)
	ctrl.LoggerFrom(ctx).Info("Removed the ClusterAutoscaler's engine and marks")
	return ctrl.Result{}, nil
}

// ownsMarks says whether the delete-machine annotations and scale-down
// taints on the Cluster may be the ClusterAutoscaler's. Not when clusterctl
// move deletes it from the source management cluster, not when the Cluster
// is gone or going, with its Nodes and Machines, nor when another
// ClusterAutoscaler owns the Cluster: they are that one's.
func (r *ClusterAutoscalerReconciler) ownsMarks(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (bool, error) {
	if _, moving := ca.Annotations[clusterctlv1.DeleteForMoveAnnotation]; moving {
		// clusterctl move deletes the source's copy: what it left on the
		// Cluster is now the target's ClusterAutoscaler's.
		return false, nil
	}
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

// removeScaleDownTaints removes the engine's taints from the workload
// cluster's Nodes. While the cluster is unreachable it asks to be retried
// after a while, with the scope saying why, until WorkloadCleanupTimeout
// after the deletion, when it gives up.
func (r *ClusterAutoscalerReconciler) removeScaleDownTaints(ctx context.Context, s *reconcileScope) (time.Duration, error) {
	ca := s.ca
	workload, err := r.ClusterCache.GetClient(ctx, clusterKey(ca))
	if err != nil {
		if !errors.Is(err, clustercache.ErrClusterNotConnected) {
			return 0, err
		}
		waited := r.Clock.Since(ca.DeletionTimestamp.Time)
		if waited < r.WorkloadCleanupTimeout {
			s.cleanupWait = fmt.Sprintf(
				"Waiting up to %s after deletion for the workload cluster, to remove the scale-down taints from its Nodes: %v", r.WorkloadCleanupTimeout, err)
			return min(r.WorkloadCleanupTimeout-waited, maxCleanupRetryInterval), nil
		}
		ctrl.LoggerFrom(ctx).Info("Giving up removing the scale-down taints of an unreachable workload cluster", "waited", r.WorkloadCleanupTimeout)
		r.Recorder.Eventf(ca, corev1.EventTypeWarning, autoscalingv1alpha1.WorkloadClusterUnreachableReason,
			"The workload cluster could not be reached within %s of the deletion: the autoscaler's %s taints stay on the Nodes that have them",
			r.WorkloadCleanupTimeout, nodefacts.ToBeDeletedTaint)
		return 0, nil
	}

	restConfig, err := r.ClusterCache.GetRESTConfig(ctx, clusterKey(ca))
	if err != nil {
		return 0, err
	}
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return 0, fmt.Errorf("creating a clientset for workload cluster %s: %w", clusterKey(ca), err)
	}
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes); err != nil {
		return 0, fmt.Errorf("listing the Nodes of workload cluster %s: %w", clusterKey(ca), err)
	}
	var errs []error
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if !scaledown.OwnsDeletionTaint(node) && node.Annotations[scaledown.CordonedAnnotation] == "" {
			continue
		}
		released, err := scaledown.ReleaseNode(ctx, clientset, r.marksOwner(ca), node.Name)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("removing the scale-down taint of Node %s: %w", node.Name, err))
		case released:
			ctrl.LoggerFrom(ctx).Info("Removed the scale-down taint", "Node", klog.KObj(node))
		default:
			ctrl.LoggerFrom(ctx).Info("Left the scale-down taint that the engine of another ClusterAutoscaler placed", "Node", klog.KObj(node))
		}
	}
	return 0, kerrors.NewAggregate(errs)
}
