package view

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// Values of status -o.
// NewStatusCommand returns the status command.
func NewStatusCommand(o *cli.Options) *cobra.Command {
	var output string
	var watch bool
	cmd := &cobra.Command{
		Use:   "status [CLUSTER]",
		Short: "Show the autoscaled Clusters, their node groups, what is pending and the last decisions",
		Long: `Show each autoscaled Cluster of the namespace (-A: of every namespace), or the
Cluster named namespace/name or name: the conditions of its ClusterAutoscaler,
its node groups, the pods that wait and why no scale-up helps them, and the
last scale-ups, scale-downs and events. --watch shows it live, as top does.`,
		Example: `  kubectl capi-autoscaler status -A
  kubectl capi-autoscaler status clusters/prod -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if watch {
				if output != cli.OutputText {
					return fmt.Errorf("--watch shows the live view, which has no -o")
				}
				return runTop(cmd, o, args)
			}
			if err := cli.CheckOutput(output); err != nil {
				return err
			}
			scope, c, err := o.ScopedClient(cmd, args)
			if err != nil {
				return err
			}
			view, err := Observe(cmd.Context(), c, scope)
			if err != nil {
				return err
			}
			if scope.Cluster != "" && len(view.Clusters) == 0 {
				return fmt.Errorf("no ClusterAutoscaler %s", scope)
			}
			return printStatus(o.TerminalStreams(), output, view, o.Palette(), o.Now(), scope)
		},
	}
	cli.AddOutputFlag(cmd, &output, "Print the view as json or yaml")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "Show the live view, as top does")
	return cmd
}

func printStatus(streams cli.Streams, output string, view *StatusView, p cli.Palette, now time.Time, scope cli.Scope) error {
	switch output {
	case cli.OutputJSON:
		data, err := json.MarshalIndent(view, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(streams.Out, "%s\n", data)
		return err
	case cli.OutputYAML:
		data, err := yaml.Marshal(view)
		if err != nil {
			return err
		}
		_, err = streams.Out.Write(data)
		return err
	}
	if len(view.Clusters) == 0 {
		fmt.Fprintf(streams.ErrOut, "No ClusterAutoscaler %s.\n", scope)
		return nil
	}
	for i := range view.Clusters {
		if i > 0 {
			fmt.Fprintln(streams.Out)
		}
		statusTree(&view.Clusters[i], p, now).Write(streams.Out)
	}
	return nil
}

// statusTree is the status of one Cluster: conditions, node groups, what
// is pending, the last decisions.
func statusTree(c *ClusterView, p cli.Palette, now time.Time) *cli.Tree {
	root := &cli.Tree{Text: p.Bold(fmt.Sprintf("Cluster %s/%s", c.Namespace, c.Cluster)) + p.Dim(" · ClusterAutoscaler "+c.ClusterAutoscaler)}
	if c.Mode == string(autoscalingv1alpha1.DryRunMode) {
		root.Text += " · " + p.Yellow("DryRun: plans, changes nothing")
	}

	briefs := make([]string, 0, len(c.Conditions))
	for _, condition := range c.Conditions {
		briefs = append(briefs, paintCondition(p, condition))
	}
	conditions := root.Add("%s", strings.Join(briefs, "  "))
	for _, condition := range c.Conditions {
		if failing(condition) {
			conditions.Add("%s", conditionDetail(condition, p))
		}
	}
	for _, problem := range c.Problems {
		root.Add("%s", p.Yellow("cannot show everything: "+problem))
	}
	root.Add("%s, %d ready · last loop %s", cli.Plural(c.Nodes, "node"), c.ReadyNodes, cli.TimeAndAge(c.LastLoopTime, now))

	groups := root.Add("Node groups")
	if len(c.NodeGroups) == 0 {
		groups.Add("none: annotate MachineDeployments, MachineSets or MachinePools of the Cluster with cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size")
	}
	width := 0
	for _, g := range c.NodeGroups {
		width = max(width, len(cli.GroupName(g.ID, c.Namespace)))
	}
	for _, g := range c.NodeGroups {
		name := cli.GroupName(g.ID, c.Namespace)
		row := groups.Add("%s%s  %s", p.Bold(name), strings.Repeat(" ", width-len(name)), groupSizes(&g))
		if g.BackoffUntil != nil {
			row.Add("%s", p.Yellow(fmt.Sprintf("backing off until %s: %s", cli.TimeAndAge(g.BackoffUntil, now), orNone(g.BackoffReason))))
		}
		if g.Problem != "" {
			row.Add("%s", p.Red("problem: "+g.Problem))
		}
		if minimum := g.ScheduledMinimum; minimum != nil {
			row.Add("%s", scheduledMinimumLine(minimum, now))
		}
		if removing, unneeded := scaleDownCounts(g.Nodes); removing+unneeded > 0 {
			row.Add("%d being removed, %d unneeded (explain node NAME says why)", removing, unneeded)
		}
	}

	pending := root.Add("Pending")
	if c.Pending.UnschedulablePods == 0 && len(c.Pending.NotTriggerScaleUpReasons) == 0 {
		pending.Add("no unschedulable pods")
	} else {
		pending.Add("%s", cli.Plural(c.Pending.UnschedulablePods, "unschedulable pod"))
	}
	if c.Pending.PodsLeftForNextLoop > 0 {
		pending.Add("%s", p.Yellow(fmt.Sprintf("%s left for the next loop (spec.maxPendingPodsPerLoop)", cli.Plural(c.Pending.PodsLeftForNextLoop, "pod"))))
	}
	for _, reason := range c.Pending.NotTriggerScaleUpReasons {
		pending.Add("%s", p.Yellow(fmt.Sprintf("%s triggered no scale-up: %s", cli.Plural(reason.Pods, "pod"), reason.Reason)))
	}
	for _, buffer := range c.Pending.CapacityBuffers {
		text := fmt.Sprintf("CapacityBuffer %s: room for %d of %d pods held, %d upcoming, %d unplaceable",
			buffer.Name, buffer.Held, buffer.Replicas, buffer.Upcoming, buffer.Unplaceable)
		if buffer.Message != "" {
			text += ": " + buffer.Message
		}
		pending.Add("%s", text)
	}

	decisions := root.Add("Last decisions")
	decisions.Add("scale-up %s · scale-down %s", cli.TimeAndAge(c.LastScaleUpTime, now), cli.TimeAndAge(c.LastScaleDownTime, now))
	for _, e := range c.RecentEvents {
		decisions.Add("%s", eventLine(e, p, now))
	}
	if len(c.DryRunDecisions) > 0 {
		would := root.Add("Would have decided (DryRun, newest first)")
		for i := len(c.DryRunDecisions) - 1; i >= max(0, len(c.DryRunDecisions)-maxDryRunDecisionsShown); i-- {
			would.Add("%s", dryRunDecisionLine(&c.DryRunDecisions[i], c.Namespace, now))
		}
	}
	return root
}

// maxDryRunDecisionsShown is how many DryRun decisions status shows.
const maxDryRunDecisionsShown = 5

// dryRunDecisionLine is one decision a DryRun ClusterAutoscaler did not
// carry out.
func dryRunDecisionLine(d *DryRunDecisionView, namespace string, now time.Time) string {
	groups := make([]string, 0, len(d.NodeGroups))
	for _, g := range d.NodeGroups {
		groups = append(groups, fmt.Sprintf("%s %+d", cli.GroupName(g.ID, namespace), g.Delta))
	}
	line := fmt.Sprintf("%s  %s %s", cli.TimeAndAge(d.Time, now), d.Kind, strings.Join(groups, ", "))
	switch {
	case d.Answer != nil:
		line += fmt.Sprintf("ProvisioningRequest %s: %s=%s (%s)", d.ProvisioningRequest, d.Answer.ConditionType, d.Answer.Status, d.Answer.Reason)
	case d.Kind == string(autoscalingv1alpha1.ScaleUpDecision) && d.ProvisioningRequest != "":
		line += " for ProvisioningRequest " + d.ProvisioningRequest
	case d.Kind == string(autoscalingv1alpha1.ScaleUpDecision):
		line += " for " + cli.Plural(d.Pods, "pending pod")
	case len(d.Nodes) > 0:
		line += ": " + strings.Join(d.Nodes, ", ")
	}
	return line
}

// conditionDetail is a failing condition with its reason and message.
func conditionDetail(c ConditionView, p cli.Palette) string {
	if c.Status == metav1.ConditionUnknown && c.Reason == "" {
		return p.Yellow(c.Type + ": not reported yet")
	}
	text := c.Type + ": " + orNone(c.Reason)
	if c.Message != "" {
		text += ": " + c.Message
	}
	if c.Status == metav1.ConditionUnknown {
		return p.Yellow(text)
	}
	return p.Red(text)
}

// groupSizes is the sizes of a group in one line.
func groupSizes(g *NodeGroupView) string {
	bound := func(size *int32) string {
		if size == nil {
			return "-"
		}
		return fmt.Sprint(*size)
	}
	sizes := fmt.Sprintf("min %s  target %d  ready %d  upcoming %d  max %s", bound(g.MinSize), g.TargetSize, g.Ready, g.Upcoming, bound(g.MaxSize))
	if g.Price == "" {
		return sizes
	}
	return fmt.Sprintf("%s  %s/h (%s)", sizes, g.Price, priceSources[autoscalingv1alpha1.PriceSource(g.PriceSource)])
}

// priceSources say where a group's price comes from, for users, in few
// words: the live view cuts lines at the terminal's width.
var priceSources = map[autoscalingv1alpha1.PriceSource]string{
	autoscalingv1alpha1.NodeGroupPriceSource:    "annotation",
	autoscalingv1alpha1.InstanceTypePriceSource: "instance type",
	autoscalingv1alpha1.DefaultPriceSource:      "default",
}

// scaleDownCounts counts the nodes being removed, and those kept while
// their unneeded time runs.
func scaleDownCounts(nodes []NodeView) (removing, unneeded int) {
	for _, n := range nodes {
		switch {
		case n.ScaleDown == string(autoscalingv1alpha1.NodeRemoving):
			removing++
		case n.UnneededSince != nil:
			unneeded++
		}
	}
	return removing, unneeded
}

// eventLine is one event: when, what, on what, and how often.
func eventLine(e EventView, p cli.Palette, now time.Time) string {
	text := fmt.Sprintf("%s  %s %s: %s", cli.Clock(e.Time.Time, now), e.Object, e.Reason, e.Message)
	if e.Count > 1 {
		text += fmt.Sprintf(" (×%d)", e.Count)
	}
	if e.Type == "Warning" {
		return p.Yellow(text)
	}
	return text
}

// orNone is s, or says that there is none.
func orNone(s string) string {
	if s == "" {
		return "(no reason given)"
	}
	return s
}

// scheduledMinimumLine says which scheduled minimums set a group's minimum
// now, and which comes next.
func scheduledMinimumLine(m *ScheduledMinimumView, now time.Time) string {
	var parts []string
	for _, w := range m.Active {
		parts = append(parts, fmt.Sprintf("%s sets min %d, its window open until %s", w.Name, w.MinSize, cli.Clock(w.Closes.Time, now)))
	}
	if len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("annotated min %d", m.AnnotatedMinSize))
	}
	if w := m.Next; w != nil {
		parts = append(parts, fmt.Sprintf("next: %s, min %d, its window open from %s to %s", w.Name, w.MinSize, cli.Clock(w.Opens.Time, now), cli.Clock(w.Closes.Time, now)))
	}
	return "scheduled minimum: " + strings.Join(parts, "; ")
}
