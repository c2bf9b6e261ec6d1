package view

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// Bounds of the utilization bars of the live view, in columns.
const (
	minBarWidth = 10
	maxBarWidth = 40
	// maxNodeNameWidth keeps long node names from squeezing the bars.
	maxNodeNameWidth = 40
	// liveEvents is how many of the latest events the live view shows per
	// Cluster.
	liveEvents = 3
)

// LiveFrame is the live view of the Clusters, in lines no wider than width
// (escape codes aside): for each Cluster its conditions, then each node
// group with its sizes and a bar per node of how full it is, as scale-down
// measures it, then what is pending.
func LiveFrame(view *StatusView, width int, color bool, now time.Time) []string {
	p := cli.Palette{Enabled: color}
	var lines []string
	for i := range view.Clusters {
		if i > 0 {
			lines = append(lines, "")
		}
		lines = append(lines, clusterFrame(&view.Clusters[i], width, p, now)...)
	}
	for i, line := range lines {
		lines[i] = truncate(line, width)
	}
	return lines
}

func clusterFrame(c *ClusterView, width int, p cli.Palette, now time.Time) []string {
	briefs := make([]string, 0, len(c.Conditions))
	for _, condition := range c.Conditions {
		briefs = append(briefs, paintCondition(p, condition))
	}
	title := p.Bold(c.Namespace + "/" + c.Cluster)
	if c.ClusterAutoscaler != c.Cluster {
		title += p.Dim(" (ClusterAutoscaler " + c.ClusterAutoscaler + ")")
	}
	lines := []string{title + "   " + strings.Join(briefs, "  ")}
	for _, condition := range c.Conditions {
		if failing(condition) {
			lines = append(lines, "  "+conditionDetail(condition, p))
		}
	}
	for _, problem := range c.Problems {
		lines = append(lines, "  "+p.Yellow(problem))
	}
	summary := fmt.Sprintf("  %s, %d ready · %s · scale-up %s · scale-down %s", cli.Plural(c.Nodes, "node"), c.ReadyNodes,
		cli.Plural(c.Pending.UnschedulablePods, "unschedulable pod"), clockOrNever(c.LastScaleUpTime, now), clockOrNever(c.LastScaleDownTime, now))
	if loop := c.Explanation.LoopTime; loop != nil {
		summary += " · loop " + cli.Clock(loop.Time, now)
	}
	lines = append(lines, summary)

	if c.Explanation.LoopTime == nil && len(c.NodeGroups) > 0 {
		lines = append(lines, "  "+p.Dim("nodes show once the manager publishes the explanation of a loop"))
	}

	nameWidth, groupWidth := 0, 0
	for _, g := range c.NodeGroups {
		groupWidth = max(groupWidth, utf8.RuneCountInString(cli.GroupName(g.ID, c.Namespace)))
		for _, n := range g.Nodes {
			nameWidth = max(nameWidth, min(utf8.RuneCountInString(n.Name), maxNodeNameWidth))
		}
	}
	// Room for the indent, the name, the percentage and a short note.
	barWidth := min(max(width-4-nameWidth-2-6-24, minBarWidth), maxBarWidth)
	for i := range c.NodeGroups {
		lines = append(lines, groupFrame(&c.NodeGroups[i], c, groupWidth, nameWidth, barWidth, p, now)...)
	}
	if n := len(c.OtherNodes); n > 0 {
		lines = append(lines, p.Dim(fmt.Sprintf("  %s of no node group", cli.Plural(int32(n), "node"))))
	}
	if c.Explanation.OmittedNodes > 0 {
		lines = append(lines, p.Dim(fmt.Sprintf("  %s above the utilization threshold not shown", cli.Plural(c.Explanation.OmittedNodes, "node"))))
	}
	for _, reason := range c.Pending.NotTriggerScaleUpReasons {
		lines = append(lines, "  "+p.Yellow(fmt.Sprintf("%s triggered no scale-up: %s", cli.Plural(reason.Pods, "pod"), reason.Reason)))
	}
	for _, e := range c.RecentEvents[:min(len(c.RecentEvents), liveEvents)] {
		lines = append(lines, "  "+p.Dim(eventLine(e, cli.Palette{}, now)))
	}
	return lines
}

func groupFrame(g *NodeGroupView, c *ClusterView, groupWidth, nameWidth, barWidth int, p cli.Palette, now time.Time) []string {
	name := cli.GroupName(g.ID, c.Namespace)
	lines := []string{"  " + p.Bold(name) + strings.Repeat(" ", groupWidth-utf8.RuneCountInString(name)) + "  " + groupSizes(g)}
	if g.BackoffUntil != nil {
		lines = append(lines, "    "+p.Yellow(fmt.Sprintf("backing off until %s: %s", cli.Clock(g.BackoffUntil.Time, now), orNone(g.BackoffReason))))
	}
	if g.Problem != "" {
		lines = append(lines, "    "+p.Red("problem: "+g.Problem))
	}
	for _, n := range g.Nodes {
		lines = append(lines, "    "+nodeBar(n, nameWidth, barWidth, p, now))
	}
	if g.Upcoming > 0 {
		lines = append(lines, "    "+p.Cyan(fmt.Sprintf("+ %d upcoming", g.Upcoming)))
	}
	if len(g.Nodes) == 0 && g.Upcoming == 0 && c.Explanation.LoopTime != nil {
		lines = append(lines, "    "+p.Dim("no nodes"))
	}
	return lines
}

// nodeBar is a node's name, a bar of its utilization and where it stands
// with scale-down.
func nodeBar(n NodeView, nameWidth, barWidth int, p cli.Palette, now time.Time) string {
	name := n.Name
	if utf8.RuneCountInString(name) > nameWidth {
		name = string([]rune(name)[:nameWidth-1]) + "…"
	}
	name += strings.Repeat(" ", nameWidth-utf8.RuneCountInString(name))

	bar, percent := strings.Repeat("·", barWidth), "   -"
	if u := n.UtilizationPercent; u != nil {
		filled := min(max(int(*u), 0)*barWidth/100, barWidth)
		bar = strings.Repeat("█", filled) + p.Dim(strings.Repeat("░", barWidth-filled))
		percent = fmt.Sprintf("%3d%%", *u)
	}
	var note string
	switch {
	case n.ScaleDown == string(autoscalingv1alpha1.NodeRemoving):
		bar, note = p.Red(bar), p.Red("being removed")
	case n.UnneededSince != nil:
		bar, note = p.Yellow(bar), p.Yellow("unneeded since "+cli.Clock(n.UnneededSince.Time, now))
	default:
		bar, note = p.Green(bar), p.Dim(n.Reason)
	}
	return strings.TrimRight(fmt.Sprintf("%s  %s %s  %s", name, bar, percent, note), " ")
}

// clockOrNever is the time of day of t, or never.
func clockOrNever(t *metav1.Time, now time.Time) string {
	if t == nil {
		return "never"
	}
	return cli.Clock(t.Time, now)
}

// truncate cuts line to width columns, counting runes but not the ANSI
// escape sequences that colour them, and ends any colour it cuts.
func truncate(line string, width int) string {
	columns, colored := 0, false
	for i := 0; i < len(line); {
		if line[i] == '\x1b' {
			end := strings.IndexByte(line[i:], 'm')
			if end < 0 {
				return line
			}
			i += end + 1
			colored = true
			continue
		}
		if columns == width {
			if colored {
				return line[:i] + "\x1b[0m"
			}
			return line[:i]
		}
		_, size := utf8.DecodeRuneInString(line[i:])
		i += size
		columns++
	}
	return line
}
