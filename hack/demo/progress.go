package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
)

// shownDecisions is how many of the latest decisions the table shows.
const shownDecisions = 8

// progress tells people what the demo does: on a terminal, a table redrawn
// in place while a phase runs; otherwise timestamped lines, one for every
// change.
type progress struct {
	out io.Writer
	tty bool
	// frameLines is the height of the table last drawn on the terminal, 0
	// when none is being redrawn.
	frameLines int
	// lastStatus and printed are what was already written as lines.
	lastStatus string
	printed    sets.Set[string]
}

func newProgress(f *os.File) *progress {
	info, err := f.Stat()
	tty := err == nil && info.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb"
	return &progress{out: f, tty: tty, printed: sets.New[string]()}
}

// step says what the demo does next.
func (p *progress) step(format string, args ...any) {
	p.line("  " + fmt.Sprintf(format, args...))
}

// done says what the demo achieved.
func (p *progress) done(format string, args ...any) {
	p.line("✓ " + fmt.Sprintf(format, args...))
}

func (p *progress) line(text string) {
	fmt.Fprintf(p.out, "%s %s\n", time.Now().Format(time.TimeOnly), text)
}

// show shows the state of the clusters during a phase.
func (p *progress) show(phase string, started time.Time, s *state) {
	if p.tty {
		p.draw(phase, started, s)
		return
	}
	if status := s.statusLine(); status != p.lastStatus {
		p.line(phase + ": " + status)
		p.lastStatus = status
	}
	var fresh []decision
	for _, d := range s.decisions {
		// Once per object and message, however often the event recurs.
		key := d.reason + "/" + d.kind + "/" + d.name + "/" + d.message
		if !p.printed.Has(key) {
			p.printed.Insert(key)
			fresh = append(fresh, d)
		}
	}
	for _, d := range mergeDecisions(fresh) {
		fmt.Fprintf(p.out, "%s   %s\n", d.time.Format(time.TimeOnly), d)
	}
}

// draw redraws the table of a phase in place. Line wrapping is off while
// it is shown, so that long lines are cut rather than shift the table.
func (p *progress) draw(phase string, started time.Time, s *state) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "── %s · %s ──\n", phase, time.Since(started).Round(time.Second))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE GROUP\tMIN\tMAX\tNODE\tREPLICAS\tMACHINES\tREADY\tUPCOMING")
	for _, g := range s.groups {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\n", g.name, g.min, g.max, orDash(g.nodeCapacity), g.replicas, g.machines, g.ready, g.upcoming)
	}
	_ = tw.Flush()
	fmt.Fprintf(&b, "  Nodes: %d (%d ready)    Pods: %s\n", s.nodes, s.readyNodes, s.podsText())
	fmt.Fprintf(&b, "  Autoscaler: %s\n", s.autoscalerText())
	if decisions := mergeDecisions(s.decisions); len(decisions) > 0 {
		fmt.Fprintln(&b, "  Latest decisions:")
		for _, d := range decisions[max(0, len(decisions)-shownDecisions):] {
			fmt.Fprintf(&b, "    %s  %s\n", d.time.Format(time.TimeOnly), d)
		}
	}

	if p.frameLines == 0 {
		fmt.Fprint(p.out, "\x1b[?7l")
	} else {
		fmt.Fprintf(p.out, "\x1b[%dA\x1b[J", p.frameLines)
	}
	_, _ = p.out.Write(b.Bytes())
	p.frameLines = bytes.Count(b.Bytes(), []byte("\n"))
}

// endFrame leaves the last table of a phase on the screen.
func (p *progress) endFrame() {
	if p.frameLines > 0 {
		fmt.Fprint(p.out, "\x1b[?7h")
	}
	p.frameLines = 0
	p.lastStatus = ""
}

// summary reports what the scale-up and the scale-down took.
func (p *progress) summary(up, down phaseResult) {
	fmt.Fprintf(p.out, `
Summary
  Scale-up:   %s running on %s %s after the workload was applied (first decision after %s)
  Scale-down: back to %s %s after the workload was removed (first decision after %s: nodes go once unneeded for %s)

`, plural(up.pods, "pod"), plural(up.nodes, "node"), up.duration, up.firstDecision,
		plural(down.nodes, "node"), down.duration, down.firstDecision, unneededTime)
}

// statusLine is the state in one line, without the decisions.
func (s *state) statusLine() string {
	parts := make([]string, 0, len(s.groups)+3)
	for _, g := range s.groups {
		parts = append(parts, fmt.Sprintf("%s %s, %d ready", g.name, plural(int(g.replicas), "replica"), g.ready))
	}
	parts = append(parts,
		fmt.Sprintf("nodes %d (%d ready)", s.nodes, s.readyNodes),
		"pods "+s.podsText(),
		"autoscaler "+s.autoscalerText())
	return strings.Join(parts, " | ")
}

func (s *state) podsText() string {
	text := fmt.Sprintf("%d running, %d pending", s.runningPods, s.pendingPods)
	if s.terminatingPods > 0 {
		text += fmt.Sprintf(", %d terminating", s.terminatingPods)
	}
	return text
}

func (s *state) autoscalerText() string {
	switch {
	case !s.autoscalerCreated:
		return "not created yet"
	case s.autoscalerReason == "":
		return "starting"
	case !s.autoscalerReady:
		return "not ready (" + s.autoscalerReason + ")"
	}
	text := fmt.Sprintf("ready, %s", plural(int(s.unschedulablePods), "unschedulable pod"))
	if s.lastScaleUp != nil {
		text += ", last scale-up " + s.lastScaleUp.Local().Format(time.TimeOnly)
	}
	if s.lastScaleDown != nil {
		text += ", last scale-down " + s.lastScaleDown.Local().Format(time.TimeOnly)
	}
	return text
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// plural is "1 node" or "2 nodes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
