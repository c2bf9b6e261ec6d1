// How compare prints its report: for people, as JSON or as YAML.

package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

func printCompare(w io.Writer, output string, report *Report, p cli.Palette, now time.Time) error {
	switch output {
	case cli.OutputJSON:
		data, err := json.MarshalIndent(report, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", data)
		return err
	case cli.OutputYAML:
		data, err := yaml.Marshal(report)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	writeCompare(w, report, p, now)
	return nil
}

// writeCompare writes the report for people: the scale-ups, the
// removals, the other autoscaler's status, the notes and a summary.
func writeCompare(w io.Writer, r *Report, p cli.Palette, now time.Time) {
	fmt.Fprintf(w, "%s%s\n", p.Bold(fmt.Sprintf("ClusterAutoscaler %s/%s (%s)", r.Namespace, r.ClusterAutoscaler, r.Mode)), p.Dim(fmt.Sprintf(" · Cluster %s/%s", r.Namespace, r.Cluster)))
	fmt.Fprintf(w, "compared with the other autoscaler from %s to %s (%s), tolerance ±%s, %s in its status\n",
		cli.Clock(r.WindowStart.Time, now), cli.Clock(r.WindowEnd.Time, now), cli.ShortDuration(r.WindowEnd.Sub(r.WindowStart.Time)),
		cli.ShortDuration(r.Tolerance.Duration), cli.Plural(int32(r.Decisions), "decision"))

	expired := false
	fmt.Fprintf(w, "\n%s\n", p.Bold("Scale-ups: "+countsText(r.Summary.ScaleUps, true)))
	if len(r.ScaleUps) > 0 {
		t := &table{}
		t.add(nil, "RESULT", "THEIRS", "OURS", "NODE GROUPS", "PODS THEIRS/OURS/COMMON", "LATENCY THEIRS/OURS")
		for i := range r.ScaleUps {
			m := &r.ScaleUps[i]
			expired = expired || m.TheirEventsMayHaveExpired
			their, our := m.Theirs, m.Ours
			groups := ""
			switch {
			case m.Result == Differ:
				groups = "theirs: " + groupChanges(their.NodeGroups, r.Namespace)
			case their != nil:
				groups = groupChanges(their.NodeGroups, r.Namespace)
			default:
				groups = groupChanges(our.NodeGroups, r.Namespace)
			}
			pods := fmt.Sprintf("%s/%s/%s", sideCount(their), sideCount(our), orDash(m.CommonPods, their != nil && our != nil))
			t.add(resultPaint(m.Result, p), resultText(m.Result, m.Difference, m.TheirEventsMayHaveExpired),
				sideTime(their, now), sideTime(our, now), groups, pods, sideLatency(their)+"/"+sideLatency(our))
			if m.Result == Differ {
				t.span(3, "ours:   "+groupChanges(our.NodeGroups, r.Namespace))
			}
			if their != nil && their.Problem != "" {
				t.span(3, p.Yellow(fmt.Sprintf("their message not understood: %q: %s", their.Message, their.Problem)))
			}
		}
		t.write(w, "  ")
	}

	fmt.Fprintf(w, "\n%s\n", p.Bold("Scale-downs: "+countsText(r.Summary.ScaleDowns, false)))
	if len(r.ScaleDowns) > 0 {
		t := &table{}
		t.add(nil, "RESULT", "NODE", "THEIRS", "OURS")
		for _, n := range r.ScaleDowns {
			expired = expired || n.TheirEventsMayHaveExpired
			t.add(resultPaint(n.Result, p), resultText(n.Result, "", n.TheirEventsMayHaveExpired), n.Node, optionalClock(n.Theirs, now), optionalClock(n.Ours, now))
		}
		t.write(w, "  ")
	}
	if expired {
		fmt.Fprintf(w, "\n* before %s: the other autoscaler's events of then may have expired; not counted as differences\n", cli.Clock(r.TheirEventsSince.Time, now))
	}

	if s := r.TheirStatus; s != nil {
		writeTheirStatus(w, s, r, p, now)
	}
	if len(r.Notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", p.Bold("Notes"))
		for _, note := range r.Notes {
			fmt.Fprintf(w, "  - %s\n", note)
		}
	}
	summary := fmt.Sprintf("Summary: %s; scale-ups %s; scale-downs %s", cli.Plural(int32(r.Summary.Differences), "difference"),
		countsText(r.Summary.ScaleUps, true), countsText(r.Summary.ScaleDowns, false))
	if r.Summary.Differences == 0 {
		fmt.Fprintf(w, "\n%s\n", p.Green(summary))
	} else {
		fmt.Fprintf(w, "\n%s\n", p.Yellow(summary))
	}
}

func writeTheirStatus(w io.Writer, s *TheirStatus, r *Report, p cli.Palette, now time.Time) {
	line := fmt.Sprintf("Their status: ConfigMap %s", s.ConfigMap)
	if s.LastUpdated != nil {
		line += ", written " + cli.TimeAndAge(s.LastUpdated, now)
	}
	var parts []string
	for _, part := range []struct{ label, value string }{
		{"", s.AutoscalerStatus}, {"cluster ", s.ClusterHealth}, {"scale-up ", s.ScaleUp}, {"scale-down ", s.ScaleDown},
	} {
		if part.value != "" {
			parts = append(parts, part.label+part.value)
		}
	}
	if len(parts) > 0 {
		line += ": " + strings.Join(parts, ", ")
	}
	fmt.Fprintf(w, "\n%s\n", p.Bold(line))
	if s.Problem != "" {
		fmt.Fprintf(w, "  %s\n", p.Yellow("not understood: "+s.Problem))
	}
	if len(s.NodeGroups) == 0 {
		return
	}
	t := &table{}
	t.add(nil, "NODE GROUP", "HEALTH", "TARGET", "MIN", "MAX", "SCALE-UP", "SCALE-DOWN", "OURS: TARGET", "MIN", "MAX")
	for _, g := range s.NodeGroups {
		name := cli.GroupName(g.ID, r.Namespace)
		if g.ID == "" {
			name = "(unnamed)"
		}
		scaleDown := g.ScaleDown
		if g.Candidates != nil {
			scaleDown += fmt.Sprintf(" (%d)", *g.Candidates)
		}
		row := []string{name, g.Health, optionalInt(g.Target), optionalInt(g.MinSize), optionalInt(g.MaxSize), g.ScaleUp, scaleDown, "-", "-", "-"}
		if i := slices.IndexFunc(r.OurNodeGroups, func(ours autoscalingv1alpha1.NodeGroupStatus) bool { return ours.ID == g.ID }); i >= 0 {
			ours := r.OurNodeGroups[i]
			row[7], row[8], row[9] = fmt.Sprint(ours.TargetSize), optionalInt(ours.MinSize), optionalInt(ours.MaxSize)
		}
		paint := func(s string) string { return s }
		if g.Health != "" && g.Health != "Healthy" {
			paint = p.Yellow
		}
		t.add(paint, row...)
	}
	t.write(w, "  ")
}

// countsText counts the results, and those that differ when they can.
func countsText(c Counts, canDiffer bool) string {
	if c == (Counts{}) {
		return "none"
	}
	text := fmt.Sprintf("%d agree, %d only theirs, %d only ours", c.Agree, c.OnlyTheirs, c.OnlyOurs)
	if canDiffer {
		text = fmt.Sprintf("%d agree, %d differ, %d only theirs, %d only ours", c.Agree, c.Differ, c.OnlyTheirs, c.OnlyOurs)
	}
	if c.OnlyOursEventsMayHaveExpired > 0 {
		text += fmt.Sprintf(" (%d*)", c.OnlyOursEventsMayHaveExpired)
	}
	return text
}

func resultText(r Result, difference string, expired bool) string {
	text := map[Result]string{Agree: "agree", Differ: "differ", OnlyTheirs: "only theirs", OnlyOurs: "only ours"}[r]
	if difference != "" {
		text += ": " + difference
	}
	if expired {
		text += "*"
	}
	return text
}

func resultPaint(r Result, p cli.Palette) func(string) string {
	switch r {
	case Agree:
		return p.Green
	case Differ:
		return p.Red
	}
	return p.Yellow
}

// groupChanges is e.g. "MachineDeployment md-0 +2, MachineDeployment md-1 +1".
func groupChanges(groups []GroupChange, namespace string) string {
	if len(groups) == 0 {
		return "-"
	}
	texts := make([]string, 0, len(groups))
	for _, g := range groups {
		texts = append(texts, fmt.Sprintf("%s %+d", cli.GroupName(g.ID, namespace), g.Delta))
	}
	return strings.Join(texts, ", ")
}

func sideTime(side *ScaleUpSide, now time.Time) string {
	if side == nil {
		return "-"
	}
	return cli.Clock(side.Time.Time, now)
}

func sideCount(side *ScaleUpSide) string {
	if side == nil {
		return "-"
	}
	return fmt.Sprint(side.PodCount)
}

func sideLatency(side *ScaleUpSide) string {
	switch {
	case side == nil:
		return "-"
	case side.Latency == nil:
		return "?"
	}
	return cli.ShortDuration(side.Latency.Duration)
}

func orDash(n int32, known bool) string {
	if !known {
		return "-"
	}
	return fmt.Sprint(n)
}

func optionalClock(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return cli.Clock(t.Time, now)
}

func optionalInt(n *int32) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprint(*n)
}

// boundsDifferences say which node groups have other min or max sizes in
// the other autoscaler's status than in ours: both read them from the same
// annotations.
func boundsDifferences(theirs *TheirStatus, ours []autoscalingv1alpha1.NodeGroupStatus, namespace string) []string {
	if theirs == nil {
		return nil
	}
	var notes []string
	for _, their := range theirs.NodeGroups {
		i := slices.IndexFunc(ours, func(g autoscalingv1alpha1.NodeGroupStatus) bool { return g.ID == their.ID })
		if i < 0 {
			continue
		}
		our := ours[i]
		if !sameBound(their.MinSize, our.MinSize) || !sameBound(their.MaxSize, our.MaxSize) {
			notes = append(notes, fmt.Sprintf("%s has min %s and max %s for the other autoscaler, min %s and max %s for this one: do both read the same annotations?",
				cli.GroupName(their.ID, namespace), optionalInt(their.MinSize), optionalInt(their.MaxSize), optionalInt(our.MinSize), optionalInt(our.MaxSize)))
		}
	}
	return notes
}

// sameBound says whether two bounds agree; an unknown one agrees with any.
func sameBound(a, b *int32) bool {
	return a == nil || b == nil || *a == *b
}

// table writes rows in columns two spaces apart. A row's paint colours its
// first cell once padded, so that colours do not upset the alignment.
type table struct {
	rows   [][]string
	paints []func(string) string
	// spans are the rows that are a line starting at a column, by row:
	// they count for no column's width.
	spans map[int]int
}

func (t *table) add(paint func(string) string, cells ...string) {
	t.rows = append(t.rows, cells)
	t.paints = append(t.paints, paint)
}

// span adds a line that starts at column.
func (t *table) span(column int, text string) {
	if t.spans == nil {
		t.spans = map[int]int{}
	}
	t.spans[len(t.rows)] = column
	t.add(nil, text)
}

func (t *table) write(w io.Writer, indent string) {
	var widths []int
	for r, row := range t.rows {
		if _, spans := t.spans[r]; spans {
			continue
		}
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(visible(cell))))
		}
	}
	for r, row := range t.rows {
		if column, spans := t.spans[r]; spans {
			offset := 0
			for _, width := range widths[:min(column, len(widths))] {
				offset += width + 2
			}
			fmt.Fprintln(w, indent+strings.Repeat(" ", offset)+row[0])
			continue
		}
		var line strings.Builder
		line.WriteString(indent)
		for i, cell := range row {
			padded := cell
			if i < len(row)-1 {
				padded += strings.Repeat(" ", widths[i]-len([]rune(visible(cell)))+2)
			}
			if i == 0 && t.paints[r] != nil {
				padded = t.paints[r](cell) + padded[len(cell):]
			}
			line.WriteString(padded)
		}
		fmt.Fprintln(w, strings.TrimRight(line.String(), " "))
	}
}

// visible is text without its ANSI colour codes.
func visible(text string) string {
	var b strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] == '\x1b' {
			for i < len(text) && text[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(text[i])
	}
	return b.String()
}
