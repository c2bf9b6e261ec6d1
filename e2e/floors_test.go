package e2e

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"golang.org/x/mod/modfile"
)

// TestFloors keeps the end-to-end tree in its floors: the libraries of
// e2e/framework do not import the specs above them, the commands of hack/
// import only those libraries, and no file of the product imports any of
// it (its tests may use the libraries, as the envtest suites do). Every Go
// file of the module counts, whatever its build tags.
func TestFloors(t *testing.T) {
	g := NewWithT(t)
	const root = ".."
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	module := modfile.ModulePath(goMod)
	e2eTree, libraries := module+"/e2e", module+"/e2e/framework"

	var violations []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			name := d.Name()
			if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" {
				return filepath.SkipDir
			}
			// The tool modules of hack/ are modules of their own.
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, spec := range file.Imports {
			imported, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return err
			}
			if !within(imported, e2eTree) {
				continue
			}
			switch {
			case within(rel, "e2e/framework") || within(rel, "hack"):
				if !within(imported, libraries) {
					violations = append(violations, rel+" imports the spec package "+imported)
				}
			case within(rel, "e2e"):
			case !strings.HasSuffix(rel, "_test.go"):
				violations = append(violations, rel+", a file of the product, imports "+imported)
			}
		}
		return nil
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(violations).To(BeEmpty())
}

// within tells whether the slash-separated path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
