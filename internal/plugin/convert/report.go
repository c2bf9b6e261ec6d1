package convert

import (
	"bytes"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// manifest is the ClusterAutoscaler convert prints: no status, and of the
// metadata only the name and namespace.
type manifest struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   manifestMeta `json:"metadata"`
	Spec       caSpec       `json:"spec"`
}

type manifestMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// marshalManifest writes ca as YAML.
func marshalManifest(ca *autoscalingv1alpha1.ClusterAutoscaler) ([]byte, error) {
	return yaml.Marshal(manifest{
		APIVersion: ca.APIVersion,
		Kind:       ca.Kind,
		Metadata:   manifestMeta{Name: ca.Name, Namespace: ca.Namespace},
		Spec:       ca.Spec,
	})
}

// writeReport writes what became of each flag, each line after prefix.
func writeReport(w io.Writer, result *converted, prefix string) error {
	var b bytes.Buffer
	r := result.report
	ca := &result.object
	fmt.Fprintf(&b, "Converted %s, upstream cluster-autoscaler %s, into ClusterAutoscaler %s (mode %s).\n",
		r.source, r.upstream, namespacedName(ca.Namespace, ca.Name), ca.Spec.Mode)
	section(&b, "Mapped", r.mapped, func(m mappedFlag) string {
		line := fmt.Sprintf("%s%s -> %s: %s", m.flag, chartDefaultMark(m.chartDefault), m.field, m.value)
		if m.note != "" {
			line += " (" + m.note + ")"
		}
		return line
	})
	section(&b, "Not mapped", r.unmapped, func(u unmappedFlag) string {
		return fmt.Sprintf("%s%s: %s", u.flag, chartDefaultMark(u.chartDefault), u.reason)
	})
	section(&b, "Upstream defaults that differ from ours, of flags not given (set the field to keep upstream's)", r.defaults, func(d differingDefault) string {
		line := fmt.Sprintf("--%s: upstream %s, ours %s (%s)", d.flag, d.upstream, d.ours, d.field)
		if d.note != "" {
			line += ": " + d.note
		}
		return line
	})
	section(&b, "Node group sizes: upstream's clusterapi provider reads them from annotations of the node groups, not from --nodes, "+
		"and so does capi-autoscaler; where the node groups lack them", r.nodeGroups, annotateCommand)
	section(&b, "Warnings", r.warnings, func(w string) string { return w })
	section(&b, "Next", nextSteps(ca), func(s string) string { return s })
	for _, line := range strings.SplitAfter(b.String(), "\n") {
		if line == "" {
			continue
		}
		if _, err := io.WriteString(w, strings.TrimRight(prefix+line, " \n")+"\n"); err != nil {
			return err
		}
	}
	return nil
}

// section writes a titled list, when it has items.
func section[T any](b *bytes.Buffer, title string, items []T, line func(T) string) {
	if len(items) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	for _, item := range items {
		fmt.Fprintf(b, "  %s\n", line(item))
	}
}

func chartDefaultMark(fromChart bool) string {
	if fromChart {
		return " (the chart's default)"
	}
	return ""
}

// annotateCommand sets a node group's sizes.
func annotateCommand(g nodeGroupBounds) string {
	namespace := ""
	if g.namespace != "" {
		namespace = " -n " + g.namespace
	}
	return fmt.Sprintf("kubectl annotate %s %s%s %s=%d %s=%d --overwrite", strings.ToLower(g.kind), g.name, namespace,
		scalable.MinSizeAnnotation, g.min, scalable.MaxSizeAnnotation, g.max)
}

// nextSteps say how to switch over from the upstream autoscaler.
func nextSteps(ca *autoscalingv1alpha1.ClusterAutoscaler) []string {
	apply := "kubectl apply -f <this ClusterAutoscaler>"
	if ca.Namespace == "" {
		apply += " -n <the namespace of Cluster " + ca.Spec.ClusterName + ">"
	}
	if ca.Spec.Mode == autoscalingv1alpha1.DryRunMode {
		return []string{
			apply + ": in DryRun mode it runs beside the upstream autoscaler and only says what it would do",
			"compare: kubectl capi-autoscaler status shows its would-be decisions (status.dryRunDecisions, WouldScaleUp and WouldScaleDown events)",
			"switch over: scale the upstream Deployment to 0, then set spec.mode: Active (docs/migrating.md)",
		}
	}
	return []string{
		apply + ": while the upstream autoscaler acts on the cluster, this one waits (ScalingActive False, reason OtherAutoscalerActive)",
		"switch over: scale the upstream Deployment to 0 (docs/migrating.md)",
	}
}
