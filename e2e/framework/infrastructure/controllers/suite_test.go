package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	infracrd "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/config/crd"
)

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
	// workloadKubeconfig reaches the test API server, which plays the workload
	// cluster too.
	workloadKubeconfig []byte
)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "simulated provider controllers suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	crds, err := infracrd.CRDs()
	Expect(err).NotTo(HaveOccurred())
	testEnv, err = envtest.Start(envtest.Options{CRDs: crds, AddToScheme: []func(*runtime.Scheme) error{infrav1.AddToScheme}})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = testEnv.Client

	cfg := testEnv.Config
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	workloadKubeconfig, err = clientcmd.Write(*kc)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// testContext carries the suite's logger, as the manager's context would.
func testContext() context.Context {
	return ctrl.LoggerInto(context.Background(), ctrl.Log)
}
