// Package helmchart renders the Helm chart charts/capi-autoscaler for
// tests as `helm install` renders it, with the Helm library rather than a
// helm binary: values coalesced with values.yaml and checked against a
// schema if the chart has one, templates rendered, manifests in Helm's
// install order.
package helmchart

import (
	"fmt"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Dir is the chart, relative to the repository's root.
const Dir = "charts/capi-autoscaler"

// Release is what `helm install NAME --namespace NAMESPACE` says.
type Release struct {
	Name      string
	Namespace string
}

// Options of Render.
type Options struct {
	// Values are what --values and --set would give.
	Values map[string]any
	// Strict fails on a template that reads a value values.yaml does not
	// have.
	Strict bool
}

// Rendered is a rendered release.
type Rendered struct {
	// Objects are its objects, in Helm's install order.
	Objects []*unstructured.Unstructured
	// Notes is what NOTES.txt says.
	Notes string
}

// Render renders the chart in dir (the repository's Dir) for a new
// release.
func Render(dir string, release Release, opts Options) (*Rendered, error) {
	chart, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	values, err := chartutil.ToRenderValues(chart, opts.Values, chartutil.ReleaseOptions{
		Name: release.Name, Namespace: release.Namespace, Revision: 1, IsInstall: true,
	}, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	files, err := engine.Engine{Strict: opts.Strict}.Render(chart, values)
	if err != nil {
		return nil, err
	}
	rendered := &Rendered{}
	for path, content := range files {
		if filepath.Base(path) == "NOTES.txt" {
			rendered.Notes = content
			delete(files, path)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	if len(hooks) > 0 {
		return nil, fmt.Errorf("the chart has hooks, which Render does not run: %s", hooks[0].Path)
	}
	for _, manifest := range manifests {
		if strings.TrimSpace(manifest.Content) == "" {
			continue
		}
		content, err := yaml.YAMLToJSON([]byte(manifest.Content))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", manifest.Name, err)
		}
		if string(content) == "null" {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(content); err != nil {
			return nil, fmt.Errorf("%s: %w", manifest.Name, err)
		}
		rendered.Objects = append(rendered.Objects, obj)
	}
	return rendered, nil
}

// ParseValues reads values written as a values file.
func ParseValues(content string) (map[string]any, error) {
	values, err := chartutil.ReadValues([]byte(content))
	if err != nil {
		return nil, err
	}
	return values.AsMap(), nil
}

// Find returns the object of a kind and name, or nil.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, obj := range r.Objects {
		if obj.GetKind() == kind && obj.GetName() == name {
			return obj
		}
	}
	return nil
}
