package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownLink is an inline link or image, [text](target "title").
var markdownLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// scheme starts a link that is not relative (https:, mailto:).
var scheme = regexp.MustCompile(`^[a-z]+:`)

// codeSpan is inline code, whose brackets are no links.
var codeSpan = regexp.MustCompile("`[^`]*`")

// docsPages are the pages of docs/.
func docsPages(t *testing.T) []string {
	t.Helper()
	var pages []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return pages
}

// TestLinksResolve fails on each relative link of README.md, CHANGELOG.md
// and docs/ whose file does not exist, or whose anchor names no heading of
// its page.
func TestLinksResolve(t *testing.T) {
	pages := append([]string{filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md")}, docsPages(t)...)
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := headingAnchors(string(content))
		anchors[path] = a
		return a, nil
	}
	for _, page := range pages {
		content, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		for _, link := range relativeLinks(string(content)) {
			file, anchor, _ := strings.Cut(link, "#")
			target := page
			if file != "" {
				target = filepath.Join(filepath.Dir(page), file)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: the link %s names no file", name, link)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(target, ".md") {
				t.Errorf("%s: the link %s has an anchor into a file that is not Markdown", name, link)
				continue
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Fatal(err)
			}
			if !a[anchor] {
				t.Errorf("%s: the link %s names no heading of %s", name, link, file)
			}
		}
	}
	if len(pages) < 20 {
		t.Fatalf("only %d pages found", len(pages))
	}
}

// TestEveryPageSaysWhatTheReaderCanDoAfterIt fails on each page of docs/
// whose opening line, under its title (and the comment of a generated
// page), does not say what the reader can do after the page.
func TestEveryPageSaysWhatTheReaderCanDoAfterIt(t *testing.T) {
	for _, page := range docsPages(t) {
		content, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		name, _ := filepath.Rel(root, page)
		if first := openingLine(string(content)); !strings.HasPrefix(first, "After this page you can ") {
			t.Errorf("%s opens with %q: say first what the reader can do after the page (\"After this page you can ...\")", name, first)
		}
	}
}

// openingLine is the first line of a page that is not its title, a
// comment or blank.
func openingLine(content string) string {
	for line := range strings.SplitSeq(content, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "<!--") {
			return line
		}
	}
	return ""
}

// relativeLinks are the targets of the links of a page outside code, but
// for those with a scheme (https:, mailto:).
func relativeLinks(content string) []string {
	var links []string
	inFence := false
	for line := range strings.SplitSeq(content, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range markdownLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if !scheme.MatchString(m[1]) {
				links = append(links, m[1])
			}
		}
	}
	return links
}

// headingAnchors are the anchors GitHub gives the headings of a page: the
// text lowercased, without punctuation but hyphens and underscores, spaces
// as hyphens, and -1, -2... after repeats.
func headingAnchors(content string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for line := range strings.SplitSeq(content, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		// A link in a heading counts by its text.
		text = markdownLink.ReplaceAllStringFunc(text, func(link string) string {
			return link[strings.Index(link, "[")+1 : strings.Index(link, "]")]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchor := b.String()
		if n := seen[anchor]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", anchor, n)] = true
		} else {
			anchors[anchor] = true
		}
		seen[anchor]++
	}
	return anchors
}
