// Package envtest starts a real kube-apiserver and etcd with the Cluster API
// CRDs and this project's CRDs installed, for the test suites of the
// packages that talk to an API server.
package envtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	projectModule    = "github.com/capi-autoscaler/capi-autoscaler"
	clusterAPIModule = "sigs.k8s.io/cluster-api"
	// clusterAPICRDs is where the Cluster API module keeps its core CRDs.
	clusterAPICRDs = "core/config/crd/bases"
	// projectCRDs is where `make manifests` writes this project's CRDs.
	projectCRDs = "config/crd/bases"
	// workloadCRDs is where `make manifests` writes the CRDs this project
	// reads in workload clusters.
	workloadCRDs = "config/workload-crd/bases"
	// monitoringCRDs holds the Prometheus Operator's ServiceMonitor and
	// PrometheusRule CRDs (monitoringcrds/README.md).
	monitoringCRDs = "e2e/framework/envtest/monitoringcrds"
	// assetsDir is where `make test` builds kube-apiserver and etcd.
	assetsDir = "bin/k8s"
)

// Options add to what every environment has.
type Options struct {
	// CRDs are installed besides the Cluster API and project CRDs, e.g. a
	// fake infrastructure template kind.
	CRDs []*apiextensionsv1.CustomResourceDefinition
	// AddToScheme registers further types in the client's scheme.
	AddToScheme []func(*runtime.Scheme) error
	// WithoutProjectCRDs leaves this project's CRDs out, for a test that
	// installs them itself (as clusterctl does).
	WithoutProjectCRDs bool
	// WorkloadCRDs installs the CRDs of workload clusters too, for a test
	// whose API server serves as a workload cluster.
	WorkloadCRDs bool
	// MonitoringCRDs installs the Prometheus Operator's ServiceMonitor and
	// PrometheusRule CRDs, for a test that creates monitoring objects.
	MonitoringCRDs bool
}

// Environment is a running API server and a client for it.
type Environment struct {
	Config *rest.Config
	Scheme *runtime.Scheme
	Client client.Client

	env *envtest.Environment
}

// Start starts kube-apiserver and etcd from KUBEBUILDER_ASSETS (or, when it
// is unset, from bin/k8s of this repository), installs the CRDs and returns a
// client whose scheme knows core, Cluster API and apiextensions types.
func Start(opts Options) (*Environment, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	assets, err := binaryAssets(root)
	if err != nil {
		return nil, err
	}
	capiDir, err := moduleDir(root, clusterAPIModule)
	if err != nil {
		return nil, err
	}

	scheme := runtime.NewScheme()
	for _, add := range append([]func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, apiextensionsv1.AddToScheme}, opts.AddToScheme...) {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("building the test scheme: %w", err)
		}
	}

	paths := []string{filepath.Join(capiDir, clusterAPICRDs)}
	if dir := filepath.Join(root, projectCRDs); isDir(dir) && !opts.WithoutProjectCRDs {
		paths = append(paths, dir)
	}
	if opts.WorkloadCRDs {
		paths = append(paths, filepath.Join(root, workloadCRDs))
	}
	if opts.MonitoringCRDs {
		paths = append(paths, filepath.Join(root, monitoringCRDs))
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              paths,
			CRDs:               opts.CRDs,
			ErrorIfPathMissing: true,
		},
		// Two shared cores can make a cold start slow.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest with binaries from %s: %w", assets, err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("creating the test client: %w", err), env.Stop())
	}
	return &Environment{Config: cfg, Scheme: scheme, Client: c, env: env}, nil
}

// AddUser returns a connection as a user whose only permissions are those
// RBAC gives its name and groups, for tests of a client with narrower
// permissions than an administrator's.
func (e *Environment) AddUser(name string, groups ...string) (*rest.Config, error) {
	user, err := e.env.AddUser(envtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		return nil, fmt.Errorf("adding user %s: %w", name, err)
	}
	return user.Config(), nil
}

// Stop stops the API server and etcd.
func (e *Environment) Stop() error {
	return e.env.Stop()
}

// binaryAssets finds kube-apiserver and etcd, failing with how to get them.
func binaryAssets(root string) (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	source := "KUBEBUILDER_ASSETS"
	if dir == "" {
		dir, source = filepath.Join(root, assetsDir), "the default "+assetsDir
	}
	var missing []string
	for _, binary := range []string{"kube-apiserver", "etcd"} {
		if info, err := os.Stat(filepath.Join(dir, binary)); err != nil || info.IsDir() {
			missing = append(missing, binary)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("envtest needs %s in %s (from %s); run `make test`, which builds them into %s, or set KUBEBUILDER_ASSETS=%s",
			strings.Join(missing, " and "), dir, source, assetsDir, filepath.Join(root, assetsDir))
	}
	return dir, nil
}

// moduleRoot walks up from the working directory (a package directory
// under `go test`) to this project's go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if content, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(bytes.TrimSpace(content), []byte("module "+projectModule)) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", projectModule)
		}
		dir = parent
	}
}

// moduleDir resolves where the Go toolchain keeps a module this project
// depends on, at the version go.mod pins.
func moduleDir(root, module string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", module)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s with `go list -m`: %w: %s", module, err, stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not downloaded; run `go mod download %s`", module, module)
	}
	return dir, nil
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
