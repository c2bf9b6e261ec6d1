// Command docsgen writes the references of docs/reference that the code
// holds: the manager's flags (from its flag set), the annotations, labels,
// taints and finalizers, event reasons, condition types and reasons and
// reasons a node is kept (from the constants of the product's packages,
// type-checked), and the metrics (from what the manager registers). It
// also gives the API reference that crd-ref-docs writes just before it
// the title and opening every page of docs/ has.
// `make docs` runs it; `make verify` fails when the files differ from what
// it writes, and its test fails when the code has a name the files lack.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	// A flag set of its own: flag.CommandLine holds the manager's Go flags,
	// which the flags reference lists.
	flags := flag.NewFlagSet("docsgen", flag.ExitOnError)
	root := flags.String("repo-root", ".", "The repository's root")
	_ = flags.Parse(os.Args[1:])
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docsgen:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	pages, err := Generate(root)
	if err != nil {
		return err
	}
	for path, content := range pages {
		if err := os.WriteFile(filepath.Join(root, path), []byte(content), 0o644); err != nil {
			return err
		}
	}
	apiPage := filepath.Join(root, APIPage)
	written, err := os.ReadFile(apiPage)
	if err != nil {
		return err
	}
	return os.WriteFile(apiPage, []byte(withAPIPageOpening(string(written))), 0o644)
}
