// Command optimum measures, on generated pending mixes, how far our
// scale-up plan, our plan followed by consolidation (Delete, then
// Replace), and Karpenter's
// scheduler are from the cheapest set of new nodes, which CBC computes
// exactly (hack/optimum; docs/cost.md, "Distance to the optimum"). It
// lives beside Karpenter's in-process scheduler, whose modules need a
// newer Go than the rest: `make optimum` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/hack/optimum"

	compare "github.com/capi-autoscaler/capi-autoscaler/hack/karpenter-compare"
)

func main() {
	seed := flag.Uint64("seed", 1, "the seed the mixes are drawn from")
	mixes := flag.Int("mixes", 40, "how many mixes to measure")
	timeLimit := flag.Duration("time-limit", time.Minute, "CBC's time limit per mix; past it the best placement found is the optimum, with the bound proven")
	worst := flag.Int("worst", 3, "describe the mixes, node by node, where our plan consolidated by Replace is furthest from the optimum")
	keep := flag.String("keep", "", "a directory to keep the models and CBC's solutions in")
	show := flag.String("show", "", "describe these mixes too, node by node: names separated by commas, e.g. 1/02,1/37")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ours := optimum.Ours{Expanders: optimum.PriceExpanders}
	planners := []optimum.Planner{
		ours,
		optimum.Consolidated{Ours: ours, Policy: scaledown.ConsolidationDelete},
		optimum.Consolidated{Ours: ours, Policy: scaledown.ConsolidationReplace},
		compare.Karpenter{},
	}
	results, err := optimum.Measure(ctx, optimum.MeasureOptions{
		Seed: *seed, Mixes: *mixes, Planners: planners, Progress: os.Stderr,
		Solve: optimum.SolveOptions{TimeLimit: *timeLimit, Dir: *keep},
	})
	optimum.WriteTable(os.Stdout, results)
	for _, name := range strings.Split(*show, ",") {
		for i := range results {
			if results[i].Mix.Name == name {
				fmt.Println()
				optimum.WriteMix(os.Stdout, &results[i])
			}
		}
	}
	const consolidated = 2 // ours+Replace
	sort.SliceStable(results, func(i, j int) bool {
		return results[i].Ratio(results[i].Plans[consolidated]) > results[j].Ratio(results[j].Plans[consolidated])
	})
	for i := range results[:min(*worst, len(results))] {
		fmt.Println()
		optimum.WriteMix(os.Stdout, &results[i])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
