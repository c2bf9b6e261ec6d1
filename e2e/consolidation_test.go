//go:build e2e

package e2e

import (
	"flag"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
)

var (
	dayHour       = flag.Duration("e2e.day.hour", 20*time.Second, "How long one hour of the compressed day (label day) lasts")
	dayRuns       = flag.String("e2e.day.runs", "off,Balanced", "The days (label day) to live one after the other: off, Balanced, Replace, or the budget.nodes of a Balanced one (50%)")
	dayReportPath = flag.String("e2e.day.report", "", "File the figures of the compressed day (label day) are written to")
)

// Full, not ci: 62 s on 2 busy cores (load 18 to 28), a minute being the
// bound of ci specs.
var _ = Describe("Consolidation replacing nodes", Label("full"), func() {
	ConsolidationReplaceSpec(ctx, func() ConsolidationReplaceSpecInput {
		return ConsolidationReplaceSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

// A compressed day, consolidation off then on: `make day`
// (docs/cost.md, "A day on the local stack").
var _ = Describe("A day on the local stack", Label("day"), func() {
	DaySpec(ctx, func() DaySpecInput {
		return DaySpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Hour: *dayHour, ManagerLog: suiteManager.LogPath(), ReportPath: *dayReportPath,
			Runs: strings.Split(*dayRuns, ",")}
	})
})
