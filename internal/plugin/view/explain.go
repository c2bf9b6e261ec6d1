package view

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// NewExplainCommand returns the explain command.
func NewExplainCommand(o *cli.Options) *cobra.Command {
	var cluster string
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Explain why a pod did or did not trigger a scale-up, or why a node is or is not being removed",
		Long: `Explain a pod or a node of a workload cluster from the explanation of the last
loop, which the manager publishes in the ConfigMap <ClusterAutoscaler>-explanation.
Without --cluster, the ClusterAutoscalers of every namespace are searched (of -n
only, when it is given).`,
		Example: `  kubectl capi-autoscaler explain pod shop/web-7d9f-x2x4z --cluster clusters/prod
  kubectl capi-autoscaler explain node prod-md-0-x7k2p-9wz4q`,
	}
	cmd.PersistentFlags().StringVar(&cluster, "cluster", "", "The Cluster of the pod or node, as namespace/name, or name in the namespace of -n")
	cmd.AddCommand(
		&cobra.Command{
			Use:     "pod NAMESPACE/NAME",
			Short:   "Explain why a pending pod did or did not trigger a scale-up",
			Example: "  kubectl capi-autoscaler explain pod shop/web-7d9f-x2x4z --cluster clusters/prod",
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				namespace, name, ok := strings.Cut(args[0], "/")
				if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
					return fmt.Errorf("a pod is NAMESPACE/NAME of the workload cluster, not %q", args[0])
				}
				published, err := explanations(cmd, o, cluster)
				if err != nil {
					return err
				}
				return explainPod(o.Out(), args[0], published, o.Palette(), o.Now())
			},
		},
		&cobra.Command{
			Use:     "node NAME",
			Short:   "Explain why a node is or is not being removed",
			Example: "  kubectl capi-autoscaler explain node prod-md-0-x7k2p-9wz4q",
			Args:    cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				published, err := explanations(cmd, o, cluster)
				if err != nil {
					return err
				}
				return explainNode(o.Out(), args[0], published, o.Palette(), o.Now())
			},
		},
	)
	return cmd
}

// published is the explanation of one ClusterAutoscaler, or why it has none.
type published struct {
	source      source
	explanation *autoscalingv1alpha1.Explanation
	missing     string
}

// source says where an explanation comes from.
type source struct {
	namespace, cluster, clusterAutoscaler string
}

func (s source) String() string {
	return fmt.Sprintf("Cluster %s/%s (ClusterAutoscaler %s)", s.namespace, s.cluster, s.clusterAutoscaler)
}

// explanations reads the explanations of the ClusterAutoscalers of
// --cluster, else of -n, else of every namespace.
func explanations(cmd *cobra.Command, o *cli.Options, cluster string) ([]published, error) {
	namespace, explicit, err := o.Namespace(cmd)
	if err != nil {
		return nil, err
	}
	if o.AllNamespaces || (!explicit && cluster == "") {
		namespace = ""
	}
	scope := cli.Scope{Namespace: namespace}
	if cluster != "" {
		if scope, err = cli.ClusterScope(cluster, namespace); err != nil {
			return nil, err
		}
	}
	c, err := o.Client()
	if err != nil {
		return nil, err
	}
	return readExplanations(cmd.Context(), c, scope)
}

func readExplanations(ctx context.Context, c client.Reader, scope cli.Scope) ([]published, error) {
	autoscalers, err := listClusterAutoscalers(ctx, c, scope)
	if scope.Namespace == "" && apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("%w; name the namespace with -n, or the Cluster with --cluster", err)
	}
	if err != nil {
		return nil, err
	}
	if len(autoscalers) == 0 {
		return nil, fmt.Errorf("no ClusterAutoscaler %s", scope)
	}
	var all []published
	for i := range autoscalers {
		ca := &autoscalers[i]
		p := published{source: source{namespace: ca.Namespace, cluster: ca.Spec.ClusterName, clusterAutoscaler: ca.Name}}
		switch p.explanation, err = readExplanation(ctx, c, ca); {
		case isReadProblem(err):
			p.missing = err.Error()
		case err != nil:
			return nil, err
		case p.explanation == nil:
			p.missing = fmt.Sprintf("no explanation published yet (ConfigMap %s)", autoscalingv1alpha1.ExplanationConfigMapName(ca.Name))
		}
		all = append(all, p)
	}
	return all, nil
}

