package optimum

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

// Optimum is the cheapest set of new nodes for a mix, as CBC found it.
type Optimum struct {
	Placement
	// Cost is the cost of Placement; Bound the least any placement can
	// cost, as CBC proved it. They are equal when Proven.
	Cost, Bound pricing.Price
	Proven      bool
	Took        time.Duration
}

// SolveOptions tune Solve.
type SolveOptions struct {
	// CBC is the solver's binary: "cbc" on the PATH when empty.
	CBC string
	// TimeLimit bounds CBC's search; past it, the best placement found
	// and the bound proven so far are returned.
	TimeLimit time.Duration
	// UpperBound, when set, is the cost of a placement known to satisfy
	// the mix's rules (Placement.Check): no group needs more nodes than
	// that cost buys, which keeps the model small.
	UpperBound pricing.Price
	// Dir keeps the model and CBC's solution there when set, for a look;
	// else they go to a temporary directory, removed after.
	Dir string
}

// Solve computes the cheapest placement of the mix's pods on new nodes
// with the integer program Model writes, solved by CBC.
func Solve(ctx context.Context, m *Mix, opts SolveOptions) (*Optimum, error) {
	cbc := opts.CBC
	if cbc == "" {
		cbc = "cbc"
	}
	dir := opts.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "optimum-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	model := NewModel(m, opts.UpperBound)
	base := filepath.Join(dir, strings.ReplaceAll(m.Name, "/", "-"))
	if err := os.WriteFile(base+".lp", []byte(model.LP()), 0o600); err != nil {
		return nil, err
	}
	args := []string{base + ".lp"}
	if opts.TimeLimit > 0 {
		args = append(args, "-sec", strconv.Itoa(int(math.Ceil(opts.TimeLimit.Seconds()))))
	}
	args = append(args, "-threads", "1", "-solve", "-solu", base+".sol")
	start := time.Now()
	out, err := exec.CommandContext(ctx, cbc, args...).CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("cbc on %s: %w: %s", m.Name, err, tail(out))
	}
	solution, err := os.ReadFile(base + ".sol")
	if err != nil {
		return nil, fmt.Errorf("cbc on %s wrote no solution: %w: %s", m.Name, err, tail(out))
	}
	optimum, err := model.read(solution, out)
	if err != nil {
		return nil, fmt.Errorf("cbc on %s: %w", m.Name, err)
	}
	optimum.Took = took
	if err := optimum.Check(m); err != nil {
		return nil, fmt.Errorf("cbc's placement of %s breaks the mix's rules: %w", m.Name, err)
	}
	return optimum, nil
}

func tail(out []byte) string {
	const keep = 2000
	if len(out) > keep {
		out = out[len(out)-keep:]
	}
	return string(out)
}

// Model is the integer program of a mix: bin packing with, for each group
// g, a row of up to Slots[g] nodes, used in order (y_g_k binary, node k of
// group g is bought), and how many pods of each app a go on each node
// (x_a_g_k integer: the pods of an app are alike, so they are counted,
// not named, which leaves the solver far fewer symmetric placements).
//
//	minimize   Σ price_g · y_g_k
//	subject to Σ_g,k x_a_g_k = replicas_a                 every pod placed
//	           Σ_a cpu_a · x_a_g_k ≤ cpu_g · y_g_k         allocatable cpu
//	           Σ_a mem_a · x_a_g_k ≤ mem_g · y_g_k         allocatable memory
//	           x_a_g_k ≤ y_g_k              for an app with anti-affinity
//	           Σ_{g in z},k x_a_g_k − Σ_{g in z'},k x_a_g_k ≤ 1
//	                               for a spread app, any two zones z ≠ z'
//	           y_g_k+1 ≤ y_g_k                             nodes in order
//
// Every zone counts as a topology domain (Mix.Zones), so a spread app's
// pods are at most one apart between any two zones, as kube-scheduler
// requires with maxSkew 1 once the cluster has a node in each zone.
// Prices are in millionths, so the objective is a whole number.
type Model struct {
	mix *Mix
	// Slots are the most nodes of each group a placement may need.
	Slots []int
}

