package krew

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/release"
)

// krewEnv names the krew binary the install test runs: make test sets it
// to the one `make krew` builds, as it sets KUBEBUILDER_ASSETS.
const krewEnv = "KREW_BINARY"

// releasedVersion is the version the test releases and expects installed.
const releasedVersion = "v0.0.0-krew.test"

// TestKrewInstallsTheRelease installs the plugin as a user does with krew,
// from the release: `make release-kubectl-plugin` for this platform writes
// the archive and the krew manifest, and `krew install --manifest
// --archive` installs them into a KREW_ROOT of its own, offline (a proxy
// that refuses every connection). kubectl then runs the installed plugin,
// which must be the release's, and the completion helper the archive ships
// completes its arguments, run by kubectl (1.26 and later) and directly.
func TestKrewInstallsTheRelease(t *testing.T) {
	krew := os.Getenv(krewEnv)
	if krew == "" {
		t.Skipf("no krew: %s is unset; `make test` builds krew and sets it, or run `make krew` (bin/krew-<KREW_VERSION>/krew) and set it", krewEnv)
	}
	if _, err := os.Stat(krew); err != nil {
		t.Fatalf("%s: %v", krewEnv, err)
	}
	tmp := t.TempDir()
	releaseDir := filepath.Join(tmp, "release")
	platform := runtime.GOOS + "-" + runtime.GOARCH

	// The release target checks the changelog for an entry of the version.
	changelog, err := release.Changelog(releasedVersion)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(changelog) })

	start := time.Now()
	runOK(t, exec.Command("make", "-C", "../..", "release-kubectl-plugin",
		"RELEASE_DIR="+releaseDir, "RELEASE_VERSION="+releasedVersion, "RELEASE_CHANGELOG="+changelog,
		"PLUGIN_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH),
		// Not the variables of a make test that runs this one.
		withoutEnv("MAKEFLAGS", "MFLAGS", "MAKELEVEL"))
	t.Logf("make release-kubectl-plugin for %s: %s", platform, time.Since(start).Round(time.Millisecond))

	// krew's home, its downloads' staging directory and the user's home
	// are the test's; every connection goes to a proxy that is not there.
	root := filepath.Join(tmp, "krew")
	bin := filepath.Join(root, "bin")
	env := withEnv(map[string]string{
		"KREW_ROOT": root, "KREW_NO_UPGRADE_CHECK": "1", "HOME": filepath.Join(tmp, "home"), "TMPDIR": tmp,
		"HTTPS_PROXY": "http://127.0.0.1:1", "HTTP_PROXY": "http://127.0.0.1:1", "NO_PROXY": "", "no_proxy": "",
		"PATH": bin + string(os.PathListSeparator) + os.Getenv("PATH"),
	})
	start = time.Now()
	runOK(t, exec.Command(krew, "install",
		"--manifest="+filepath.Join(releaseDir, "krew-capi-autoscaler.yaml"),
		"--archive="+filepath.Join(releaseDir, "kubectl-capi_autoscaler-"+platform+".tar.gz")), env)
	t.Logf("krew install: %s", time.Since(start).Round(time.Millisecond))
	// krew list needs the index: what it lists is krew's receipt, and the
	// link to the release's binary in its store.
	store := filepath.Join(root, "store", "capi-autoscaler", releasedVersion)
	if _, err := os.Stat(filepath.Join(root, "receipts", "capi-autoscaler.yaml")); err != nil {
		t.Errorf("krew has no receipt of the plugin: %v", err)
	}
	if link, err := os.Readlink(filepath.Join(bin, "kubectl-capi_autoscaler")); err != nil || link != filepath.Join(store, "kubectl-capi_autoscaler") {
		t.Errorf("krew's bin/kubectl-capi_autoscaler links to %q (%v), not to the release's binary in its store", link, err)
	}
	// The krew index takes a plugin only with its license in the archive.
	if _, err := os.Stat(filepath.Join(store, "LICENSE")); err != nil {
		t.Errorf("krew installed no LICENSE with the plugin: %v", err)
	}

	// As kubectl runs it, when there is a kubectl: it finds
	// kubectl-capi_autoscaler, which krew linked, on the PATH.
	kubectl, err := exec.LookPath("kubectl")
	viaKubectl := err == nil
	versionCmd := exec.Command(kubectl, "capi-autoscaler", "version")
	if viaKubectl {
		t.Logf("running the installed plugin through %s", kubectl)
	} else {
		t.Logf("no kubectl on the PATH: running %s/kubectl-capi_autoscaler, which krew installed, directly", bin)
		versionCmd = exec.Command(filepath.Join(bin, "kubectl-capi_autoscaler"), "version")
	}
	version := strings.Fields(runOK(t, versionCmd, env))
	if len(version) < 2 || version[1] != releasedVersion {
		t.Errorf("the installed plugin's version is %q, not the release's, %s", version, releasedVersion)
	}

	// The completion helper is in krew's store: the manifest's caveats
	// say to install it into krew's bin, on the PATH, where kubectl 1.26
	// and later find it.
	runOK(t, exec.Command("install", "-m", "0755", filepath.Join(store, "kubectl_complete-capi_autoscaler"), bin), env)
	completes := []*exec.Cmd{exec.Command(filepath.Join(bin, "kubectl_complete-capi_autoscaler"), "explain", "")}
	if viaKubectl && kubectlMinor(t, kubectl) >= 26 {
		completes = append(completes, exec.Command(kubectl, "__complete", "capi-autoscaler", "explain", ""))
	}
	for _, complete := range completes {
		var got []string
		for line := range strings.Lines(runOK(t, complete, env)) {
			if strings.HasPrefix(line, ":") {
				break
			}
			name, _, _ := strings.Cut(strings.TrimSpace(line), "\t")
			got = append(got, name)
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"node", "pod"}) {
			t.Errorf("%s completes `explain` with %q, want node and pod", complete, got)
		}
	}
}

// kubectlMinor is the minor version of kubectl.
func kubectlMinor(t *testing.T, kubectl string) int {
	t.Helper()
	var v struct {
		ClientVersion struct {
			Minor string `json:"minor"`
		} `json:"clientVersion"`
	}
	if err := json.Unmarshal([]byte(runOK(t, exec.Command(kubectl, "version", "--client", "-o", "json"), os.Environ())), &v); err != nil {
		t.Fatalf("kubectl version: %v", err)
	}
	// Some builds say 32+.
	minor, err := strconv.Atoi(strings.TrimSuffix(v.ClientVersion.Minor, "+"))
	if err != nil {
		t.Fatalf("kubectl version: minor %q: %v", v.ClientVersion.Minor, err)
	}
	return minor
}

// runOK runs cmd in env and returns its stdout; it fails the test, with
// stderr, when cmd fails.
func runOK(t *testing.T, cmd *exec.Cmd, env []string) string {
	t.Helper()
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", cmd, err, out, stderr.String())
	}
	return string(out)
}

// withoutEnv is this process's environment without the variables names.
func withoutEnv(names ...string) []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
}

// withEnv is this process's environment with vars set.
func withEnv(vars map[string]string) []string {
	var names []string
	for name := range vars {
		names = append(names, name)
	}
	env := withoutEnv(names...)
	for name, value := range vars {
		env = append(env, name+"="+value)
	}
	return env
}