// explainPod explains the pod in every explanation that has it, and fails
// with where it looked when none has.
func explainPod(w io.Writer, pod string, all []published, p cli.Palette, now time.Time) error {
	found := 0
	var searched []string
	for _, pub := range all {
		if pub.explanation == nil {
			searched = append(searched, fmt.Sprintf("%s: %s", pub.source, pub.missing))
			continue
		}
		group := findPendingPod(pub.explanation, pod)
		if group == nil {
			line := fmt.Sprintf("%s: not pending in the loop at %s", pub.source, cli.TimeAndAge(&pub.explanation.LoopTime, now))
			if omitted := pub.explanation.OmittedPods; omitted > 0 {
				line += fmt.Sprintf(", or one of the %s the explanation omits", cli.Plural(omitted, "pod"))
			}
			searched = append(searched, line)
			continue
		}
		if found > 0 {
			fmt.Fprintln(w)
		}
		found++
		writePodExplanation(w, pod, pub.source, pub.explanation, group, p, now)
	}
	if found == 0 {
		namespace, name, _ := strings.Cut(pod, "/")
		return fmt.Errorf("pod %s is in no explanation:\n  %s\n`kubectl describe pod -n %s %s` in the workload cluster says what became of it",
			pod, strings.Join(searched, "\n  "), namespace, name)
	}
	return nil
}

// findPendingPod is the group of pending pods that lists pod.
func findPendingPod(explanation *autoscalingv1alpha1.Explanation, pod string) *autoscalingv1alpha1.PendingPodsExplanation {
	for i := range explanation.PendingPods {
		for _, name := range explanation.PendingPods[i].Pods {
			if name == pod {
				return &explanation.PendingPods[i]
			}
		}
	}
	return nil
}

// writePodExplanation says what the loop did for a pending pod.
func writePodExplanation(w io.Writer, pod string, src source, explanation *autoscalingv1alpha1.Explanation, group *autoscalingv1alpha1.PendingPodsExplanation, p cli.Palette, now time.Time) {
	switch group.Outcome {
	case autoscalingv1alpha1.PendingPodsTriggeredScaleUp:
		triggered := "triggered a scale-up"
		if explanation.DryRun {
			triggered = "would trigger a scale-up (DryRun mode)"
		}
		fmt.Fprintf(w, "Pod %s %s of %s.\n", pod, p.Green(triggered), cli.GroupName(group.NodeGroup, src.namespace))
	case autoscalingv1alpha1.PendingPodsWaitForNode:
		where := "of no node group"
		if group.NodeGroup != "" {
			where = "of " + cli.GroupName(group.NodeGroup, src.namespace)
		}
		fmt.Fprintf(w, "Pod %s %s: it fits on node %s %s, which exists or is on its way.\n", pod, p.Cyan("waits for a node"), group.Node, where)
	case autoscalingv1alpha1.PendingPodsNotTriggerScaleUp:
		fmt.Fprintf(w, "Pod %s %s: no node group can help it.\n", pod, p.Yellow("triggered no scale-up"))
	default:
		fmt.Fprintf(w, "Pod %s: %s.\n", pod, group.Outcome)
	}
	writeField(w, "cluster", fmt.Sprintf("%s, loop at %s", src, cli.TimeAndAge(&explanation.LoopTime, now)))
	if len(group.NodeGroupReasons) > 0 {
		writeField(w, "node groups", "")
		for _, reasons := range group.NodeGroupReasons {
			fmt.Fprintf(w, "    %s: %s\n", cli.GroupName(reasons.NodeGroup, src.namespace), strings.Join(reasons.Reasons, "; "))
		}
	}
	if group.Count > 1 {
		others := make([]string, 0, len(group.Pods))
		for _, name := range group.Pods {
			if name != pod {
				others = append(others, name)
			}
		}
		text := fmt.Sprintf("%s: %s", cli.Plural(group.Count-1, "other"), strings.Join(others, ", "))
		if unlisted := int(group.Count) - 1 - len(others); unlisted > 0 {
			text += fmt.Sprintf(" and %d more", unlisted)
		}
		writeField(w, "same outcome", text)
	}
	if group.Outcome == autoscalingv1alpha1.PendingPodsWaitForNode {
		writeField(w, "what to do", "Nothing: the scheduler binds it there once the node is ready. If it stays pending, `kubectl describe pod` in the workload cluster says why.")
	}
}

