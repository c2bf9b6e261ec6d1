package manager

import (
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/spf13/pflag"
	"golang.org/x/mod/modfile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	logsv1 "k8s.io/component-base/logs/api/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// repoRoot is the repository, which Tilt builds the manager from, seen
// from this package.
const repoRoot = "../.."

// tiltProvider is a tilt-provider.json as Cluster API v1.14 reads it: its
// Tiltfile (load_provider_tilt_files, enable_provider) and its tilt-prepare
// tool (hack/tools/internal/tilt-prepare: tiltProvider, tiltProviderConfig).
// It has exactly the fields they read, so a field they do not read (such as
// kustomize_config, read by older releases) fails to decode.
type tiltProvider struct {
	Name   string              `json:"name"`
	Config *tiltProviderConfig `json:"config"`
}

type tiltProviderConfig struct {
	// Read by both; the default context is the repository itself.
	Context           *string  `json:"context"`
	LiveReloadDeps    []string `json:"live_reload_deps"`
	ApplyProviderYaml *bool    `json:"apply_provider_yaml"`

	// Read by tilt-prepare.
	Version          *string  `json:"version"`
	KustomizeFolder  *string  `json:"kustomize_folder"`
	KustomizeOptions []string `json:"kustomize_options"`

	// Read by the Tiltfile.
	Image                            string   `json:"image"`
	Label                            string   `json:"label"`
	GoMain                           *string  `json:"go_main"`
	AdditionalDockerHelperCommands   string   `json:"additional_docker_helper_commands"`
	AdditionalDockerBuildCommands    string   `json:"additional_docker_build_commands"`
	AdditionalResources              []string `json:"additional_resources"`
	AdditionalUncategorizedResources []string `json:"additional_uncategorized_resources"`
	ResourceDeps                     []string `json:"resource_deps"`
}

// decodeTiltProvider reads a tilt-provider.json and fills in the defaults
// Cluster API's Tiltfile and tilt-prepare apply.
func decodeTiltProvider(data []byte) (*tiltProvider, error) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	p := &tiltProvider{}
	if err := decoder.Decode(p); err != nil {
		return nil, err
	}
	if p.Config == nil {
		return p, nil
	}
	c := p.Config
	c.Context = ptr.To(ptr.Deref(c.Context, "."))
	c.GoMain = ptr.To(ptr.Deref(c.GoMain, "main.go"))
	c.KustomizeFolder = ptr.To(ptr.Deref(c.KustomizeFolder, "config/default"))
	c.ApplyProviderYaml = ptr.To(ptr.Deref(c.ApplyProviderYaml, true))
	return p, nil
}

