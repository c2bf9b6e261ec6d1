package v1alpha1_test

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/schematest"
)

var (
	k8sClient client.Client
	ctx       context.Context
)

func TestAPI(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "ClusterAutoscaler API schema")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	env := schematest.Start(false, autoscalingv1alpha1.AddToScheme)
	k8sClient = env.Client
})
