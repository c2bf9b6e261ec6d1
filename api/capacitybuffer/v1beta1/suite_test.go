package v1beta1_test

import (
	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
)

var (
	testEnv   *envtest.Environment
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
	testEnv = &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "..", "config", "workload-crd", "bases")},
		ErrorIfCRDPathMissing: true,
		// Used when KUBEBUILDER_ASSETS is unset, e.g. under a plain go test.
		BinaryAssetsDirectory: filepath.Join("..", "..", "..", "bin", "k8s"),
	}
	cfg, err := testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "starting envtest; run 'make test' to build kube-apiserver and etcd into bin/k8s")

	scheme := runtime.NewScheme()
	Expect(capacitybufferv1beta1.AddToScheme(scheme)).To(Succeed())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	clientset, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
