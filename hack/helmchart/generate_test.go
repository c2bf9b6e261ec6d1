package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/helmchart"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// The chart in the repository is what `make helm-chart` writes from
// config/: a change of config/ (or of the generator) without it fails
// here, as in `make verify`.
func TestChartIsGenerated(t *testing.T) {
	g := NewWithT(t)
	files, err := Generate(repoRoot)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(files).To(HaveKey(filepath.Join(templatesDir, "deployment-controller-manager.yaml")))
	chart := filepath.Join(repoRoot, ChartDir)
	for path, want := range files {
		got, err := os.ReadFile(filepath.Join(chart, path))
		g.Expect(err).NotTo(HaveOccurred(), "%s is missing: run `make helm-chart`", path)
		g.Expect(string(got)).To(Equal(string(want)), "%s differs from what config/ gives: run `make helm-chart`", path)
	}
	existing, err := filepath.Glob(filepath.Join(chart, templatesDir, "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, path := range existing {
		relative, _ := filepath.Rel(chart, path)
		g.Expect(files).To(HaveKey(relative), "%s is no longer generated from config/: run `make helm-chart`", relative)
	}
}

// copyRepo copies what the generator reads to a directory of its own, for
// a test to change config/.
func copyRepo(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, path := range []string{"config", ChartDir} {
		if err := os.CopyFS(filepath.Join(dir, path), os.DirFS(filepath.Join(repoRoot, path))); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(filepath.Join(repoRoot, metadataFile), filepath.Join(dir, metadataFile)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(from, to string) error {
	content, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, content, 0o600)
}

// edit replaces old with replacement in a file of dir, which must have it.
func edit(t *testing.T, dir, path, old, replacement string) {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(dir, path))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(content), old) {
		t.Fatalf("%s has no %q", path, old)
	}
	if err := os.WriteFile(filepath.Join(dir, path), []byte(strings.Replace(string(content), old, replacement, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A flag config/manager gains reaches the chart's Deployment, and a
// permission controller-gen writes reaches the chart's roles.
func TestConfigChangesReachTheChart(t *testing.T) {
	g := NewWithT(t)
	dir := copyRepo(t)
	edit(t, dir, "config/manager/manager.yaml", "        - --health-probe-bind-address=:8081\n",
		"        - --health-probe-bind-address=:8081\n        - --sync-period=5m\n")
	edit(t, dir, "config/rbac/role.yaml", "  - machinesets\n", "  - machinesets\n  - machinedeployments/status\n")
	edit(t, dir, "config/rbac/role.yaml", "  - machinedeployments/scale\n", "  - machinedeployments/scale\n  - machinesets/status\n")
	files, err := Generate(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(Write(filepath.Join(dir, ChartDir), files)).To(Succeed())

	for _, watchNamespace := range []string{"", "tenant"} {
		rendered, err := helmchart.Render(filepath.Join(dir, ChartDir), helmchart.Release{Name: "capi-autoscaler", Namespace: "capi-autoscaler-system"},
			helmchart.Options{Values: map[string]any{"watchNamespace": watchNamespace}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(managerArgs(g, rendered)).To(ContainElement("--sync-period=5m"))
		kind := "ClusterRole"
		if watchNamespace != "" {
			kind = "Role"
		}
		role := rendered.Find(kind, "capi-autoscaler-manager-role")
		g.Expect(role).NotTo(BeNil())
		g.Expect(ruleResources(g, role)).To(ContainElement("machinedeployments/status"))
		namespaceRole := rendered.Find(kind, "capi-autoscaler-manager-namespace-role")
		g.Expect(namespaceRole).NotTo(BeNil())
		g.Expect(ruleResources(g, namespaceRole)).To(ContainElement("machinesets/status"))
	}
}

// What the chart cannot stand for fails the generation, saying what to do.
func TestGenerationRefusesWhatTheChartCannotStandFor(t *testing.T) {
	for _, tc := range []struct {
		name              string
		path, old, change string
		err               string
	}{{
		name: "a clusterctl variable without a value",
		path: "config/release/kustomization.yaml",
		old:  "      value: --v=${CAPI_AUTOSCALER_LOG_VERBOSITY:=0}\n",
		change: "      value: --v=${CAPI_AUTOSCALER_LOG_VERBOSITY:=0}\n" +
			"    - op: add\n      path: /spec/template/spec/containers/0/args/-\n      value: --sync-period=${CAPI_AUTOSCALER_SYNC_PERIOD:=10m}\n",
		err: "CAPI_AUTOSCALER_SYNC_PERIOD",
	}, {
		name:   "a flag the chart sets",
		path:   "config/manager/manager.yaml",
		old:    "        - --leader-elect\n",
		change: "        - --leader-elect\n        - --watch-filter=mine\n",
		err:    "--watch-filter",
	}, {
		name:   "a pod field the chart sets",
		path:   "config/manager/manager.yaml",
		old:    "      terminationGracePeriodSeconds: 40\n",
		change: "      terminationGracePeriodSeconds: 40\n      nodeSelector:\n        kubernetes.io/os: linux\n",
		err:    "nodeSelector",
	}, {
		name:   "a cluster-scoped resource in the namespace role",
		path:   "config/rbac/role.yaml",
		old:    "  - secrets\n",
		change: "  - secrets\n  - nodes\n",
		err:    "ClusterRole manager-namespace-role has rules on cluster-scoped resources",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := copyRepo(t)
			edit(t, dir, tc.path, tc.old, tc.change)
			_, err := Generate(dir)
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

// Chart.yaml has the version of the newest release series of metadata.yaml.
func TestChartVersionFollowsTheReleaseSeries(t *testing.T) {
	g := NewWithT(t)
	dir := copyRepo(t)
	edit(t, dir, "metadata.yaml", "- major: 0\n  minor: 1\n", "- major: 0\n  minor: 1\n  contract: v1beta2\n- major: 0\n  minor: 2\n")
	files, err := Generate(dir)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(files[chartFile])).To(And(ContainSubstring("\nversion: 0.2.0\n"), ContainSubstring("\nappVersion: v0.2.0\n")))
}
