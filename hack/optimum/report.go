package optimum

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// MeasureOptions say which mixes to measure and how.
type MeasureOptions struct {
	Seed  uint64
	Mixes int
	// Planners are measured on every mix, in order.
	Planners []Planner
	Solve    SolveOptions
	// Progress, when set, gets a line as each mix is done.
	Progress io.Writer
}

// Result is one mix measured.
type Result struct {
	Mix     *Mix
	Optimum *Optimum
	// Plans are the planners' placements, in the order of the planners;
	// a placement that breaks the mix's rules or leaves pods unplaced
	// has Err set.
	Plans []Plan
}

// Plan is a planner's placement of a mix and its cost.
type Plan struct {
	Planner string
	*Placement
	Cost pricing.Price
	// Err says why the plan does not count: it broke the mix's rules,
	// left pods unplaced, or the planner failed.
	Err error
}

// Ratio is the plan's cost over the optimum's.
func (r *Result) Ratio(p Plan) float64 { return float64(p.Cost) / float64(r.Optimum.Cost) }

// Measure runs the planners on each mix, bounds the model of the mix
// with the cheapest plan that keeps the rules, and solves it.
func Measure(ctx context.Context, opts MeasureOptions) ([]Result, error) {
	var results []Result
	for index := range opts.Mixes {
		mix := Generate(opts.Seed, index)
		result := Result{Mix: mix}
		solve := opts.Solve
		for _, planner := range opts.Planners {
			plan := Plan{Planner: planner.Name()}
			plan.Placement, plan.Err = planner.Place(ctx, mix)
			if plan.Err == nil {
				plan.Cost = plan.Placement.Cost(mix)
				plan.Err = plan.Check(mix)
				if plan.Err == nil && plan.Unplaced > 0 {
					plan.Err = fmt.Errorf("%d pods left unplaced", plan.Unplaced)
				}
			}
			if plan.Err == nil && (solve.UpperBound == 0 || plan.Cost < solve.UpperBound) {
				solve.UpperBound = plan.Cost
			}
			result.Plans = append(result.Plans, plan)
		}
		optimum, err := Solve(ctx, mix, solve)
		if err != nil {
			return results, err
		}
		result.Optimum = optimum
		results = append(results, result)
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "mix %s: %d pods, %d groups, %s: optimum %s (%s)", mix.Name, mix.Pods(), len(mix.Groups), mix.Constraints(), optimum.Cost, optimum.Took.Round(time.Millisecond))
			for _, plan := range result.Plans {
				fmt.Fprintf(opts.Progress, ", %s %s", plan.Planner, describe(&result, plan))
			}
			fmt.Fprintln(opts.Progress)
		}
	}
	return results, nil
}

func describe(r *Result, p Plan) string {
	if p.Err != nil {
		return "failed: " + p.Err.Error()
	}
	return fmt.Sprintf("%.3f", r.Ratio(p))
}

// WriteTable writes the results as a Markdown table: per mix, the
// optimum's cost and nodes, and each plan's cost over it; then the
// totals, each planner's total cost over the optimums' total (the mixes
// where a plan failed left out of its total), and the worst mix of each.
func WriteTable(w io.Writer, results []Result) {
	if len(results) == 0 {
		return
	}
	planners := make([]string, 0, len(results[0].Plans))
	for _, plan := range results[0].Plans {
		planners = append(planners, plan.Planner)
	}
	fmt.Fprintf(w, "| mix | pods | groups | constraints | optimum /h | optimum nodes | %s |\n", strings.Join(planners, " | "))
	fmt.Fprintf(w, "|---|--:|--:|---|--:|---|%s\n", strings.Repeat("--:|", len(planners)))
	optimums := make([]pricing.Price, len(planners))
	costs := make([]pricing.Price, len(planners))
	worst := make([]*Result, len(planners))
	for i := range results {
		r := &results[i]
		optimum := r.Optimum.Cost.String()
		if !r.Optimum.Proven {
			optimum += fmt.Sprintf(" (≥ %s)", r.Optimum.Bound)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s |", r.Mix.Name, r.Mix.Pods(), len(r.Mix.Groups), r.Mix.Constraints(), optimum, nodeCounts(r.Mix, &r.Optimum.Placement))
		for p, plan := range r.Plans {
			fmt.Fprintf(w, " %s |", describe(r, plan))
			if plan.Err != nil {
				continue
			}
			optimums[p] += r.Optimum.Cost
			costs[p] += plan.Cost
			if worst[p] == nil || r.Ratio(plan) > worst[p].Ratio(worst[p].Plans[p]) {
				worst[p] = r
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "| **total** | | | | | |")
	for p := range planners {
		fmt.Fprintf(w, " **%.3f** |", float64(costs[p])/float64(max(optimums[p], 1)))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| **worst** | | | | | |")
	for p := range planners {
		if worst[p] == nil {
			fmt.Fprint(w, " - |")
			continue
		}
		fmt.Fprintf(w, " %.3f (%s) |", worst[p].Ratio(worst[p].Plans[p]), worst[p].Mix.Name)
	}
	fmt.Fprintln(w)
}

// nodeCounts writes a placement's nodes by group, e.g. "2×md-0-4c16g".
func nodeCounts(m *Mix, p *Placement) string {
	counts := make([]int, len(m.Groups))
	for _, node := range p.Nodes {
		counts[node.Group]++
	}
	var parts []string
	for g, count := range counts {
		if count > 0 {
			parts = append(parts, fmt.Sprintf("%d×%s", count, m.Groups[g].Name))
		}
	}
	return strings.Join(parts, ", ")
}

// WriteMix describes a mix and the planners' placements of it, for
// looking into a mix where a plan is far from the optimum.
func WriteMix(w io.Writer, r *Result) {
	m := r.Mix
	fmt.Fprintf(w, "mix %s, zones %s\n", m.Name, strings.Join(m.Zones, ", "))
	for _, group := range m.Groups {
		fmt.Fprintf(w, "  group %s: %dm cpu, %dMi allocatable, %s/h, %s\n", group.Name, group.MilliCPU, group.MemoryMiB, group.Price, group.Zone)
	}
	for _, app := range m.Apps {
		fmt.Fprintf(w, "  app %s: %d × %dm cpu, %dMi, spread %t, anti-affinity %t\n", app.Name, app.Replicas, app.MilliCPU, app.MemoryMiB, app.Spread, app.AntiAffinity)
	}
	writePlacement(w, m, "optimum", &r.Optimum.Placement)
	for _, plan := range r.Plans {
		if plan.Placement != nil {
			writePlacement(w, m, plan.Planner, plan.Placement)
		}
	}
}

func writePlacement(w io.Writer, m *Mix, name string, p *Placement) {
	fmt.Fprintf(w, "  %s: %s/h, %s\n", name, p.Cost(m), nodeCounts(m, p))
	for _, node := range p.Nodes {
		counts := map[string]int{}
		var order []string
		for _, a := range node.Pods {
			if counts[m.Apps[a].Name]++; counts[m.Apps[a].Name] == 1 {
				order = append(order, m.Apps[a].Name)
			}
		}
		var parts []string
		for _, app := range order {
			parts = append(parts, fmt.Sprintf("%d×%s", counts[app], app))
		}
		fmt.Fprintf(w, "    %s: %s\n", m.Groups[node.Group].Name, strings.Join(parts, " "))
	}
}
