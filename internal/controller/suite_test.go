package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/flowcontrol"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faults"
)

const (
	// testCleanupTimeout is how long deletion waits for an unreachable
	// workload cluster in these tests.
	testCleanupTimeout = 3 * time.Second
	// testRestartDelay and testMaxRestartDelay are the delays before a new
	// engine starts after a panic in these tests.
	testRestartDelay    = time.Second
	testMaxRestartDelay = 4 * time.Second
)

var (
	ctx        context.Context
	env        *testenv.Environment
	k8sClient  client.Client
	reconciler *ClusterAutoscalerReconciler
	// metrics is where the engines' and the conditions' metrics are
	// registered.
	metrics *prometheus.Registry
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ClusterAutoscaler controller")
}

var _ = BeforeSuite(func() {
	var cancel context.CancelFunc
	ctx, cancel = context.WithCancel(ctrl.LoggerInto(context.Background(), GinkgoLogr))
	ctrl.SetLogger(GinkgoLogr)

	var err error
	env, err = testenv.Start(testenv.Options{
		CRDs:         []*apiextensionsv1.CustomResourceDefinition{testenv.InfrastructureMachineTemplateCRD()},
		AddToScheme:  []func(*runtime.Scheme) error{autoscalingv1alpha1.AddToScheme, capacitybufferv1beta1.AddToScheme, provisioningv1.AddToScheme},
		WorkloadCRDs: true,
	})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = env.Client

	// The manager is set up as internal/manager sets it up.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor:   []client.Object{&corev1.Secret{}},
			Unstructured: true,
		}},
		Cache: cache.Options{ByObject: ClusterCacheByObject()},
	})
	Expect(err).NotTo(HaveOccurred())
	clusterCache, kubeconfigs, err := SetupClusterCache(ctx, mgr, clustercache.Options{
		Cache:  WorkloadCacheOptions(),
		Client: clustercache.ClientOptions{UserAgent: "capi-autoscaler-test"},
	}, controller.Options{MaxConcurrentReconciles: 10})
	Expect(err).NotTo(HaveOccurred())

	recorder, stopRecording, err := NewEventRecorder(ctx, mgr)
	Expect(err).NotTo(HaveOccurred())
	metrics = prometheus.NewRegistry()
	reconciler = &ClusterAutoscalerReconciler{
		Leases:              testLeases("envtest-manager"),
		Client:              mgr.GetClient(),
		ClusterCache:        clusterCache,
		WorkloadKubeconfigs: kubeconfigs,
		Recorder:            recorder,
		Metrics:             autoscaler.NewMetrics(metrics),
		ConditionMetrics:    NewConditionMetrics(metrics),
		// Their node groups panic on request.
		NodeGroups:             faults.PanickingNodeGroups,
		WorkloadCleanupTimeout: testCleanupTimeout,
		restarts:               flowcontrol.NewBackOff(testRestartDelay, testMaxRestartDelay),
	}
	Expect(reconciler.SetupWithManager(ctx, mgr, controller.Options{MaxConcurrentReconciles: 4})).To(Succeed())

	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	DeferCleanup(func() {
		cancel()
		Eventually(stopped, time.Minute).Should(BeClosed())
		stopRecording()
		// The workload cluster caches outlive the manager; their watches
		// would hold up the API server's shutdown.
		clusterCache.(interface{ Shutdown() }).Shutdown()
		Expect(env.Stop()).To(Succeed())
	})
})

// testLeases are the Cluster Leases of a manager of the suite, named
// identity, on the test API server, with timings short enough for specs
// that wait for one to expire.
func testLeases(identity string) *ClusterLeases {
	GinkgoHelper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	return &ClusterLeases{Client: clientset.CoordinationV1(), Identity: identity, Timings: testLeaseTimings}
}

// testLeaseTimings are those of the suite's Cluster Leases.
var testLeaseTimings = ClusterLeaseTimings{LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
