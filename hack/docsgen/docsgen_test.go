package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/manager"
)

const root = "../.."

func readPage(t *testing.T, path string) string {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatalf("reading %s: %v (run make docs)", path, err)
	}
	return string(content)
}

// TestReferencesHaveEveryName fails when the code has a flag, key, event
// reason, condition type or reason, reason a node is kept or metric that
// its reference page lacks, naming each, or when a page is not what
// hack/docsgen writes.
func TestReferencesHaveEveryName(t *testing.T) {
	names, err := LoadNames(root)
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := Metrics()
	if err != nil {
		t.Fatal(err)
	}
	pages := Pages(names, metrics)
	want := map[string][]string{}
	flagNames := manager.Flags()
	flagNames.VisitAll(func(f *pflag.Flag) {
		if !isTestFlag(f) {
			want[FlagsPage] = append(want[FlagsPage], "`--"+f.Name+"`")
		}
	})
	for _, n := range names.Keys {
		want[KeysPage] = append(want[KeysPage], "`"+n.Value+"`")
	}
	for _, n := range names.EventReasons {
		want[EventsPage] = append(want[EventsPage], "`"+n.Value+"`")
	}
	for _, section := range []map[string]*Name{names.ConditionTypes, names.ConditionReasons, names.NodeReasons} {
		for _, n := range section {
			want[ConditionsPage] = append(want[ConditionsPage], "`"+n.Value+"`")
		}
	}
	for _, m := range metrics {
		want[MetricsPage] = append(want[MetricsPage], "`"+m.Name+"`")
	}
	for path, names := range want {
		page := readPage(t, path)
		for _, name := range names {
			if !strings.Contains(page, "\n| "+name) {
				t.Errorf("%s lacks %s, which the code has: run make docs", path, name)
			}
		}
		if page != pages[path] {
			t.Errorf("%s is not what hack/docsgen writes: run make docs", path)
		}
	}
}

// TestKeysAreConstants fails on each annotation, label, taint or finalizer
// key the product spells as a string literal: the reference lists the keys
// of constants, with their doc comments, and would miss it.
func TestKeysAreConstants(t *testing.T) {
	names, err := LoadNames(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, literal := range names.KeyLiterals {
		t.Errorf("%s is a key spelled as a literal: declare it as a constant with a doc comment, which docs/reference lists (make docs)", literal)
	}
}

// TestAPIReferenceHasEveryField fails when docs/reference/api.md, which
// crd-ref-docs writes (make docs), lacks a type or field of the
// ClusterAutoscaler API.
func TestAPIReferenceHasEveryField(t *testing.T) {
	page := readPage(t, APIPage)
	seen := map[reflect.Type]bool{}
	var visit func(reflect.Type)
	visit = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeFor[autoscalingv1alpha1.ClusterAutoscaler]().PkgPath() || seen[typ] {
			return
		}
		seen[typ] = true
		_, section, found := strings.Cut(page, "\n#### "+typ.Name()+"\n")
		if !found {
			t.Errorf("docs/reference/api.md lacks the type %s: run make docs", typ.Name())
			return
		}
		section, _, _ = strings.Cut(section, "\n#### ")
		for i := range typ.NumField() {
			field := typ.Field(i)
			name, _, _ := strings.Cut(field.Tag.Get("json"), ",")
			if name != "" && name != "-" && !field.Anonymous && !strings.Contains(section, "| `"+name+"` ") {
				t.Errorf("docs/reference/api.md lacks the field %s of %s: run make docs", name, typ.Name())
			}
			visit(field.Type)
		}
	}
	visit(reflect.TypeFor[autoscalingv1alpha1.ClusterAutoscaler]())
	if len(seen) < 10 {
		t.Fatalf("only %d types of the API visited", len(seen))
	}
}

// TestAPIPageOpening checks that the page crd-ref-docs writes gets the
// opening of a page of docs/, once however often docsgen runs.
func TestAPIPageOpening(t *testing.T) {
	const body = "\n## Packages\n- [autoscaling.cluster.x-k8s.io/v1alpha1](#autoscalingclusterx-k8siov1alpha1)\n"
	page := withAPIPageOpening(crdRefDocsTitle + body)
	if page != apiPageOpening+body {
		t.Errorf("the page crd-ref-docs wrote became\n%s", page)
	}
	if again := withAPIPageOpening(page); again != page {
		t.Errorf("a second run changed the page to\n%s", again)
	}
	if !strings.HasPrefix(readPage(t, APIPage), apiPageOpening) {
		t.Errorf("%s does not open as docsgen writes it: run make docs", APIPage)
	}
}
