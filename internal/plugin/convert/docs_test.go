package convert

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

// flagTableDoc is docs/convert-flags.md: the flag table, as users read it.
func flagTableDoc() string {
	var b strings.Builder
	b.WriteString(`# Upstream cluster-autoscaler flags and the ClusterAutoscaler

After this page you can tell what becomes of each flag of your upstream
cluster-autoscaler in a ClusterAutoscaler ([migrating](migrating.md)).

What ` + "`kubectl capi-autoscaler convert`" + ` (docs/operations.md, "Converting
the upstream cluster-autoscaler") makes of each flag of the upstream
cluster-autoscaler. Generated from its flag table
(` + "`internal/plugin/convert/flags.go`, `unmapped.go`" + `) by
` + "`go test ./internal/plugin/convert -run TestFlagTableDoc -update`" + `; the test fails
when this file and the table differ. A flag convert does not know is left
out with a warning.

## Flags with a field

| upstream flag | field | upstream default | our default | note |
| --- | --- | --- | --- | --- |
`)
	ours := autoscaler.DefaultConfig()
	mapped, unmapped := 0, 0
	for _, row := range flagTable {
		if row.reason != "" && row.apply == nil {
			continue
		}
		mapped++
		upstream, our := docDefault(row.upstream.value), "—"
		if row.upstream.since != 0 {
			upstream += fmt.Sprintf(" (%s before 1.%d)", docDefault(row.upstream.earlier), row.upstream.since)
		}
		if row.ours != nil {
			our = docDefault(row.ours(ours))
		}
		if row.ours == nil && row.upstream.value == "" {
			upstream = "—"
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s | %s | %s |\n", row.flag, docField(row.field), upstream, our, markdownText.Replace(row.note))
	}
	b.WriteString(`
## Flags without a field

| upstream flag | why, and what takes its place |
| --- | --- |
`)
	for _, row := range flagTable {
		if row.reason == "" || row.apply != nil {
			continue
		}
		unmapped++
		reason := row.reason
		if row.differs != nil {
			reason += fmt.Sprintf("; `--%s=%s` asks for the opposite of what capi-autoscaler does, and is a warning, which `--strict` fails on", row.flag, row.differing)
			if row.upstream.value != "" {
				reason += fmt.Sprintf("; so is leaving the flag out, as upstream's default is `%s`", row.upstream.value)
			}
		}
		fmt.Fprintf(&b, "| `--%s` | %s |\n", row.flag, markdownText.Replace(reason))
	}
	fmt.Fprintf(&b, "\n%d flags with a field, %d without.\n", mapped, unmapped)
	return b.String()
}

// markdownText keeps text as it is in Markdown.
var markdownText = strings.NewReplacer("<", "&lt;", ">", "&gt;", "|", "\\|")

func docDefault(value string) string {
	if value == "" {
		return "none"
	}
	return "`" + value + "`"
}

func docField(field string) string {
	if strings.HasPrefix(field, "spec.") || strings.HasPrefix(field, "metadata.") {
		return "`" + strings.ReplaceAll(field, ", ", "`, `") + "`"
	}
	return field
}

func TestFlagTableDoc(t *testing.T) {
	path := filepath.Join("..", "..", "..", "docs", "convert-flags.md")
	got := flagTableDoc()
	if *plugintest.Update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s is not the flag table: go test ./internal/plugin/convert -run TestFlagTableDoc -update rewrites it", path)
	}
}