// explainNode explains the node in every explanation that has it, and
// fails with where it looked when none has.
func explainNode(w io.Writer, node string, all []published, p cli.Palette, now time.Time) error {
	found := 0
	var searched []string
	for _, pub := range all {
		if pub.explanation == nil {
			searched = append(searched, fmt.Sprintf("%s: %s", pub.source, pub.missing))
			continue
		}
		var explained *autoscalingv1alpha1.NodeExplanation
		for i := range pub.explanation.Nodes {
			if pub.explanation.Nodes[i].Name == node {
				explained = &pub.explanation.Nodes[i]
			}
		}
		if explained == nil {
			line := fmt.Sprintf("%s: no such node in the loop at %s", pub.source, cli.TimeAndAge(&pub.explanation.LoopTime, now))
			if omitted := pub.explanation.OmittedNodes; omitted > 0 {
				line += fmt.Sprintf(", or one of the %s the explanation omits (above the utilization threshold)", cli.Plural(omitted, "node"))
			}
			searched = append(searched, line)
			continue
		}
		if found > 0 {
			fmt.Fprintln(w)
		}
		found++
		writeNodeExplanation(w, pub.source, pub.explanation, explained, p, now)
	}
	if found == 0 {
		return fmt.Errorf("node %s is in no explanation:\n  %s", node, strings.Join(searched, "\n  "))
	}
	return nil
}

// writeNodeExplanation says where a node stands with scale-down, and what
// the user can do about it.
func writeNodeExplanation(w io.Writer, src source, explanation *autoscalingv1alpha1.Explanation, node *autoscalingv1alpha1.NodeExplanation, p cli.Palette, now time.Time) {
	var hint string
	switch node.ScaleDown {
	case autoscalingv1alpha1.NodeRemoving:
		fmt.Fprintf(w, "Node %s %s.\n", node.Name, p.Red("is being removed"))
		hint = "Nothing: its pods are evicted and its Machine deleted; the Machine in the management cluster shows how far that is."
	case autoscalingv1alpha1.NodeKept:
		fmt.Fprintf(w, "Node %s %s: %s.\n", node.Name, p.Green("is kept"), p.Bold(orNone(node.Reason)))
		hint = keptHints[scaledown.Reason(node.Reason)]
	default:
		fmt.Fprintf(w, "Node %s: %s.\n", node.Name, node.ScaleDown)
	}
	writeField(w, "cluster", fmt.Sprintf("%s, loop at %s", src, cli.TimeAndAge(&explanation.LoopTime, now)))
	if node.NodeGroup != "" {
		writeField(w, "node group", cli.GroupName(node.NodeGroup, src.namespace))
	}
	if node.UtilizationPercent != nil {
		writeField(w, "utilization", fmt.Sprintf("%d%%", *node.UtilizationPercent))
	}
	if node.Message != "" {
		writeField(w, "why", node.Message)
	}
	if node.UnneededSince != nil {
		writeField(w, "unneeded since", cli.TimeAndAge(node.UnneededSince, now))
	}
	if hint != "" {
		writeField(w, "what to do", hint)
	}
}

// writeField writes an indented, labelled line of an explanation.
func writeField(w io.Writer, label, text string) {
	fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("  %-15s %s", label+":", text), " "))
}
