package main

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// The older version is the storage version under another name, served and
// deprecated; the file keeps controller-gen's form, so running it twice is
// refused rather than adding the version again.
func TestOlderVersionsAreTheStorageVersionUnderAnotherName(t *testing.T) {
	g := NewWithT(t)
	original, err := os.ReadFile("../../config/workload-crd/bases/autoscaling.x-k8s.io_provisioningrequests.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var crd apiextensionsv1.CustomResourceDefinition
	g.Expect(yaml.Unmarshal(original, &crd)).To(Succeed())
	// The file in the repository has the older version already: start from
	// what controller-gen writes.
	crd.Spec.Versions = crd.Spec.Versions[:1]
	generated, err := yaml.Marshal(map[string]any{"apiVersion": crd.APIVersion, "kind": crd.Kind,
		"metadata": map[string]any{"name": crd.Name}, "spec": crd.Spec})
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "crd.yaml")
	g.Expect(os.WriteFile(path, generated, 0o644)).To(Succeed())

	g.Expect(addVersions(path, []string{"v1beta1"})).To(Succeed())

	written, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	var got apiextensionsv1.CustomResourceDefinition
	g.Expect(yaml.Unmarshal(written, &got)).To(Succeed())
	g.Expect(got.Spec.Versions).To(HaveLen(2))
	current, older := got.Spec.Versions[0], got.Spec.Versions[1]
	g.Expect(current.Name).To(Equal("v1"))
	g.Expect(current.Storage).To(BeTrue())
	g.Expect(older.Name).To(Equal("v1beta1"))
	g.Expect(older.Served).To(BeTrue())
	g.Expect(older.Storage).To(BeFalse(), "one version is stored")
	g.Expect(older.Deprecated).To(BeTrue())
	g.Expect(*older.DeprecationWarning).To(Equal("autoscaling.x-k8s.io/v1beta1 is deprecated: use autoscaling.x-k8s.io/v1, the same schema"))
	g.Expect(older.Schema).To(Equal(current.Schema))
	g.Expect(older.Subresources).To(Equal(current.Subresources))
	g.Expect(older.AdditionalPrinterColumns).To(Equal(current.AdditionalPrinterColumns))

	g.Expect(addVersions(path, []string{"v1beta1"})).To(MatchError(ContainSubstring("version v1beta1 is there already")))
}
