package plugin

import (
	"fmt"
	"io"
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

// palette colours text with ANSI escape codes, or leaves it plain.
type palette struct{ enabled bool }

func (p palette) paint(code, text string) string {
	if !p.enabled || text == "" {
		return text
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

func (p palette) bold(text string) string   { return p.paint("1", text) }
func (p palette) dim(text string) string    { return p.paint("2", text) }
func (p palette) red(text string) string    { return p.paint("31", text) }
func (p palette) green(text string) string  { return p.paint("32", text) }
func (p palette) yellow(text string) string { return p.paint("33", text) }
func (p palette) cyan(text string) string   { return p.paint("36", text) }

// condition is a condition in brief: ✓ True, ✗ False, ? Unknown; all four
// are good when True.
func (p palette) condition(c ConditionView) string {
	switch c.Status {
	case metav1.ConditionTrue:
		return p.green("✓") + " " + c.Type
	case metav1.ConditionFalse:
		return p.red("✗ " + c.Type)
	}
	return p.yellow("? " + c.Type)
}

// failing says whether a condition needs the user's attention.
func failing(c ConditionView) bool {
	return c.Status != metav1.ConditionTrue
}

// ago is the age of t for people, e.g. "3m10s ago", or "in 2m" for a time
// to come.
func ago(t time.Time, now time.Time) string {
	if d := now.Sub(t); d >= 0 {
		return duration.HumanDuration(d) + " ago"
	}
	return "in " + duration.HumanDuration(t.Sub(now))
}

// clock is a time of day in the local zone, with the date when it is not
// today's.
func clock(t time.Time, now time.Time) string {
	t, now = t.Local(), now.Local()
	if y, m, d := t.Date(); now.Year() == y && now.Month() == m && now.Day() == d {
		return t.Format(time.TimeOnly)
	}
	return t.Format(time.DateTime)
}

// timeAndAge is e.g. "10:42:07 (3m ago)", or "never" for no time.
func timeAndAge(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	return fmt.Sprintf("%s (%s)", clock(t.Time, now), ago(t.Time, now))
}

// groupName names a node group within its Cluster's namespace, e.g.
// "MachineDeployment md-0", and with its namespace elsewhere.
func groupName(id, namespace string) string {
	kind, ns, name, ok := scalable.ParseID(id)
	switch {
	case !ok:
		return id
	case ns != namespace:
		return kind + " " + ns + "/" + name
	}
	return kind + " " + name
}

// plural is "1 pod" or "2 pods".
func plural(n int32, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// tree is a node of the status tree.
type tree struct {
	text     string
	children []*tree
}

// add adds a child and returns it.
func (t *tree) add(format string, args ...any) *tree {
	child := &tree{text: fmt.Sprintf(format, args...)}
	t.children = append(t.children, child)
	return child
}

// write writes the tree with box-drawing branches.
func (t *tree) write(w io.Writer) {
	fmt.Fprintln(w, t.text)
	t.writeChildren(w, "")
}

func (t *tree) writeChildren(w io.Writer, indent string) {
	for i, child := range t.children {
		branch, next := "├─ ", "│  "
		if i == len(t.children)-1 {
			branch, next = "└─ ", "   "
		}
		fmt.Fprintln(w, indent+branch+child.text)
		child.writeChildren(w, indent+next)
	}
}
