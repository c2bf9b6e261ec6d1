package controllers

import (
	"context"
	"net"
	"net/url"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

// SimControlPlaneReconciler points Clusters at the local stack's workload API
// server: it writes the Cluster's kubeconfig Secret, as a control plane
// provider does, and reports the control plane initialized.
type SimControlPlaneReconciler struct {
	Client     client.Client
	Kubeconfig []byte
}

// SetupWithManager registers the reconciler.
func (r *SimControlPlaneReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&infrav1.SimControlPlane{}).
		Owns(&corev1.Secret{}).
		Complete(r)
}

// Reconcile writes the kubeconfig Secret and reports the endpoint.
func (r *SimControlPlaneReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)

	controlPlane := &infrav1.SimControlPlane{}
	if err := r.Client.Get(ctx, req.NamespacedName, controlPlane); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !controlPlane.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	// The Cluster controller labels the control plane with its Cluster once
	// it adopts it.
	clusterName, ok := controlPlane.Labels[clusterv1.ClusterNameLabel]
	if !ok {
		log.V(4).Info("Waiting for the Cluster to adopt the control plane")
		return ctrl.Result{}, nil
	}

	endpoint, err := r.endpoint()
	if err != nil {
		return ctrl.Result{}, err
	}

	kubeconfigSecret := kubeconfig.GenerateSecretWithOwner(
		client.ObjectKey{Namespace: controlPlane.Namespace, Name: clusterName},
		r.Kubeconfig,
		*metav1.NewControllerRef(controlPlane, infrav1.GroupVersion.WithKind("SimControlPlane")),
	)
	if err := r.Client.Create(ctx, kubeconfigSecret); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return ctrl.Result{}, err
		}
	} else {
		log.Info("Created the kubeconfig Secret of the Cluster", "Secret", klog.KObj(kubeconfigSecret))
	}

	before := controlPlane.DeepCopy()
	controlPlane.Spec.ControlPlaneEndpoint = endpoint
	if err := r.Client.Patch(ctx, controlPlane, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before = controlPlane.DeepCopy()
	controlPlane.Status.Initialization.ControlPlaneInitialized = ptr.To(true)
	controlPlane.Status.ExternalManagedControlPlane = ptr.To(true)
	meta.SetStatusCondition(&controlPlane.Status.Conditions, metav1.Condition{
		Type:               infrav1.AvailableCondition,
		Status:             metav1.ConditionTrue,
		Reason:             infrav1.ProvisionedReason,
		ObservedGeneration: controlPlane.Generation,
	})
	if err := r.Client.Status().Patch(ctx, controlPlane, client.MergeFrom(before)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return ctrl.Result{}, nil
}

// endpoint is the server of the workload kubeconfig.
func (r *SimControlPlaneReconciler) endpoint() (clusterv1.APIEndpoint, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(r.Kubeconfig)
	if err != nil {
		return clusterv1.APIEndpoint{}, err
	}
	server, err := url.Parse(cfg.Host)
	if err != nil {
		return clusterv1.APIEndpoint{}, err
	}
	host, portString, err := net.SplitHostPort(server.Host)
	if err != nil {
		return clusterv1.APIEndpoint{}, err
	}
	port, err := strconv.ParseInt(portString, 10, 32)
	if err != nil {
		return clusterv1.APIEndpoint{}, err
	}
	return clusterv1.APIEndpoint{Host: host, Port: int32(port)}, nil
}
