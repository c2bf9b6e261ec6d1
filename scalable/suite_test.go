package scalable

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
)

// ownUID is the ClusterAutoscaler the resources of the tests serve.
const ownUID types.UID = "ab5c1a1e-0000-4000-8000-000000000001"

func TestScalable(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "scalable suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = envtest.Start(envtest.Options{})
	Expect(err).NotTo(HaveOccurred())
	k8sClient = testEnv.Client
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
