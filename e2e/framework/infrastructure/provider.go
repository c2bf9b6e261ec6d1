// Package infrastructure is a simulated Cluster API infrastructure and control
// plane provider for the end-to-end tests. Machines become kwok Nodes in the
// workload cluster; the control plane is an API server of the local stack.
package infrastructure

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/controllers"
)

// Options configure the provider.
type Options struct {
	// WorkloadKubeconfig is the admin kubeconfig of the API server that every
	// SimControlPlane stands for; it becomes the Cluster's kubeconfig Secret.
	WorkloadKubeconfig []byte
}

// NewManager returns a manager running the provider's controllers against the
// management cluster.
func NewManager(cfg *rest.Config, opts Options) (manager.Manager, error) {
	if len(opts.WorkloadKubeconfig) == 0 {
		return nil, fmt.Errorf("the workload kubeconfig is required")
	}
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, infrav1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	workloads := controllers.NewWorkloadClients()
	reconcilers := []interface{ SetupWithManager(manager.Manager) error }{
		&controllers.SimClusterReconciler{Client: mgr.GetClient()},
		&controllers.SimControlPlaneReconciler{Client: mgr.GetClient(), Kubeconfig: opts.WorkloadKubeconfig},
		&controllers.SimMachineReconciler{Client: mgr.GetClient(), Workloads: workloads},
		&controllers.SimMachineTemplateReconciler{Client: mgr.GetClient()},
		&controllers.SimMachinePoolReconciler{Client: mgr.GetClient()},
	}
	for _, r := range reconcilers {
		if err := r.SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}