// NewModel sizes the model of m: a group needs no more nodes than the
// pods that fit it, nor than upperBound (when set) buys.
func NewModel(m *Mix, upperBound pricing.Price) *Model {
	model := &Model{mix: m, Slots: make([]int, len(m.Groups))}
	for g, group := range m.Groups {
		for _, app := range m.Apps {
			if group.Fits(app) {
				model.Slots[g] += app.Replicas
			}
		}
		if upperBound > 0 && group.Price > 0 {
			model.Slots[g] = min(model.Slots[g], int(upperBound/group.Price))
		}
	}
	return model
}

func nodeVar(g, k int) string    { return fmt.Sprintf("y_%d_%d", g, k) }
func podsVar(a, g, k int) string { return fmt.Sprintf("x_%d_%d_%d", a, g, k) }

// LP writes the model in CPLEX LP format, which CBC reads.
func (m *Model) LP() string {
	mix := m.mix
	var b strings.Builder
	fmt.Fprintf(&b, "\\ cheapest new nodes for mix %s\nMinimize\n obj:", mix.Name)
	for g, group := range mix.Groups {
		for k := range m.Slots[g] {
			fmt.Fprintf(&b, " + %d %s", group.Price, nodeVar(g, k))
		}
	}
	b.WriteString("\nSubject To\n")
	for a, app := range mix.Apps {
		fmt.Fprintf(&b, " placed_%d:", a)
		for g, group := range mix.Groups {
			if !group.Fits(app) {
				continue
			}
			for k := range m.Slots[g] {
				fmt.Fprintf(&b, " + %s", podsVar(a, g, k))
			}
		}
		fmt.Fprintf(&b, " = %d\n", app.Replicas)
	}
	for g, group := range mix.Groups {
		for k := range m.Slots[g] {
			fmt.Fprintf(&b, " cpu_%d_%d:", g, k)
			for a, app := range mix.Apps {
				if group.Fits(app) {
					fmt.Fprintf(&b, " + %d %s", app.MilliCPU, podsVar(a, g, k))
				}
			}
			fmt.Fprintf(&b, " - %d %s <= 0\n", group.MilliCPU, nodeVar(g, k))
			fmt.Fprintf(&b, " mem_%d_%d:", g, k)
			for a, app := range mix.Apps {
				if group.Fits(app) {
					fmt.Fprintf(&b, " + %d %s", app.MemoryMiB, podsVar(a, g, k))
				}
			}
			fmt.Fprintf(&b, " - %d %s <= 0\n", group.MemoryMiB, nodeVar(g, k))
			for a, app := range mix.Apps {
				if app.AntiAffinity && group.Fits(app) {
					fmt.Fprintf(&b, " anti_%d_%d_%d: %s - %s <= 0\n", a, g, k, podsVar(a, g, k), nodeVar(g, k))
				}
			}
			if k > 0 {
				fmt.Fprintf(&b, " order_%d_%d: %s - %s <= 0\n", g, k, nodeVar(g, k), nodeVar(g, k-1))
			}
		}
	}
	for a, app := range mix.Apps {
		if !app.Spread {
			continue
		}
		for i, z := range mix.Zones {
			for j, other := range mix.Zones {
				if i == j {
					continue
				}
				fmt.Fprintf(&b, " spread_%d_%d_%d:", a, i, j)
				terms := 0
				for g, group := range mix.Groups {
					if !group.Fits(app) || group.Zone != z && group.Zone != other {
						continue
					}
					sign := "+"
					if group.Zone == other {
						sign = "-"
					}
					for k := range m.Slots[g] {
						fmt.Fprintf(&b, " %s %s", sign, podsVar(a, g, k))
						terms++
					}
				}
				if terms == 0 {
					// No group of either zone fits the app: both hold none.
					fmt.Fprintf(&b, " + 0 %s", nodeVar(0, 0))
				}
				b.WriteString(" <= 1\n")
			}
		}
	}
	b.WriteString("Bounds\n")
	for g, group := range mix.Groups {
		for k := range m.Slots[g] {
			for a, app := range mix.Apps {
				if group.Fits(app) {
					fmt.Fprintf(&b, " 0 <= %s <= %d\n", podsVar(a, g, k), app.Replicas)
				}
			}
		}
	}
	b.WriteString("Binaries\n")
	for g := range mix.Groups {
		for k := range m.Slots[g] {
			fmt.Fprintf(&b, " %s\n", nodeVar(g, k))
		}
	}
	b.WriteString("Generals\n")
	for g, group := range mix.Groups {
		for k := range m.Slots[g] {
			for a, app := range mix.Apps {
				if group.Fits(app) {
					fmt.Fprintf(&b, " %s\n", podsVar(a, g, k))
				}
			}
		}
	}
	b.WriteString("End\n")
	return b.String()
}

