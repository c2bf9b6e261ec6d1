// Command crdversions adds to a CRD that controller-gen wrote the older
// versions its API group still serves, with the storage version's schema:
// the versions differ in name only, so the API server converts between
// them without a webhook. Installing over the upstream cluster-autoscaler's
// CRDs, whose objects were stored in those versions, is then accepted (an
// API server refuses a CRD that drops a version named in its
// status.storedVersions), and clients of those versions keep working.
// `make manifests` runs it after controller-gen; `make verify` fails when
// the CRDs differ from what it writes.
//
//	crdversions --served=v1beta1 config/workload-crd/bases/autoscaling.x-k8s.io_provisioningrequests.yaml
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

func main() {
	served := flag.String("served", "", "comma-separated older versions to serve beside the storage version, deprecated")
	flag.Parse()
	if *served == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: crdversions --served=VERSION[,VERSION] CRD.yaml")
		os.Exit(2)
	}
	if err := addVersions(flag.Arg(0), strings.Split(*served, ",")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// addVersions rewrites the CRD in path with the older versions added after
// its versions. It writes as controller-gen does (sigs.k8s.io/yaml, keys
// sorted, a leading document separator), so the rest of the file is
// unchanged.
func addVersions(path string, older []string) error {
	in, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var crd map[string]any
	if err := yaml.Unmarshal(in, &crd); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if err := withOlderVersions(crd, older); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// withOlderVersions appends to the CRD's versions a copy of its storage
// version for each older version: served, not stored, and deprecated in
// favour of the storage version.
func withOlderVersions(crd map[string]any, older []string) error {
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	var storage map[string]any
	for _, v := range versions {
		version, _ := v.(map[string]any)
		if slices.Contains(older, version["name"].(string)) {
			return fmt.Errorf("version %s is there already: crdversions runs once, after controller-gen", version["name"])
		}
		if version["storage"] == true {
			storage = version
		}
	}
	if storage == nil {
		return fmt.Errorf("no storage version in spec.versions")
	}
	for _, name := range older {
		// The copy shares the storage version's nested values: they are
		// written, never changed.
		version := maps.Clone(storage)
		version["name"] = name
		version["storage"] = false
		version["deprecated"] = true
		version["deprecationWarning"] = fmt.Sprintf("%s/%s is deprecated: use %s/%s, the same schema", spec["group"], name, spec["group"], storage["name"])
		versions = append(versions, version)
	}
	spec["versions"] = versions
	return nil
}
