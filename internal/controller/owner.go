package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// clusterOwner returns the ClusterAutoscaler that owns the Cluster ca names,
// ca itself or another: of the ClusterAutoscalers that name the Cluster, the
// oldest, ties broken by name (creation times have a resolution of a
// second). Only the owner runs an engine for the Cluster.
//
// A ClusterAutoscaler being deleted still owns its Cluster, so that its
// cleanup never races the engine of the next owner. Every ClusterAutoscaler
// counts, whatever its watch-filter label, so that two managers never
// autoscale one Cluster either.
func (r *ClusterAutoscalerReconciler) clusterOwner(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (*autoscalingv1alpha1.ClusterAutoscaler, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	if err := r.Client.List(ctx, list, client.InNamespace(ca.Namespace), client.MatchingFields{clusterNameField: ca.Spec.ClusterName}); err != nil {
		return nil, fmt.Errorf("listing the ClusterAutoscalers of Cluster %s: %w", clusterKey(ca), err)
	}
	owner := ca
	for i := range list.Items {
		other := &list.Items[i]
		created, ownerCreated := other.CreationTimestamp.Time, owner.CreationTimestamp.Time
		if created.Before(ownerCreated) || (created.Equal(ownerCreated) && other.Name < owner.Name) {
			owner = other
		}
	}
	return owner, nil
}

// refuse keeps ca from autoscaling the Cluster that owner owns: it stops an
// engine that ca may have started before owner was created in the same
// second, and reports that owner serves the Cluster. The status keeps only
// the conditions: the owner's status tells how the Cluster is autoscaled.
func (r *ClusterAutoscalerReconciler) refuse(ctx context.Context, ca, owner *autoscalingv1alpha1.ClusterAutoscaler) {
	r.stopEngine(ctx, client.ObjectKeyFromObject(ca))
	message := fmt.Sprintf("ClusterAutoscaler %s already autoscales Cluster %s; this one takes over if it is deleted", owner.Name, clusterKey(ca))
	// One event when refused, not one per reconcile.
	if ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition); ready == nil || ready.Reason != autoscalingv1alpha1.ClusterAlreadyAutoscaledReason || ready.Message != message {
		ctrl.LoggerFrom(ctx).Info("Refusing to autoscale a Cluster that another ClusterAutoscaler autoscales", "owner", owner.Name)
		r.Recorder.Eventf(ca, owner, corev1.EventTypeWarning, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, autoscaleAction, "%s", message)
	}
	setNotRunning(ca, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, message)
	setCondition(ca, autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, message)
	ca.Status = autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: ca.Status.Conditions}
}

// clusterAutoscalerToOthers maps a ClusterAutoscaler that was created or
// deleted to the ClusterAutoscalers of its Cluster, as either may change
// which of them owns it.
func (r *ClusterAutoscalerReconciler) clusterAutoscalerToOthers(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) []ctrl.Request {
	return r.clusterAutoscalersOf(ctx, clusterKey(ca))
}
