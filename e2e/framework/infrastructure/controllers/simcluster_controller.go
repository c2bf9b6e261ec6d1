package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

// SimClusterReconciler provisions SimClusters at once: the simulated
// infrastructure is always there.
type SimClusterReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *SimClusterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.SimCluster{}).Complete(r)
}

// Reconcile publishes the failure domains and marks the SimCluster provisioned.
func (r *SimClusterReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	simCluster := &infrav1.SimCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, simCluster); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !simCluster.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	before := simCluster.DeepCopy()
	simCluster.Status.FailureDomains = nil
	for _, name := range simCluster.Spec.FailureDomains {
		simCluster.Status.FailureDomains = append(simCluster.Status.FailureDomains, clusterv1.FailureDomain{Name: name, ControlPlane: ptr.To(true)})
	}
	simCluster.Status.Initialization.Provisioned = ptr.To(true)
	meta.SetStatusCondition(&simCluster.Status.Conditions, metav1.Condition{
		Type:               infrav1.ReadyCondition,
		Status:             metav1.ConditionTrue,
		Reason:             infrav1.ProvisionedReason,
		ObservedGeneration: simCluster.Generation,
	})
	if err := r.Client.Status().Patch(ctx, simCluster, client.MergeFrom(before)); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}
