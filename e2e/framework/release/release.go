// Package release writes capi-autoscaler's release artifacts for the tests
// that install them, with the Makefile targets a release uses.
package release

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Manifests writes the artifacts of `make release-manifests` for version
// into dir, from the repository at root; vars are more make variables, such
// as RELEASE_IMAGE=... The versions the suites build are no releases of the
// repository's CHANGELOG.md, which the target checks for an entry: each gets
// a changelog of its own.
func Manifests(root, version, dir string, vars ...string) error {
	changelog, err := Changelog(version)
	if err != nil {
		return err
	}
	defer os.Remove(changelog)
	args := append([]string{"-C", root, "release-manifests", "RELEASE_VERSION=" + version, "RELEASE_DIR=" + dir, "RELEASE_CHANGELOG=" + changelog}, vars...)
	cmd := exec.Command("make", args...)
	// Under an outer make (make test, make test-kind) its flags would reach
	// this make too.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "MAKEFLAGS=") || strings.HasPrefix(kv, "MFLAGS=") || strings.HasPrefix(kv, "MAKELEVEL=")
	})
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("make release-manifests RELEASE_VERSION=%s: %w\n%s", version, err, out)
	}
	return nil
}

// Changelog writes a changelog whose only entry is version's, for a
// release target to check, and returns its path; the caller removes it.
func Changelog(version string) (string, error) {
	file, err := os.CreateTemp("", "CHANGELOG-*.md")
	if err != nil {
		return "", err
	}
	number := strings.TrimPrefix(version, "v")
	_, err = fmt.Fprintf(file, "# Changelog\n\n## [%s] - %s\n\n### Added\n\n- A release a test builds.\n\n[%s]: https://example.invalid/%s\n",
		number, time.Now().UTC().Format(time.DateOnly), number, version)
	return file.Name(), errors.Join(err, file.Close())
}
