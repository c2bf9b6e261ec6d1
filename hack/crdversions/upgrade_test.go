package main

import (
	"context"
	"os"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

// TestInstallingOverUpstreamCRDs installs our workload CRDs, as `make
// manifests` writes them, over the upstream cluster-autoscaler's CRDs of
// the older versions, with an object stored in that version: the API server
// accepts them, and the object reads in both versions. The CRDs as
// controller-gen alone writes them, without the older version, are
// refused: an API server keeps every version named in status.storedVersions.
func TestInstallingOverUpstreamCRDs(t *testing.T) {
	g := NewWithT(t)
	env, err := envtest.Start(envtest.Options{WithoutProjectCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c := env.Client
	ctx := context.Background()

	for _, tc := range []struct {
		file, older, current string
		object               string
	}{{
		file: "autoscaling.x-k8s.io_capacitybuffers.yaml", older: "v1alpha1", current: "v1beta1",
		object: `{"kind":"CapacityBuffer","metadata":{"name":"warm","namespace":"default"},"spec":{"podTemplateRef":{"name":"one-cpu"},"replicas":2}}`,
	}, {
		file: "autoscaling.x-k8s.io_provisioningrequests.yaml", older: "v1beta1", current: "v1",
		object: `{"kind":"ProvisioningRequest","metadata":{"name":"batch","namespace":"default"},"spec":{"provisioningClassName":"check-capacity.autoscaling.x-k8s.io","podSets":[{"podTemplateRef":{"name":"one-cpu"},"count":2}]}}`,
	}} {
		t.Run(tc.file, func(t *testing.T) {
			g := NewWithT(t)
			ours := readCRD(g, "../../config/workload-crd/bases/"+tc.file)

			// The CRD as upstream had it: the older version alone, stored.
			upstream := ours.DeepCopy()
			upstream.Spec.Versions = nil
			for _, v := range ours.Spec.Versions {
				if v.Name == tc.older {
					v.Storage, v.Deprecated, v.DeprecationWarning = true, false, nil
					upstream.Spec.Versions = append(upstream.Spec.Versions, v)
				}
			}
			g.Expect(upstream.Spec.Versions).To(HaveLen(1), "our CRD serves %s", tc.older)
			g.Expect(c.Create(ctx, upstream)).To(Succeed())
			g.Eventually(func(g Gomega) {
				g.Expect(c.Get(ctx, client.ObjectKeyFromObject(upstream), upstream)).To(Succeed())
				g.Expect(upstream.Status.AcceptedNames.Kind).NotTo(BeEmpty())
			}).Should(Succeed())

			// An object stored in the older version.
			obj := &unstructured.Unstructured{}
			g.Expect(obj.UnmarshalJSON([]byte(tc.object))).To(Succeed())
			obj.SetAPIVersion("autoscaling.x-k8s.io/" + tc.older)
			g.Eventually(func() error { return c.Create(ctx, obj.DeepCopy()) }).Should(Succeed())

			// Our CRD without the older version is refused.
			controllerGen := ours.DeepCopy()
			controllerGen.Spec.Versions = controllerGen.Spec.Versions[:1]
			g.Expect(controllerGen.Spec.Versions[0].Name).To(Equal(tc.current))
			g.Expect(install(ctx, c, controllerGen)).To(MatchError(ContainSubstring("storedVersions")))

			// Our CRD as make manifests writes it is accepted.
			g.Expect(install(ctx, c, ours)).To(Succeed())

			// The object reads the same in both versions.
			specs := map[string]any{}
			for _, version := range []string{tc.older, tc.current} {
				g.Eventually(func(g Gomega) {
					read := &unstructured.Unstructured{}
					read.SetGroupVersionKind(schema.GroupVersionKind{Group: "autoscaling.x-k8s.io", Version: version, Kind: obj.GetKind()})
					g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), read)).To(Succeed())
					g.Expect(read.Object["spec"]).To(Or(
						HaveKeyWithValue("podTemplateRef", HaveKeyWithValue("name", "one-cpu")),
						HaveKeyWithValue("podSets", ContainElement(HaveKeyWithValue("podTemplateRef", HaveKeyWithValue("name", "one-cpu"))))))
					specs[version] = read.Object["spec"]
				}).Should(Succeed(), "reading %s in %s", obj.GetName(), version)
			}
			g.Expect(specs[tc.older]).To(Equal(specs[tc.current]))
		})
	}
}

func readCRD(g Gomega, path string) *apiextensionsv1.CustomResourceDefinition {
	data, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	g.Expect(yaml.Unmarshal(data, crd)).To(Succeed())
	return crd
}

// install replaces the CRD of the same name by crd, as kubectl apply
// would: on the version the API server has, which its own status writes
// move on.
func install(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		current := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), current); err != nil {
			return err
		}
		crd.ResourceVersion = current.ResourceVersion
		return c.Update(ctx, crd)
	})
}
