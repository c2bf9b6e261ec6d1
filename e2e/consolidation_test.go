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
	dayBudgets    = flag.String("e2e.day.budgets", "", "Comma-separated budget.nodes of further Balanced Clusters of the compressed day (label day), e.g. 50%")
	dayReportPath = flag.String("e2e.day.report", "", "File the figures of the compressed day (label day) are written to")
)

var _ = Describe("Consolidation replacing nodes", Label("ci"), func() {
	ConsolidationReplaceSpec(ctx, func() ConsolidationReplaceSpecInput {
		return ConsolidationReplaceSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})

// A compressed day, consolidation off and on side by side: `make day`
// (docs/cost.md, "A day on the local stack").
var _ = Describe("A day on the local stack", Label("day"), func() {
	DaySpec(ctx, func() DaySpecInput {
		var budgets []string
		if *dayBudgets != "" {
			budgets = strings.Split(*dayBudgets, ",")
		}
		return DaySpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig, Hour: *dayHour, ManagerLog: suiteManager.LogPath(), ReportPath: *dayReportPath,
			Budgets: budgets}
	})
})
