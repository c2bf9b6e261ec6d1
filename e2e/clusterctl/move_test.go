package clusterctl

import (
	"context"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	autoscalercontroller "github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// reconcileTimeout bounds the wait for the controller's first reconcile.
const reconcileTimeout = time.Minute

// startTargetManagementCluster starts a second API server, the target of a
// move, with Cluster API and capi-autoscaler at version installed as
// `clusterctl init` installs them, and returns it with its kubeconfig.
func startTargetManagementCluster(clusterctl client.Client, version string) (*testenv.Environment, client.Kubeconfig) {
	GinkgoHelper()
	target, err := startManagementCluster()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(target.Stop)

	targetKubeconfig := client.Kubeconfig{Path: filepath.Join(GinkgoT().TempDir(), "kubeconfig")}
	Expect(writeKubeconfig(target.Config, targetKubeconfig.Path)).To(Succeed())
	Expect(registerCoreProvider(ctx, target, targetKubeconfig)).To(Succeed())
	_, err = clusterctl.Init(ctx, client.InitOptions{
		Kubeconfig:     targetKubeconfig,
		AddonProviders: []string{providerName + ":" + version},
	})
	Expect(err).NotTo(HaveOccurred())
	return target, targetKubeconfig
}

// runController runs the ClusterAutoscaler controller on the management
// cluster of e until the spec ends, as internal/manager sets it up.
func runController(e *testenv.Environment) {
	GinkgoHelper()
	ctrl.SetLogger(GinkgoLogr)
	managerCtx, cancel := context.WithCancel(ctrl.LoggerInto(ctx, GinkgoLogr))
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 e.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client: ctrlclient.Options{Cache: &ctrlclient.CacheOptions{
			DisableFor:   []ctrlclient.Object{&corev1.Secret{}},
			Unstructured: true,
		}},
		Cache: cache.Options{ByObject: autoscalercontroller.ClusterCacheByObject()},
	})
	Expect(err).NotTo(HaveOccurred())
	clusterCache, kubeconfigs, err := autoscalercontroller.SetupClusterCache(managerCtx, mgr, clustercache.Options{
		Cache:  autoscalercontroller.WorkloadCacheOptions(),
		Client: clustercache.ClientOptions{UserAgent: "capi-autoscaler-test"},
	}, controller.Options{})
	Expect(err).NotTo(HaveOccurred())
	leaseClient, err := kubernetes.NewForConfig(mgr.GetConfig())
	Expect(err).NotTo(HaveOccurred())
	recorder, stopRecording, err := autoscalercontroller.NewEventRecorder(managerCtx, mgr)
	Expect(err).NotTo(HaveOccurred())
	reconciler := &autoscalercontroller.ClusterAutoscalerReconciler{
		Leases:              &autoscalercontroller.ClusterLeases{Client: leaseClient.CoordinationV1(), Identity: "move-source-manager"},
		Client:              mgr.GetClient(),
		ClusterCache:        clusterCache,
		WorkloadKubeconfigs: kubeconfigs,
		Recorder:            recorder,
	}
	Expect(reconciler.SetupWithManager(managerCtx, mgr, controller.Options{})).To(Succeed())

	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		Expect(mgr.Start(managerCtx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(stopped, time.Minute).Should(BeClosed())
		stopRecording()
		clusterCache.(interface{ Shutdown() }).Shutdown()
	})
}

// createProvisionedCluster creates a Cluster in a new namespace, with the
// status clusterctl move requires before it moves a Cluster: infrastructure
// provisioned and control plane initialized.
func createProvisionedCluster(c ctrlclient.Client) *clusterv1.Cluster {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "move-"}}
	Expect(c.Create(ctx, ns)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "workload"},
		// Not only paused: resuming removes it, and the spec must not be empty.
		Spec: clusterv1.ClusterSpec{
			Paused:               ptr.To(false),
			ControlPlaneEndpoint: clusterv1.APIEndpoint{Host: "workload.example.com", Port: 6443},
		},
	}
	Expect(c.Create(ctx, cluster)).To(Succeed())
	cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	conditions.Set(cluster, metav1.Condition{
		Type:   clusterv1.ClusterControlPlaneInitializedCondition,
		Status: metav1.ConditionTrue,
		Reason: clusterv1.ClusterControlPlaneInitializedReason,
	})
	Expect(c.Status().Update(ctx, cluster)).To(Succeed())
	return cluster
}