func TestDecodeTiltProvider(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		wantErr string
	}{
		{
			name: "fields Cluster API reads",
			json: `{"name": "p", "config": {"image": "i", "label": "P", "live_reload_deps": ["main.go"], "version": "v0.1.99"}}`,
		},
		{
			name:    "kustomize_config is no longer read",
			json:    `{"name": "p", "config": {"image": "i", "label": "P", "kustomize_config": true}}`,
			wantErr: `unknown field "kustomize_config"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := decodeTiltProvider([]byte(tt.json))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

// TestTiltProvider checks tilt-provider.json against what Cluster API's
// Tiltfile and tilt-prepare do with it: build go_main from the context,
// watch live_reload_deps, kustomize kustomize_folder, derive the Provider
// from the Namespace's provider label, and start the manager with the
// Deployment's arguments plus the ones added for debugging.
func TestTiltProvider(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(repoRoot, "tilt-provider.json"))
	g.Expect(err).NotTo(HaveOccurred())
	p, err := decodeTiltProvider(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p.Name).NotTo(BeEmpty())
	g.Expect(p.Config).NotTo(BeNil())
	c := p.Config
	// Without an image the Tiltfile builds nothing; without a label it fails.
	g.Expect(c.Image).NotTo(BeEmpty())
	g.Expect(c.Label).NotTo(BeEmpty())
	g.Expect(*c.ApplyProviderYaml).To(BeTrue())
	repo := filepath.Join(repoRoot, *c.Context)

	t.Run("go_main exists", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(filepath.Join(repo, *c.GoMain)).To(BeARegularFile())
	})

	t.Run("live_reload_deps cover the manager's sources", func(t *testing.T) {
		g := NewWithT(t)
		for _, dep := range c.LiveReloadDeps {
			g.Expect(filepath.Join(repo, dep)).To(BeAnExistingFile())
		}
		for _, pkg := range packages(t, repo, filepath.Dir(*c.GoMain)) {
			for _, file := range pkg.GoFiles {
				path := filepath.Join(pkg.Dir, file)
				g.Expect(watched(c.LiveReloadDeps, path)).To(BeTrue(), "a change in %s would not rebuild the manager", path)
			}
		}
	})

	t.Run("kustomize_folder gives an AddonProvider whose manager takes its arguments", func(t *testing.T) {
		g := NewWithT(t)
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).
			Run(filesys.MakeFsOnDisk(), filepath.Join(repo, *c.KustomizeFolder))
		g.Expect(err).NotTo(HaveOccurred())

		// tilt-prepare names the Provider after the first Namespace's label;
		// a value without a type prefix would make a second core provider.
		var namespaceLabel *string
		var deployment *appsv1.Deployment
		for _, r := range resources.Resources() {
			switch r.GetKind() {
			case "CustomResourceDefinition":
				// clusterctl move finds ClusterAutoscalers only through it,
				// also when clusterctl did not install them.
				g.Expect(r.GetLabels()).To(HaveKeyWithValue(clusterctlv1.ClusterctlLabel, ""), r.GetName())
			case "Namespace":
				if namespaceLabel == nil {
					namespaceLabel = ptr.To(r.GetLabels()[clusterv1.ProviderNameLabel])
				}
			case "Deployment":
				g.Expect(deployment).To(BeNil(), "one Deployment")
				data, err := r.AsYAML()
				g.Expect(err).NotTo(HaveOccurred())
				deployment = &appsv1.Deployment{}
				g.Expect(yaml.Unmarshal(data, deployment)).To(Succeed())
			}
		}
		g.Expect(namespaceLabel).NotTo(BeNil(), "no Namespace")
		providerName, isAddon := strings.CutPrefix(*namespaceLabel, "addon-")
		g.Expect(isAddon).To(BeTrue(), "provider label %q has no addon- prefix", *namespaceLabel)
		g.Expect(providerName).To(Equal(p.Name))
		g.Expect(strings.ToLower(c.Label)).To(Equal(providerName))

		// tilt-prepare and the Tiltfile only touch a Deployment with the
		// provider label, and in it the container named manager.
		g.Expect(deployment).NotTo(BeNil())
		g.Expect(deployment.Labels).To(HaveKeyWithValue(clusterv1.ProviderNameLabel, *namespaceLabel))
		i := slices.IndexFunc(deployment.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "manager" })
		g.Expect(i).NotTo(Equal(-1), "no container named manager")
		manager := deployment.Spec.Template.Spec.Containers[i]
		// Self-hosted, the manager must not be evicted by a drain of its node.
		g.Expect(deployment.Spec.Template.Annotations).To(HaveKeyWithValue(scaledown.SafeToEvictAnnotation, "false"))
		// Tilt replaces the image by its name, whatever the tag.
		imageName, _, _ := strings.Cut(manager.Image, ":")
		g.Expect(imageName).To(Equal(c.Image))

		// In debug mode tilt-prepare adds --profiler-address and turns
		// leader election off.
		args := append(slices.Clone(manager.Args), "--profiler-address=:6060", "--leader-elect=false")
		fs := pflag.NewFlagSet("manager", pflag.ContinueOnError)
		(&commandLine{logging: logsv1.NewLoggingConfiguration()}).addFlags(fs)
		g.Expect(fs.Parse(args)).To(Succeed())
	})
}

// packages lists the packages of this module that the main package in
// root/mainDir is built from, with their directories relative to root.
func packages(t *testing.T, root, mainDir string) []*build.Package {
	t.Helper()
	g := NewWithT(t)
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	module := modfile.ModulePath(goMod)

	var pkgs []*build.Package
	seen := map[string]bool{}
	var visit func(dir string)
	visit = func(dir string) {
		if seen[dir] {
			return
		}
		seen[dir] = true
		pkg, err := build.ImportDir(filepath.Join(root, dir), 0)
		g.Expect(err).NotTo(HaveOccurred())
		pkg.Dir = dir
		pkgs = append(pkgs, pkg)
		for _, path := range pkg.Imports {
			if path == module {
				visit(".")
			} else if rest, ok := strings.CutPrefix(path, module+"/"); ok {
				visit(filepath.FromSlash(rest))
			}
		}
	}
	visit(mainDir)
	return pkgs
}

// watched tells whether Tilt rebuilds the manager on a change of path
// (relative to the repository): path or a directory above it is a dep.
func watched(deps []string, path string) bool {
	for _, dep := range deps {
		if path == dep || strings.HasPrefix(path, dep+string(filepath.Separator)) {
			return true
		}
	}
	return false
}
