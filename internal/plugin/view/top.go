package view

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// Keys that end the live view: q, and Ctrl-C and Ctrl-D, which raw mode
// passes on as bytes instead of signals.
const (
	keyCtrlC = 0x03
	keyCtrlD = 0x04
)

// plainFrameWidth is the width of the frames printed when stdout is no
// terminal.
const plainFrameWidth = 120

// NewTopCommand returns the top command.
func NewTopCommand(o *cli.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "top [CLUSTER]",
		Short: "Show the nodes of each node group and how full they are, live",
		Long: `Show, live, the autoscaled Clusters of the namespace (-A: of every namespace), or
the Cluster named namespace/name or name: each node group with its min, target
and max size, a bar per node of its utilization as scale-down measures it, and
the nodes being removed or unneeded. It redraws when a ClusterAutoscaler or the
explanation of its last loop changes. Quit with q or Ctrl-C.

When stdout is no terminal, it prints the view each time it changes instead.`,
		Example: `  kubectl capi-autoscaler top -A
  kubectl capi-autoscaler top clusters/prod`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runTop(cmd, o, args)
		},
	}
}

// runTop runs the live view until the user quits or a signal ends it.
func runTop(cmd *cobra.Command, o *cli.Options, args []string) error {
	scope, c, err := o.ScopedClient(cmd, args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	views := make(chan liveUpdate, 1)
	go watchViews(ctx, c, scope, func(view *StatusView, err error) {
		// Only the latest view matters.
		select {
		case <-views:
		default:
		}
		views <- liveUpdate{view: view, err: err, at: o.Now()}
	})
	if !o.OutIsTerminal() {
		return printFrames(ctx, o.Out(), views, scope, o.Palette())
	}
	out := o.Streams.Out.(*os.File)
	screen, err := openScreen(o.Streams.In, out)
	if err != nil {
		return err
	}
	defer screen.close()

	resized := make(chan os.Signal, 1)
	signal.Notify(resized, syscall.SIGWINCH)
	defer signal.Stop(resized)

	var last liveUpdate
	for {
		select {
		case <-ctx.Done():
			return nil
		case key, ok := <-screen.keys:
			if !ok || key == 'q' || key == 'Q' || key == keyCtrlC || key == keyCtrlD {
				return nil
			}
			continue
		case update := <-views:
			last.err, last.at = update.err, update.at
			if update.err == nil {
				last.view = update.view
			}
		case <-resized:
			// The terminal may have cut or moved what it showed.
			screen.previous = nil
		}
		width, height, err := term.GetSize(int(out.Fd()))
		if err != nil {
			return fmt.Errorf("reading the terminal's size: %w", err)
		}
		lines := append(topHeader(last, scope, width, o.Palette()), liveLines(last, scope, width, o.Palette())...)
		screen.draw(lines, height)
	}
}

// liveUpdate is a view read at a time, or why it could not be read.
type liveUpdate struct {
	view *StatusView
	err  error
	at   time.Time
}

// topHeader is the first line of the live view: what it shows, when it was
// read, and how to quit.
func topHeader(u liveUpdate, scope cli.Scope, width int, p cli.Palette) []string {
	left := "capi-autoscaler top · ClusterAutoscalers " + scope.String()
	if !u.at.IsZero() {
		left += " · " + u.at.Local().Format(time.TimeOnly)
	}
	right := "q: quit"
	header := p.Bold(left)
	if gap := width - len([]rune(left)) - len(right); gap > 0 {
		header += strings.Repeat(" ", gap) + p.Dim(right)
	}
	lines := []string{header}
	if u.err != nil {
		lines = append(lines, p.Red("cannot read the view: "+u.err.Error()))
	}
	return append(lines, "")
}

// liveLines is the frame of the last view read.
func liveLines(u liveUpdate, scope cli.Scope, width int, p cli.Palette) []string {
	switch {
	case u.view == nil && u.err == nil:
		return []string{p.Dim("reading…")}
	case u.view == nil:
		return nil
	case len(u.view.Clusters) == 0:
		return []string{fmt.Sprintf("No ClusterAutoscaler %s.", scope)}
	}
	return LiveFrame(u.view, width, p.Enabled, u.at)
}

// printFrames prints the view each time it changes, for a stdout that is
// no terminal, until ctx ends.
func printFrames(ctx context.Context, out io.Writer, views <-chan liveUpdate, scope cli.Scope, p cli.Palette) error {
	var printed []string
	for {
		select {
		case <-ctx.Done():
			return nil
		case update := <-views:
			lines := liveLines(update, scope, plainFrameWidth, p)
			if update.err != nil {
				lines = append([]string{"cannot read the view: " + update.err.Error()}, lines...)
			}
			if slices.Equal(lines, printed) {
				continue
			}
			printed = lines
			fmt.Fprintf(out, "── %s ──\n%s\n\n", update.at.Local().Format(time.TimeOnly), strings.Join(lines, "\n"))
		}
	}
}

// screen is the terminal while the live view shows: the alternate screen,
// the cursor hidden and, when stdin is a terminal, raw mode, so that q
// quits without Enter.
type screen struct {
	out      *os.File
	inFd     int
	inState  *term.State
	keys     chan byte
	previous []string
}

func openScreen(in, out *os.File) (*screen, error) {
	s := &screen{out: out}
	if in != nil && term.IsTerminal(int(in.Fd())) {
		state, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return nil, fmt.Errorf("putting the terminal in raw mode: %w", err)
		}
		s.inFd, s.inState = int(in.Fd()), state
		s.keys = make(chan byte)
		go readKeys(in, s.keys)
	}
	// Alternate screen, cursor hidden, no line wrapping.
	fmt.Fprint(out, "\x1b[?1049h\x1b[?25l\x1b[?7l\x1b[H\x1b[2J")
	return s, nil
}

// readKeys sends the bytes read from in to keys, and closes it at the end
// of input. It ends with the process: a read of a terminal cannot be
// interrupted.
func readKeys(in io.Reader, keys chan<- byte) {
	buf := make([]byte, 16)
	for {
		n, err := in.Read(buf)
		for _, b := range buf[:n] {
			keys <- b
		}
		if err != nil {
			close(keys)
			return
		}
	}
}

// draw shows lines from the top of the screen, the last that fit when they
// are more than height.
func (s *screen) draw(lines []string, height int) {
	height = max(height, 2)
	if len(lines) > height {
		hidden := len(lines) - height + 1
		lines = append(lines[:height-1:height-1], fmt.Sprintf("… %d more lines: a taller terminal, or a Cluster as argument, shows them", hidden))
	}
	if slices.Equal(lines, s.previous) {
		return
	}
	s.previous = lines
	var b bytes.Buffer
	b.WriteString("\x1b[H")
	for i, line := range lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		// Erased before it is written: with wrapping off, erasing after
		// a line as wide as the screen would erase its last character.
		b.WriteString("\x1b[2K" + cli.TerminalText(line))
	}
	b.WriteString("\x1b[J")
	_, _ = s.out.Write(b.Bytes())
}

// close gives the terminal back as it was.
func (s *screen) close() {
	fmt.Fprint(s.out, "\x1b[?7h\x1b[?25h\x1b[?1049l")
	if s.inState != nil {
		_ = term.Restore(s.inFd, s.inState)
	}
}
