// Command helmchart writes the Helm chart charts/capi-autoscaler from the
// kustomizations of config/, so that the chart and the release manifests
// have one source. It builds config/release (what clusterctl installs) and
// config/monitoring-release with the kustomize library and writes each
// object as a template, in which Helm template expressions replace what
// users choose: the namespace and name prefix, the clusterctl variables,
// the image, replicas and resources, the manager's flags, the pod's
// scheduling, the optional objects, and, in namespace-scoped mode, the
// manager's ClusterRoles and their bindings, which become Roles and
// RoleBindings in the watched namespace (with rbac.namespaces, the binding
// of its namespace role a RoleBinding in each of those namespaces).
// Chart.yaml gets its version from
// metadata.yaml. `make helm-chart` runs it; `make verify` fails when the
// chart differs from what it writes.
//
// With `package`, it packages the chart for a release instead:
//
//	helmchart package --version=v0.1.0 --image=ghcr.io/capi-autoscaler/capi-autoscaler --out=out
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helmchart:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 && args[0] == "package" {
		return packageChart(args[1:])
	}
	flags := flag.NewFlagSet("helmchart", flag.ContinueOnError)
	root := flags.String("repo-root", ".", "The repository's root")
	if err := flags.Parse(args); err != nil {
		return err
	}
	files, err := Generate(*root)
	if err != nil {
		return err
	}
	return Write(filepath.Join(*root, ChartDir), files)
}

// valuesRepository is the image repository line of values.yaml.
var valuesRepository = regexp.MustCompile(`(?m)^  repository: .*$`)

// packageChart writes the chart of a release, capi-autoscaler-<version>.tgz:
// version and appVersion of the release, and its image.
func packageChart(args []string) error {
	flags := flag.NewFlagSet("helmchart package", flag.ContinueOnError)
	root := flags.String("repo-root", ".", "The repository's root")
	version := flags.String("version", "", "The release's version, a semver such as v0.1.0")
	image := flags.String("image", "", "The release's image, without its tag")
	out := flags.String("out", "", "The directory the package is written to")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if !semver.IsValid(*version) || *image == "" || *out == "" {
		return errors.New("package needs --version (a semver such as v0.1.0), --image and --out")
	}
	chart, err := loader.LoadDir(filepath.Join(*root, ChartDir))
	if err != nil {
		return err
	}
	chart.Metadata.Version = strings.TrimPrefix(*version, "v")
	chart.Metadata.AppVersion = *version
	for _, file := range chart.Raw {
		if file.Name != chartutil.ValuesfileName {
			continue
		}
		if len(valuesRepository.FindAll(file.Data, -1)) != 1 {
			return fmt.Errorf("%s must have one `  repository:` line, image.repository", chartutil.ValuesfileName)
		}
		file.Data = valuesRepository.ReplaceAll(file.Data, []byte("  repository: "+*image))
	}
	chart.Values["image"].(map[string]any)["repository"] = *image
	if err := chartutil.ValidateAgainstSchema(chart, chart.Values); err != nil {
		return err
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	path, err := chartutil.Save(chart, *out)
	if err != nil {
		return err
	}
	fmt.Println(path)
	return nil
}
