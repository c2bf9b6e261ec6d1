package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const released = `# Changelog

## [Unreleased]

### Added

- Something to come.

## [0.1.10] - 2026-12-20

### Fixed

- A fix.

## [0.1.0] - 2026-12-07

### Added

- The first release.

[Unreleased]: https://example.com/compare/v0.1.10...HEAD
[0.1.10]: https://example.com/releases/tag/v0.1.10
[0.1.0]: https://example.com/releases/tag/v0.1.0
`

func TestTheCheckAcceptsAVersionWithAnEntry(t *testing.T) {
	for _, version := range []string{"v0.1.0", "0.1.0", "v0.1.10"} {
		if err := checkEntry(released, version); err != nil {
			t.Errorf("%s: %v", version, err)
		}
	}
}

func TestTheCheckRefusesAVersionWithoutAnEntry(t *testing.T) {
	for _, tc := range []struct {
		name, content, version, why string
	}{
		{"a version with no heading", released, "v0.3.0", "no entry for 0.3.0"},
		{"a version a heading starts with", released, "v0.1.1", "no entry for 0.1.1"},
		{"a version only in the text", strings.Replace(released, "## [0.1.0] - 2026-12-07", "Before 0.1.0, nothing.", 1), "v0.1.0", "no entry for 0.1.0"},
		{"the changes still unreleased", strings.Replace(released, "## [0.1.0] - 2026-12-07", "## [Unreleased]", 1), "v0.1.0", "no entry for 0.1.0"},
		{"no date", strings.Replace(released, "## [0.1.0] - 2026-12-07", "## [0.1.0]", 1), "v0.1.0", "no release date"},
		{"a date that is none", strings.Replace(released, "## [0.1.0] - 2026-12-07", "## [0.1.0] - soon", 1), "v0.1.0", "no release date"},
		{"no change under it", strings.Replace(released, "- A fix.", "", 1), "v0.1.10", "lists no change"},
		{"no link", strings.Replace(released, "[0.1.0]: https://example.com/releases/tag/v0.1.0\n", "", 1), "v0.1.0", "has no link"},
		{"not a semver", released, "abc1234-dirty", "not a semver"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkEntry(tc.content, tc.version)
			if err == nil {
				t.Fatalf("%s was accepted", tc.version)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("got %q, want it to say %q", err, tc.why)
			}
		})
	}
}

// The command reads the file it is given and fails naming it.
func TestTheCommandChecksTheFileItIsGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "CHANGELOG.md")
	if err := os.WriteFile(path, []byte(released), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"--version=v0.1.0", path}); err != nil {
		t.Errorf("v0.1.0: %v", err)
	}
	err := run([]string{"--version=v0.2.0", path})
	if err == nil || !strings.HasPrefix(err.Error(), path+": no entry for 0.2.0") {
		t.Errorf("v0.2.0: got %v, want the file and the version named", err)
	}
	if err := run([]string{"--version=v0.1.0", filepath.Join(t.TempDir(), "missing.md")}); err == nil {
		t.Error("a missing changelog was accepted")
	}
	if err := run([]string{"--version=v0.1.0"}); err == nil || !strings.Contains(err.Error(), "usage:") {
		t.Errorf("no changelog named: got %v, want the usage", err)
	}
}

// The repository's changelog: each version it lists passes the check, and
// every target of the Makefile that writes release artifacts runs it.
func TestTheRepositorysChangelogAndTheReleaseTargets(t *testing.T) {
	content, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(content), "\n## [Unreleased]\n") {
		t.Error("CHANGELOG.md has no \"## [Unreleased]\" entry")
	}
	for _, m := range regexp.MustCompile(`(?m)^## \[(\d[^\]]*)\]`).FindAllStringSubmatch(string(content), -1) {
		if err := checkEntry(string(content), m[1]); err != nil {
			t.Error(err)
		}
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"release", "release-manifests", "release-chart", "release-kubectl-plugin"} {
		m := regexp.MustCompile(`(?m)^` + target + `: ([^#=\n]*)(?:#|$)`).FindSubmatch(makefile)
		if m == nil || !strings.Contains(" "+string(m[1])+" ", " release-changelog ") {
			t.Errorf("the Makefile's %s does not depend on release-changelog", target)
		}
	}
}
