// Package krew tests the krew manifest of the kubectl plugin that
// `make release-kubectl-plugin` writes with manifest.sh.
package krew

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/semver"
	"sigs.k8s.io/yaml"
)

// plugin is krew's index.Plugin (krew.googlecontainertools.github.com/v1alpha2),
// the fields the manifest may have: strict parsing refuses any other.
type plugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string     `json:"version"`
		Homepage         string     `json:"homepage"`
		ShortDescription string     `json:"shortDescription"`
		Description      string     `json:"description"`
		Caveats          string     `json:"caveats"`
		Platforms        []platform `json:"platforms"`
	} `json:"spec"`
}

type platform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	Sha256 string `json:"sha256"`
	Bin    string `json:"bin"`
	Files  []struct {
		From string `json:"from"`
		To   string `json:"to"`
	} `json:"files"`
}

// releasePlatforms are the PLUGIN_PLATFORMS of the Makefile, as os-arch.
func releasePlatforms(t *testing.T) []string {
	t.Helper()
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PLUGIN_PLATFORMS \?= (.*)$`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile sets no PLUGIN_PLATFORMS")
	}
	// The archives the release writes, the binary, the completion helper
	// and the license in each, and the platforms the manifest is for.
	for _, want := range []string{
		"-o $$dir/kubectl-capi_autoscaler ",
		"tar -czf $(RELEASE_DIR)/kubectl-capi_autoscaler-$$os-$$arch.tar.gz -C $$dir kubectl-capi_autoscaler kubectl_complete-capi_autoscaler LICENSE;",
		"hack/krew/manifest.sh $(RELEASE_VERSION) $(KREW_RELEASE_URL) $(RELEASE_DIR) $(PLUGIN_PLATFORMS)",
	} {
		if !strings.Contains(string(makefile), want) {
			t.Fatalf("the Makefile's release-kubectl-plugin no longer has %q: update the krew manifest and this test", want)
		}
	}
	var platforms []string
	for p := range strings.FieldsSeq(string(m[1])) {
		platforms = append(platforms, strings.Replace(p, "/", "-", 1))
	}
	return platforms
}

// releaseWithManifest writes an archive, of other bytes each, for each of the platforms
// built, and the manifest manifest.sh writes for the platforms of the
// release (PLUGIN_PLATFORMS).
func releaseWithManifest(t *testing.T, built, platforms []string) (dir string, output []byte, err error) {
	t.Helper()
	dir = t.TempDir()
	for _, p := range built {
		if err := os.WriteFile(filepath.Join(dir, "kubectl-capi_autoscaler-"+p+".tar.gz"), []byte("archive of "+p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"v0.1.0", "https://github.com/capi-autoscaler/capi-autoscaler/releases/download/v0.1.0", dir}
	for _, p := range platforms {
		args = append(args, strings.Replace(p, "-", "/", 1))
	}
	output, err = exec.Command("./manifest.sh", args...).CombinedOutput()
	return dir, output, err
}

// manifest is the manifest of a release.
func manifest(t *testing.T, dir string) plugin {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(dir, "krew-capi-autoscaler.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var p plugin
	if err := yaml.UnmarshalStrict(content, &p); err != nil {
		t.Fatalf("the manifest has fields krew does not know: %v", err)
	}
	return p
}

// TestManifestIsValidForKrew checks the manifest of a release against the
// rules krew's index validation applies (pkg/index/validation), and that
// its platforms are exactly those the release builds, each with its
// archive's name and sha256 and the binary in it.
func TestManifestIsValidForKrew(t *testing.T) {
	platforms := releasePlatforms(t)
	dir, output, err := releaseWithManifest(t, platforms, platforms)
	if err != nil {
		t.Fatalf("manifest.sh failed: %v: %s", err, output)
	}
	p := manifest(t, dir)
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" {
		t.Errorf("apiVersion %q, kind %q: want krew.googlecontainertools.github.com/v1alpha2, Plugin", p.APIVersion, p.Kind)
	}
	// The index keeps plugins/<name>.yaml; kubectl runs kubectl-<name,
	// dashes as underscores>, which krew links to bin.
	if p.Metadata.Name != "capi-autoscaler" || !regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`).MatchString(p.Metadata.Name) {
		t.Errorf("metadata.name %q: want capi-autoscaler, the name of hack/krew/capi-autoscaler.yaml and of `kubectl capi-autoscaler`", p.Metadata.Name)
	}
	if p.Spec.Version != "v0.1.0" || !semver.IsValid(p.Spec.Version) {
		t.Errorf("spec.version %q: want the release's, v0.1.0", p.Spec.Version)
	}
	if p.Spec.ShortDescription == "" || strings.Contains(p.Spec.ShortDescription, "\n") {
		t.Errorf("spec.shortDescription %q: krew requires one line", p.Spec.ShortDescription)
	}
	if p.Spec.Homepage == "" || p.Spec.Description == "" {
		t.Error("spec.homepage and spec.description are empty: the krew index asks for both")
	}
	var got []string
	for _, pl := range p.Spec.Platforms {
		os, arch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		name := os + "-" + arch
		got = append(got, name)
		archive := "kubectl-capi_autoscaler-" + name + ".tar.gz"
		if want := "https://github.com/capi-autoscaler/capi-autoscaler/releases/download/v0.1.0/" + archive; pl.URI != want {
			t.Errorf("%s: uri %q, want %q", name, pl.URI, want)
		}
		sum := sha256.Sum256([]byte("archive of " + name))
		if pl.Sha256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha256 %q is not the archive's", name, pl.Sha256)
		}
		if pl.Bin != "kubectl-"+strings.ReplaceAll(p.Metadata.Name, "-", "_") {
			t.Errorf("%s: bin %q is not the binary the archive holds, kubectl-capi_autoscaler", name, pl.Bin)
		}
		// The krew index takes a plugin only with its license.
		if len(pl.Files) != 3 || pl.Files[0].From != pl.Bin || pl.Files[0].To != "." ||
			pl.Files[1].From != "kubectl_complete-capi_autoscaler" || pl.Files[1].To != "." ||
			pl.Files[2].From != "LICENSE" || pl.Files[2].To != "." {
			t.Errorf("%s: files %v: want the binary, from %s to ., its completion helper, from kubectl_complete-capi_autoscaler to ., and LICENSE to .", name, pl.Files, pl.Bin)
		}
		if len(pl.Selector.MatchLabels) != 2 {
			t.Errorf("%s: selector %v: want os and arch", name, pl.Selector.MatchLabels)
		}
	}
	slices.Sort(got)
	slices.Sort(platforms)
	if !slices.Equal(got, platforms) {
		t.Errorf("the manifest's platforms %v are not those the release builds, PLUGIN_PLATFORMS %v", got, platforms)
	}
}

