package e2e

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
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
// it (its tests may use the libraries, as the envtest suites do). It keeps
// the engine to itself too: the packages below autoscaler/ do not refer
// back up to the loop, and the engine knows nothing of Cluster API nor of
// the packages that present it. Every Go file of the module counts,
// whatever its build tags.
func TestFloors(t *testing.T) {
	g := NewWithT(t)
	const root = ".."
	goMod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	g.Expect(err).NotTo(HaveOccurred())
	module := modfile.ModulePath(goMod)
	e2eTree, libraries := module+"/e2e", module+"/e2e/framework"
	engine := module + "/autoscaler"

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
			if within(rel, "autoscaler") && !strings.HasSuffix(rel, "_test.go") {
				violations = append(violations, engineViolations(rel, imported, module, engine)...)
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

// engineViolations are what is wrong with a file of the engine (its tests
// may use the e2e libraries), at rel,
// importing imported: a package below autoscaler/ importing the loop above
// it, or any importing Cluster API or another package of the module than
// the engine's own and the API types it serves.
func engineViolations(rel, imported, module, engine string) []string {
	switch {
	case imported == engine && path.Dir(rel) != "autoscaler":
		return []string{rel + " refers back up to the loop, " + imported}
	case within(imported, "sigs.k8s.io/cluster-api"):
		return []string{rel + ", a file of the engine, imports Cluster API: " + imported}
	case within(imported, module) && !within(imported, engine) && !within(imported, module+"/api"):
		return []string{rel + ", a file of the engine, imports " + imported}
	}
	return nil
}

// within tells whether the slash-separated path is dir or below it.
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
