package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

// SimMachineTemplateReconciler publishes what a machine of a template offers,
// for autoscalers that scale a node group up from zero.
type SimMachineTemplateReconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler.
func (r *SimMachineTemplateReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).For(&infrav1.SimMachineTemplate{}).Complete(r)
}

// Reconcile copies the template's capacity and node info to its status.
func (r *SimMachineTemplateReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	template := &infrav1.SimMachineTemplate{}
	if err := r.Client.Get(ctx, req.NamespacedName, template); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	spec := template.Spec.Template.Spec
	before := template.DeepCopy()
	template.Status.Capacity = spec.Capacity.DeepCopy()
	template.Status.NodeInfo = &infrav1.NodeInfo{
		Architecture:    architecture(spec),
		OperatingSystem: operatingSystem(spec),
	}
	return ctrl.Result{}, client.IgnoreNotFound(r.Client.Status().Patch(ctx, template, client.MergeFrom(before)))
}

func architecture(spec infrav1.SimMachineSpec) string {
	if spec.Architecture == "" {
		return "amd64"
	}
	return spec.Architecture
}

func operatingSystem(spec infrav1.SimMachineSpec) string {
	if spec.OperatingSystem == "" {
		return "linux"
	}
	return spec.OperatingSystem
}