// TestManifestMatchesTheArchives fails the release when an archive of its
// platforms is missing, or the manifest knows no entry for one of them; a
// release of fewer platforms (make release-kubectl-plugin
// PLUGIN_PLATFORMS=linux/amd64) has a manifest of those.
func TestManifestMatchesTheArchives(t *testing.T) {
	platforms := releasePlatforms(t)
	if _, _, err := releaseWithManifest(t, platforms[1:], platforms); err == nil {
		t.Errorf("manifest.sh wrote a manifest without the archive of %s", platforms[0])
	}
	if _, _, err := releaseWithManifest(t, append(platforms, "windows-amd64"), append(platforms, "windows-amd64")); err == nil {
		t.Error("manifest.sh wrote a manifest without an entry for windows-amd64, a platform of the release")
	}
	dir, output, err := releaseWithManifest(t, platforms[1:2], platforms[1:2])
	if err != nil {
		t.Fatalf("manifest.sh failed for the release of %s: %v: %s", platforms[1], err, output)
	}
	if got := manifest(t, dir).Spec.Platforms; len(got) != 1 || !strings.HasSuffix(got[0].URI, "/kubectl-capi_autoscaler-"+platforms[1]+".tar.gz") {
		t.Errorf("the manifest of a release of %s has the platforms %+v", platforms[1], got)
	}
}
