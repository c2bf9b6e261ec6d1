// Package kustomize renders the kustomizations under config/ for tests,
// with the kustomize library rather than a kustomize binary.
package kustomize

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build renders the kustomization in dir into its objects.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", dir, err)
	}
	objects := make([]*unstructured.Unstructured, 0, resources.Size())
	for _, resource := range resources.Resources() {
		fields, err := resource.Map()
		if err != nil {
			return nil, fmt.Errorf("building %s: %w", dir, err)
		}
		objects = append(objects, &unstructured.Unstructured{Object: fields})
	}
	return objects, nil
}
