package v1_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningrequestv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/schematest"
)

var (
	k8sClient client.Client
	// clientset reads what kubectl reads: discovery and table rows.
	clientset *kubernetes.Clientset
	ctx       context.Context
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ProvisioningRequest API schema")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	env := schematest.Start(true, provisioningrequestv1.AddToScheme)
	k8sClient = env.Client
	clientset = env.Clientset
})
