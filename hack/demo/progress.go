package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/view"
)

// plainWidth is the width of the views printed when stdout is no terminal.
const plainWidth = 120

// progress tells people what the demo does: on a terminal, the live view of
// `kubectl capi-autoscaler top` redrawn in place while a phase runs;
// otherwise timestamped lines, and the view at the end of each phase.
type progress struct {
	out *os.File
	tty bool
	// frameLines is the height of the view last drawn on the terminal, 0
	// when none is being redrawn.
	frameLines int
	// lastFrame is the view last shown, for the end of a phase.
	lastFrame []string
}

func newProgress(f *os.File) *progress {
	tty := term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb"
	return &progress{out: f, tty: tty}
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

// show shows the clusters during a phase: the plugin's live view of the
// ClusterAutoscaler, and what the workload cluster runs.
func (p *progress) show(phase string, started time.Time, s *state) {
	width := plainWidth
	if p.tty {
		if w, _, err := term.GetSize(int(p.out.Fd())); err == nil {
			width = w
		}
	}
	frame := []string{fmt.Sprintf("── %s · %s ──", phase, time.Since(started).Round(time.Second))}
	if len(s.view.Clusters) == 0 {
		frame = append(frame, "No ClusterAutoscaler yet.")
	}
	frame = append(frame, view.LiveFrame(s.view, width, p.tty && os.Getenv("NO_COLOR") == "", time.Now())...)
	frame = append(frame, "", "Workload cluster: "+s.workloadText())
	p.lastFrame = frame
	if p.tty {
		p.draw(frame)
	}
}

// draw redraws the view in place. Line wrapping is off while it is shown,
// so that long lines are cut rather than shift the view.
func (p *progress) draw(frame []string) {
	var b bytes.Buffer
	if p.frameLines == 0 {
		b.WriteString("\x1b[?7l")
	} else {
		fmt.Fprintf(&b, "\x1b[%dA\x1b[J", p.frameLines)
	}
	writeLines(&b, frame)
	_, _ = p.out.Write(b.Bytes())
	p.frameLines = len(frame)
}

// endFrame leaves the last view of a phase on the screen, or prints it
// when stdout is no terminal.
func (p *progress) endFrame() {
	if p.frameLines > 0 {
		fmt.Fprint(p.out, "\x1b[?7h")
	}
	if !p.tty && len(p.lastFrame) > 0 {
		writeLines(p.out, p.lastFrame)
	}
	p.frameLines = 0
	p.lastFrame = nil
}

func writeLines(w io.Writer, lines []string) {
	for _, line := range lines {
		fmt.Fprintln(w, line)
	}
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

// workloadText is what the workload cluster runs, in one line.
func (s *state) workloadText() string {
	groups := make([]string, 0, len(s.groups))
	for _, g := range s.groups {
		groups = append(groups, fmt.Sprintf("%s %d/%d ready", g.name, g.ready, g.replicas))
	}
	text := fmt.Sprintf("%s (%d ready) · pods %d running, %d pending", plural(s.nodes, "node"), s.readyNodes, s.runningPods, s.pendingPods)
	if s.terminatingPods > 0 {
		text += fmt.Sprintf(", %d terminating", s.terminatingPods)
	}
	return text + " · " + strings.Join(groups, ", ")
}

// plural is "1 node" or "2 nodes".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
