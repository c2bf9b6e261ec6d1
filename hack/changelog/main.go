// Command changelog fails unless a changelog in the Keep a Changelog style
// (https://keepachangelog.com/en/1.1.0/) has an entry for the version being
// released: a heading "## [0.1.0] - 2026-12-07" with changes under it, and
// the link its brackets name. `make release` and the release-* targets that
// write artifacts run it first, so no release goes out that its users cannot
// read about.
//
//	changelog --version=v0.1.0 CHANGELOG.md
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/semver"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const usage = "usage: changelog --version=v0.1.0 CHANGELOG.md"

func run(args []string) error {
	flags := flag.NewFlagSet("changelog", flag.ContinueOnError)
	flags.SetOutput(io.Discard) // the error says it all, once
	version := flags.String("version", "", "the version being released, such as v0.1.0")
	if err := flags.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	if flags.NArg() != 1 {
		return errors.New(usage)
	}
	path := flags.Arg(0)
	content, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := checkEntry(string(content), *version); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// releaseHeading is the heading of a version: "## [0.1.0] - 2026-12-07",
// possibly followed by " [YANKED]".
var releaseHeading = regexp.MustCompile(`^## \[([^\]]+)\](?: - (\S+))?`)

// checkEntry returns why content has no entry for version, or nil.
func checkEntry(content, version string) error {
	if !semver.IsValid(version) && !semver.IsValid("v"+version) {
		return fmt.Errorf("the release version %q is not a semver like v0.1.0", version)
	}
	number := strings.TrimPrefix(version, "v")
	lines := strings.Split(content, "\n")
	for i, line := range lines {
		m := releaseHeading.FindStringSubmatch(line)
		if m == nil || strings.TrimPrefix(m[1], "v") != number {
			continue
		}
		if _, err := time.Parse(time.DateOnly, m[2]); err != nil {
			return fmt.Errorf("the entry of %s has no release date: write its heading as \"## [%s] - YYYY-MM-DD\"", number, m[1])
		}
		if !listsChanges(lines[i+1:]) {
			return fmt.Errorf("the entry of %s lists no change: add them under ### Added, Changed or Fixed", number)
		}
		if !strings.Contains(content, "\n["+m[1]+"]: ") {
			return fmt.Errorf("the entry of %s has no link: add \"[%s]: <the release's URL>\" at the end", number, m[1])
		}
		return nil
	}
	return fmt.Errorf("no entry for %s: move the changes under \"## [Unreleased]\" to a new \"## [%s] - %s\" and add its link at the end",
		number, number, time.Now().UTC().Format(time.DateOnly))
}

// listsChanges tells whether the lines of an entry, up to the next version,
// have an item.
func listsChanges(lines []string) bool {
	for _, line := range lines {
		if strings.HasPrefix(line, "## ") {
			return false
		}
		if strings.HasPrefix(line, "- ") {
			return true
		}
	}
	return false
}
