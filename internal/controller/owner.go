package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// clusterOwner returns the ClusterAutoscaler that owns the Cluster ca names,
// ca itself or another (see ownerOfCluster). Only the owner runs an engine
// for the Cluster.
func (r *ClusterAutoscalerReconciler) clusterOwner(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) (*autoscalingv1alpha1.ClusterAutoscaler, error) {
	owner, err := ownerOfCluster(ctx, r.Client, clusterKey(ca))
	if err != nil {
		return nil, err
	}
	// The cache may not have ca yet.
	if owner == nil || !ownsBefore(owner, ca) {
		return ca, nil
	}
	return owner, nil
}

// ownerOfCluster returns the ClusterAutoscaler that owns a Cluster, nil
// when none names it: of the Active ClusterAutoscalers that name the
// Cluster, the oldest, ties broken by name (creation times have a
// resolution of a second); when none is Active, the oldest DryRun one. The
// owner runs the Cluster's engine, and its spec.workloadKubeconfigSecretRef
// says how the Cluster is reached, for the DryRun ClusterAutoscalers
// beside it too: they act on nothing, so they neither own a Cluster that
// an Active one autoscales nor are refused.
//
// A ClusterAutoscaler being deleted still owns its Cluster, so that its
// cleanup never races the engine of the next owner. Every ClusterAutoscaler
// counts, whatever its watch-filter label, so that two managers never
// autoscale one Cluster either.
func ownerOfCluster(ctx context.Context, c client.Reader, cluster client.ObjectKey) (*autoscalingv1alpha1.ClusterAutoscaler, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	if err := c.List(ctx, list, client.InNamespace(cluster.Namespace), client.MatchingFields{clusterNameField: cluster.Name}); err != nil {
		return nil, fmt.Errorf("listing the ClusterAutoscalers of Cluster %s: %w", cluster, err)
	}
	var owner *autoscalingv1alpha1.ClusterAutoscaler
	for i := range list.Items {
		if other := &list.Items[i]; owner == nil || ownsBefore(other, owner) {
			owner = other
		}
	}
	return owner, nil
}

// ownsBefore says whether a comes before b as the owner of their Cluster.
func ownsBefore(a, b *autoscalingv1alpha1.ClusterAutoscaler) bool {
	if aDry, bDry := isDryRun(a), isDryRun(b); aDry != bDry {
		return bDry
	}
	created, otherCreated := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	return created.Before(otherCreated) || (created.Equal(otherCreated) && a.Name < b.Name)
}

// isDryRun says whether ca only publishes what it would do.
func isDryRun(ca *autoscalingv1alpha1.ClusterAutoscaler) bool {
	return ca.Spec.Mode == autoscalingv1alpha1.DryRunMode
}

// refuse keeps ca from autoscaling the Cluster that owner owns: it stops an
// engine that ca may have started before owner was created in the same
// second, and reports that owner serves the Cluster. The status keeps only
// the conditions: the owner's status tells how the Cluster is autoscaled.
func (r *ClusterAutoscalerReconciler) refuse(ctx context.Context, s *reconcileScope, owner *autoscalingv1alpha1.ClusterAutoscaler) {
	ca := s.ca
	r.stopEngine(ctx, client.ObjectKeyFromObject(ca))
	message := fmt.Sprintf("ClusterAutoscaler %s already autoscales Cluster %s; this one takes over if it is deleted", owner.Name, clusterKey(ca))
	// One event when refused, not one per reconcile.
	if ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition); ready == nil || ready.Reason != autoscalingv1alpha1.ClusterAlreadyAutoscaledReason || ready.Message != message {
		ctrl.LoggerFrom(ctx).Info("Refusing to autoscale a Cluster that another ClusterAutoscaler autoscales", "owner", owner.Name)
		r.Recorder.Eventf(ca, corev1.EventTypeWarning, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, "%s", message)
	}
	s.stop(autoscalingv1alpha1.ClusterAlreadyAutoscaledReason, message)
	s.refused = true
}

// clusterAutoscalerToOthers maps a ClusterAutoscaler that was created,
// deleted or changed its mode to the ClusterAutoscalers of its Cluster, as
// each may change which of them owns it.
func (r *ClusterAutoscalerReconciler) clusterAutoscalerToOthers(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) []ctrl.Request {
	return r.clusterAutoscalersOf(ctx, clusterKey(ca))
}
