// Package schematest holds what the schema suites of the API packages
// share: an API server serving their CRDs, the examples users write, read
// from testdata, and objects created for one spec.
package schematest

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

// Environment is an API server serving the CRDs under test.
type Environment struct {
	*testenv.Environment
	// Clientset reads what kubectl reads: discovery and table rows.
	Clientset *kubernetes.Clientset
}

// Start starts an API server with the project's CRDs, or with the CRDs of
// workload clusters, and a client that knows the types addToScheme adds.
// It stops when the suite ends.
func Start(workloadCRDs bool, addToScheme func(*runtime.Scheme) error) *Environment {
	GinkgoHelper()
	env, err := testenv.Start(testenv.Options{
		AddToScheme:        []func(*runtime.Scheme) error{addToScheme},
		WithoutProjectCRDs: workloadCRDs,
		WorkloadCRDs:       workloadCRDs,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)
	clientset, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	return &Environment{Environment: env, Clientset: clientset}
}

// ReadExample returns the object of a YAML file in testdata, as a user
// writes it, in the namespace default.
func ReadExample(file string) *unstructured.Unstructured {
	GinkgoHelper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	Expect(err).NotTo(HaveOccurred())
	data, err = yaml.YAMLToJSON(data)
	Expect(err).NotTo(HaveOccurred())
	example := &unstructured.Unstructured{}
	Expect(example.UnmarshalJSON(data)).To(Succeed())
	example.SetNamespace(metav1.NamespaceDefault)
	return example
}

// CreateForTest creates obj and deletes it when the spec ends.
func CreateForTest(ctx context.Context, c client.Client, obj client.Object) {
	GinkgoHelper()
	Expect(c.Create(ctx, obj)).To(Succeed())
	DeferCleanup(func(ctx context.Context) { Expect(client.IgnoreNotFound(c.Delete(ctx, obj))).To(Succeed()) })
}

// ExpectServedAsOlderVersion creates the example in file through an older
// version of its API, as a client of the upstream autoscaler's older CRD
// does, and expects discovery to list its kind in that version, the fields
// as written kept (defaults may be added), and the object to read the same
// through the version of the example.
func ExpectServedAsOlderVersion(ctx context.Context, c client.Client, clientset *kubernetes.Clientset, file, olderAPIVersion string) {
	GinkgoHelper()
	example := ReadExample(file)
	resources, err := clientset.Discovery().ServerResourcesForGroupVersion(olderAPIVersion)
	Expect(err).NotTo(HaveOccurred(), "%s is not served", olderAPIVersion)
	Expect(resources.APIResources).To(ContainElement(HaveField("Kind", example.GetKind())))

	older := example.DeepCopy()
	older.SetAPIVersion(olderAPIVersion)
	CreateForTest(ctx, c, older)
	written, _ := example.Object["spec"].(map[string]any)
	for field, value := range written {
		Expect(older.Object["spec"]).To(HaveKeyWithValue(field, value), "the spec as written, through %s", olderAPIVersion)
	}

	current := &unstructured.Unstructured{}
	current.SetAPIVersion(example.GetAPIVersion())
	current.SetKind(example.GetKind())
	Expect(c.Get(ctx, client.ObjectKeyFromObject(older), current)).To(Succeed())
	Expect(current.Object["spec"]).To(Equal(older.Object["spec"]), "the spec read through %s", example.GetAPIVersion())
}
