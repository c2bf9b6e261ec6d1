package clusterapi

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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

// The ClusterAutoscaler the node groups of the tests serve, and another
// that exists.
const (
	ownUID     types.UID = "c0ffee00-0000-4000-8000-000000000001"
	anotherUID types.UID = "c0ffee00-0000-4000-8000-000000000002"
)

// clusterAutoscalers are the ClusterAutoscalers that exist, by UID.
type clusterAutoscalers map[types.UID]types.NamespacedName

func (c clusterAutoscalers) Find(_ context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	key, found := c[uid]
	return key, found, nil
}

func TestClusterAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "clusterapi suite")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	var err error
	testEnv, err = envtest.Start(envtest.Options{
		CRDs: []*apiextensionsv1.CustomResourceDefinition{envtest.InfrastructureMachineTemplateCRD(), envtest.InfrastructureMachinePoolCRD(),
			envtest.OtherProviderMachineTemplateCRD()},
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
