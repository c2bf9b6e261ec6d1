package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// Values of --color.
const (
	colorAuto   = "auto"
	colorAlways = "always"
	colorNever  = "never"
)

// Palette colours text with ANSI escape codes, or leaves it plain.
type Palette struct{ Enabled bool }

func (p Palette) paint(code, text string) string {
	if !p.Enabled || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

// Bold is text in bold.
func (p Palette) Bold(text string) string { return p.paint("1", text) }

// Dim is text dimmed.
func (p Palette) Dim(text string) string { return p.paint("2", text) }

// Red is text in red.
func (p Palette) Red(text string) string { return p.paint("31", text) }

// Green is text in green.
func (p Palette) Green(text string) string { return p.paint("32", text) }

// Yellow is text in yellow.
func (p Palette) Yellow(text string) string { return p.paint("33", text) }

// Cyan is text in cyan.
func (p Palette) Cyan(text string) string { return p.paint("36", text) }

// ago is the age of t for people, e.g. "3m10s ago", or "in 2m" for a time
// to come.
func ago(t time.Time, now time.Time) string {
	if d := now.Sub(t); d >= 0 {
		return duration.HumanDuration(d) + " ago"
	}
	return "in " + duration.HumanDuration(t.Sub(now))
}

// Clock is a time of day in the local zone, with the date when it is not
// today's.
func Clock(t time.Time, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); now.Year() == y && now.Month() == m && now.Day() == d {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}

// TimeAndAge is e.g. "10:42:07 (3m ago)", or "never" for no time.
func TimeAndAge(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	return fmt.Sprintf("%s (%s)", Clock(t.Time, now), ago(t.Time, now))
}

// GroupName names a node group within its Cluster's namespace, e.g.
// "MachineDeployment md-0", and with its namespace elsewhere.
func GroupName(id, namespace string) string {
	kind, ns, name, ok := scalable.ParseID(id)
	switch {
	case !ok:
		return id
	case ns != namespace:
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// Plural is "1 pod" or "2 pods".
func Plural(n int32, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Tree is a node of the status tree.
type Tree struct {
	Text     string
	children []*Tree
}

// Add adds a child and returns it.
func (t *Tree) Add(format string, args ...any) *Tree {
	child := &Tree{Text: fmt.Sprintf(format, args...)}
	t.children = append(t.children, child)
	return child
}

// Write writes the Tree with box-drawing branches.
func (t *Tree) Write(w io.Writer) {
	fmt.Fprintln(w, t.Text)
	t.writeChildren(w, "")
}

func (t *Tree) writeChildren(w io.Writer, indent string) {
	for i, child := range t.children {
		branch, next := "├─ ", "│  "
		if i == len(t.children)-1 {
			branch, next = "└─ ", "   "
		}
		fmt.Fprintln(w, indent+branch+child.Text)
		child.writeChildren(w, indent+next)
	}
}

// ShortDuration is a duration to the second as the CRD's defaults are
// written, e.g. 1h, 2m, 1m30s.
func ShortDuration(d time.Duration) string {
	text := d.Round(time.Second).String()
	if strings.HasSuffix(text, "m0s") {
		text = strings.TrimSuffix(text, "0s")
	}
	if strings.HasSuffix(text, "h0m") {
		text = strings.TrimSuffix(text, "0m")
	}
	return text
}
