package v1beta1_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
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
	RunSpecs(t, "CapacityBuffer API schema")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	env := schematest.Start(true, capacitybufferv1beta1.AddToScheme)
	k8sClient = env.Client
	clientset = env.Clientset
})