var (
	// solutionStatus is the first line of CBC's solution file, e.g.
	// "Optimal - objective value 1234.00000000" or "Stopped on time -
	// objective value 1300.00000000".
	solutionStatus = regexp.MustCompile(`^(.*?) - objective value (\S+)`)
	// lowerBound is the bound in CBC's log when it stops before proving
	// its solution optimal, e.g. "Lower bound:   1200.000".
	lowerBound = regexp.MustCompile(`(?m)^Lower bound:\s+(\S+)`)
)

// read turns CBC's solution file, and its log, into an Optimum.
func (m *Model) read(solution, log []byte) (*Optimum, error) {
	lines := bufio.NewScanner(bytes.NewReader(solution))
	if !lines.Scan() {
		return nil, errors.New("empty solution")
	}
	status := solutionStatus.FindStringSubmatch(lines.Text())
	if status == nil {
		return nil, fmt.Errorf("unexpected solution status %q", lines.Text())
	}
	optimum := &Optimum{Proven: status[1] == "Optimal"}
	if !optimum.Proven && !strings.HasPrefix(status[1], "Stopped on") {
		return nil, fmt.Errorf("no placement: %s", status[1])
	}
	nodes := map[[2]int]*Node{}
	var order [][2]int
	for lines.Scan() {
		// "index name value reduced-cost"; a line may start with "**" for
		// an infeasibility.
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(lines.Text()), "**"))
		if len(fields) < 3 {
			continue
		}
		value, err := strconv.ParseFloat(fields[2], 64)
		if err != nil {
			return nil, fmt.Errorf("solution line %q: %w", lines.Text(), err)
		}
		count := int(math.Round(value))
		if count == 0 {
			continue
		}
		parts := strings.Split(fields[1], "_")
		ints := make([]int, 0, len(parts)-1)
		for _, part := range parts[1:] {
			n, err := strconv.Atoi(part)
			if err != nil {
				return nil, fmt.Errorf("solution variable %q: %w", fields[1], err)
			}
			ints = append(ints, n)
		}
		var key [2]int
		switch {
		case parts[0] == "y" && len(ints) == 2:
			key = [2]int{ints[0], ints[1]}
		case parts[0] == "x" && len(ints) == 3:
			key = [2]int{ints[1], ints[2]}
		default:
			return nil, fmt.Errorf("unexpected solution variable %q", fields[1])
		}
		node, ok := nodes[key]
		if !ok {
			node = &Node{Group: key[0]}
			nodes[key] = node
			order = append(order, key)
		}
		if parts[0] == "x" {
			for range count {
				node.Pods = append(node.Pods, ints[0])
			}
		}
	}
	for _, key := range order {
		if nodes[key].Group >= len(m.mix.Groups) {
			return nil, fmt.Errorf("solution names group %d of %d", nodes[key].Group, len(m.mix.Groups))
		}
		optimum.Nodes = append(optimum.Nodes, *nodes[key])
	}
	optimum.Cost = optimum.Placement.Cost(m.mix)
	optimum.Bound = optimum.Cost
	if !optimum.Proven {
		match := lowerBound.FindSubmatch(log)
		if match == nil {
			return nil, errors.New("stopped without a lower bound in its log")
		}
		bound, err := strconv.ParseFloat(string(match[1]), 64)
		if err != nil {
			return nil, fmt.Errorf("lower bound %q: %w", match[1], err)
		}
		optimum.Bound = pricing.Price(math.Ceil(bound - 1e-6))
	}
	return optimum, nil
}
