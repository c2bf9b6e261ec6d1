package template

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var (
	testEnv   *envtest.Environment
	k8sClient client.Client
)

func TestTemplate(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "template suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = envtest.Start(envtest.Options{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{envtest.InfrastructureMachineTemplateCRD()},
	})
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
