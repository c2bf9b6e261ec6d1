package compare

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/internal/kubeconfig"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// differencesExitCode is the exit code of compare --fail-on-difference
// when the autoscalers differ; errors exit with 1.
const differencesExitCode = 2

// compareOptions are the flags of compare.
type compareOptions struct {
	workloadKubeconfig string
	since, tolerance   time.Duration
	statusConfigMap    string
	output             string
	failOnDifference   bool
}

// NewCommand returns the compare command.
func NewCommand(o *cli.Options) *cobra.Command {
	co := compareOptions{}
	cmd := &cobra.Command{
		Use:   "compare NAME",
		Short: "Compare a DryRun ClusterAutoscaler's decisions with what the cluster's other autoscaler did",
		Long: `Compare what the DryRun ClusterAutoscaler NAME would have done, from its
status.dryRunDecisions, with what the other autoscaler of its workload cluster
did: the upstream cluster-autoscaler (--cloud-provider=clusterapi), or an
Active capi-autoscaler. compare reads, in the workload cluster, the other
autoscaler's TriggeredScaleUp events on pods, its ScaleDown and ScaleDownEmpty
events on nodes and on its status ConfigMap, and that ConfigMap.

A scale-up of the other autoscaler is the burst of TriggeredScaleUp events of
one message. It is matched with a decision within --tolerance of it that was
for the same pods (else for the same node groups): they agree when they add
the same numbers of nodes to the same node groups, and differ otherwise. A
removal is matched with a decision to remove the same node. Latency is how
long after the creation of the oldest of its pods each side decided; the
other autoscaler's is unknown when none of its pods exists any more.

Only the decisions and events of the window (--since) are compared. The API
server keeps events for an hour after they last happened (kube-apiserver
--event-ttl, 1h by default): with a longer window, what the other autoscaler
did before then may be gone, and decisions of that time that it seems not to
have made are marked and not counted as differences.

The workload cluster is reached with --workload-kubeconfig, else with the
kubeconfig the manager uses: the Secret spec.workloadKubeconfigSecretRef names,
else the Cluster API kubeconfig Secret <cluster>-kubeconfig, in the
ClusterAutoscaler's namespace (which needs get on Secrets). A kubeconfig from a
Secret that runs a credential plugin (exec, auth-provider) is refused.

Exit status: 0 when compared, 1 on errors, and with --fail-on-difference 2
when they differ.`,
		Example: `  kubectl capi-autoscaler compare prod-dryrun -n clusters
  kubectl capi-autoscaler compare prod-dryrun -n clusters --since 45m --tolerance 1m --fail-on-difference
  kubectl capi-autoscaler compare prod-dryrun -n clusters --workload-kubeconfig prod.kubeconfig -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cli.CheckOutput(co.output); err != nil {
				return err
			}
			if co.since <= 0 || co.tolerance < 0 {
				return errors.New("--since must be positive and --tolerance not negative")
			}
			statusKey, err := parseObjectKey(co.statusConfigMap)
			if err != nil {
				return fmt.Errorf("--status-configmap: %w", err)
			}
			namespace, _, err := o.Namespace(cmd)
			if err != nil {
				return err
			}
			c, err := o.Client()
			if err != nil {
				return err
			}
			report, err := runCompare(cmd.Context(), compareRun{
				management: c, namespace: namespace, name: args[0], now: o.Now(),
				opts: co, statusConfigMap: statusKey,
				workload: func(ca *autoscalingv1alpha1.ClusterAutoscaler) (client.Reader, error) {
					return workloadClient(cmd.Context(), c, ca, co.workloadKubeconfig)
				},
			})
			if err != nil {
				return err
			}
			if err := printCompare(o.Out(), co.output, report, o.Palette(), o.Now()); err != nil {
				return err
			}
			if co.failOnDifference && report.Summary.Differences > 0 {
				return &cli.ExitError{Code: differencesExitCode, Message: fmt.Sprintf("the autoscalers differ: %s", cli.Plural(int32(report.Summary.Differences), "difference"))}
			}
			return nil
		},
	}
	flags := cmd.Flags()
	flags.StringVar(&co.workloadKubeconfig, "workload-kubeconfig", "", "The kubeconfig file of the workload cluster (default: the Cluster's <cluster>-kubeconfig Secret)")
	flags.DurationVar(&co.since, "since", time.Hour, "Compare the decisions and events of this last while")
	flags.DurationVar(&co.tolerance, "tolerance", 2*time.Minute, "How far apart in time two scale-ups for the same pods may be")
	flags.StringVar(&co.statusConfigMap, "status-configmap", autoscaler.UpstreamNamespace+"/"+autoscaler.UpstreamStatusConfigMap,
		"NAMESPACE/NAME of the other autoscaler's status ConfigMap in the workload cluster (its --namespace and --status-config-map-name)")
	flags.StringVarP(&co.output, "output", "o", cli.OutputText, "Print the comparison as json or yaml")
	flags.BoolVar(&co.failOnDifference, "fail-on-difference", false, "Exit with 2 when the autoscalers differ")
	return cmd
}

// parseObjectKey reads NAMESPACE/NAME.
func parseObjectKey(s string) (client.ObjectKey, error) {
	namespace, name, ok := strings.Cut(s, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return client.ObjectKey{}, fmt.Errorf("want NAMESPACE/NAME, not %q", s)
	}
	return client.ObjectKey{Namespace: namespace, Name: name}, nil
}

// CompareReport is what compare prints: the comparison, whose ClusterAutoscaler
// it is, what the other autoscaler's status says, and notes on what limits it.
type CompareReport struct {
	Namespace         string `json:"namespace"`
	Cluster           string `json:"cluster"`
	ClusterAutoscaler string `json:"clusterAutoscaler"`
	Mode              string `json:"mode"`
	// Decisions is how many decisions the ClusterAutoscaler's status holds.
	Decisions int `json:"decisions"`
	Comparison
	// TheirStatus is unset when the status ConfigMap cannot be read.
	TheirStatus *TheirStatus `json:"theirStatus,omitempty"`
	// OurNodeGroups are the node groups of the ClusterAutoscaler's status,
	// beside their rows of TheirStatus.
	OurNodeGroups []autoscalingv1alpha1.NodeGroupStatus `json:"-"`
	Notes         []string                              `json:"notes,omitempty"`
}

// compareRun is one run of compare.
type compareRun struct {
	management      client.Reader
	namespace, name string
	now             time.Time
	opts            compareOptions
	statusConfigMap client.ObjectKey
	// workload connects to the workload cluster of the ClusterAutoscaler.
	workload func(*autoscalingv1alpha1.ClusterAutoscaler) (client.Reader, error)
}

func runCompare(ctx context.Context, run compareRun) (*CompareReport, error) {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	if err := run.management.Get(ctx, client.ObjectKey{Namespace: run.namespace, Name: run.name}, ca); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no ClusterAutoscaler %s in namespace %s", run.name, run.namespace)
		}
		return nil, fmt.Errorf("reading ClusterAutoscaler %s/%s: %w", run.namespace, run.name, err)
	}
	decisions := ca.Status.DryRunDecisions
	report := &CompareReport{
		Namespace: ca.Namespace, Cluster: ca.Spec.ClusterName, ClusterAutoscaler: ca.Name,
		Mode: string(autoscalingv1alpha1.ActiveMode), Decisions: len(decisions), OurNodeGroups: ca.Status.NodeGroups,
	}
	if ca.Spec.Mode != "" {
		report.Mode = string(ca.Spec.Mode)
	}
	switch {
	case ca.Spec.Mode != autoscalingv1alpha1.DryRunMode && len(decisions) == 0:
		return nil, fmt.Errorf("ClusterAutoscaler %s/%s is %s, not %s: it records no decisions to compare; a ClusterAutoscaler with spec.mode %s beside the other autoscaler does",
			ca.Namespace, ca.Name, report.Mode, autoscalingv1alpha1.DryRunMode, autoscalingv1alpha1.DryRunMode)
	case ca.Spec.Mode != autoscalingv1alpha1.DryRunMode:
		report.Notes = append(report.Notes, fmt.Sprintf("ClusterAutoscaler %s is %s, not %s: it records no new decisions; comparing the %s it recorded before",
			ca.Name, report.Mode, autoscalingv1alpha1.DryRunMode, cli.Plural(int32(len(decisions)), "decision")))
	case len(decisions) == 0 && ca.Status.LastLoopTime == nil:
		report.Notes = append(report.Notes, fmt.Sprintf("ClusterAutoscaler %s has run no loop yet: `kubectl capi-autoscaler status %s -n %s` says why", ca.Name, ca.Spec.ClusterName, ca.Namespace))
	case len(decisions) == 0:
		report.Notes = append(report.Notes, fmt.Sprintf("ClusterAutoscaler %s records no decisions yet: it would not have scaled the cluster since it started", ca.Name))
	}

	workload, err := run.workload(ca)
	if err != nil {
		return nil, err
	}
	in := CompareInput{Now: run.now, Window: run.opts.since, Tolerance: run.opts.tolerance, Decisions: decisions}
	traces, err := readTheirTraces(ctx, workload, run.statusConfigMap, in.within)
	if apierrors.IsForbidden(err) && run.opts.workloadKubeconfig == "" {
		// The manager's own identity there, such as config/workload-rbac's,
		// need not list events.
		secret, _ := kubeconfig.Location(ca)
		return nil, fmt.Errorf("%w; the kubeconfig of Secret %s, which the manager uses, may not read it: pass one that may with --workload-kubeconfig FILE (`clusterctl get kubeconfig %s -n %s > FILE` writes the Cluster's)",
			err, secret, ca.Spec.ClusterName, ca.Namespace)
	}
	if err != nil {
		return nil, err
	}
	in.TheirScaleUps, in.TheirScaleDowns, in.Pods = traces.scaleUps, traces.scaleDowns, traces.pods
	report.Comparison = Compare(in)
	report.TheirStatus = traces.status
	report.Notes = append(report.Notes, traces.notes...)
	if report.TheirStatus != nil && report.TheirStatus.LastUpdated != nil && run.now.Sub(report.TheirStatus.LastUpdated.Time) > autoscaler.OtherAutoscalerRecency {
		report.Notes = append(report.Notes, fmt.Sprintf("the other autoscaler last wrote its status at %s: it may not be running",
			cli.TimeAndAge(report.TheirStatus.LastUpdated, run.now)))
	}
	if run.opts.since > defaultEventTTL {
		report.Notes = append(report.Notes, fmt.Sprintf("the window is longer than the %s the API server keeps events by default: what the other autoscaler did before %s may be gone",
			cli.ShortDuration(defaultEventTTL), cli.Clock(report.TheirEventsSince.Time, run.now)))
	}
	report.Notes = append(report.Notes, boundsDifferences(report.TheirStatus, ca.Status.NodeGroups, ca.Namespace)...)
	return report, nil
}

// workloadClient connects to the workload cluster of ca with the kubeconfig
// file, else with the kubeconfig the manager reaches it with
// (kubeconfig.Location): spec.workloadKubeconfigSecretRef, else the
// Cluster's Cluster API kubeconfig Secret. A kubeconfig from a Secret that
// runs a credential plugin is refused, as the manager refuses it: whoever
// may write Secrets in the namespace would run a command here.
func workloadClient(ctx context.Context, management client.Reader, ca *autoscalingv1alpha1.ClusterAutoscaler, file string) (client.Reader, error) {
	var cfg *rest.Config
	var err error
	if file != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: file}
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("--workload-kubeconfig %s: %w", file, err)
		}
	} else if cfg, err = kubeconfigFromSecret(ctx, management, ca); err != nil {
		return nil, fmt.Errorf("cannot reach the workload cluster: %w; pass the workload cluster's kubeconfig with --workload-kubeconfig FILE (`clusterctl get kubeconfig %s -n %s > FILE` writes it)",
			err, ca.Spec.ClusterName, ca.Namespace)
	}
	cfg.WarningHandler = rest.NoWarnings{}
	// An unreachable workload cluster fails the command, not hangs it.
	cfg.Timeout = 30 * time.Second
	scheme, err := cli.NewScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// kubeconfigFromSecret reads the kubeconfig of the Secret the manager
// reaches the workload cluster of ca with.
func kubeconfigFromSecret(ctx context.Context, management client.Reader, ca *autoscalingv1alpha1.ClusterAutoscaler) (*rest.Config, error) {
	s, data, err := kubeconfig.Read(ctx, management, ca)
	if err != nil {
		return nil, err
	}
	cfg, err := kubeconfig.RESTConfig(data)
	if err != nil {
		return nil, fmt.Errorf("the kubeconfig Secret %s holds no usable kubeconfig: %w", client.ObjectKeyFromObject(s), err)
	}
	return cfg, nil
}

// theirTraces is what the other autoscaler left in the workload cluster.
type theirTraces struct {
	scaleUps   []TheirScaleUpEvent
	scaleDowns []TheirScaleDown
	pods       map[string]PodCreation
	status     *TheirStatus
	// notes say what could not be read or understood.
	notes []string
}

// listPage is how many events or pods a request lists at most.
const listPage = 500

// readTheirTraces reads the other autoscaler's events, the pods of its
// scale-ups within the window and its status ConfigMap. Its notes tell of
// the events within the window it does not understand.
func readTheirTraces(ctx context.Context, c client.Reader, statusKey client.ObjectKey, within func(time.Time) bool) (*theirTraces, error) {
	traces := &theirTraces{pods: map[string]PodCreation{}}
	scaleUps, err := listEvents(ctx, c, autoscaler.EventTriggeredScaleUp)
	if err != nil {
		return nil, err
	}
	namespaces := sets.New[string]()
	for i := range scaleUps {
		e := &scaleUps[i]
		if e.InvolvedObject.Kind != "Pod" || !fromOtherAutoscaler(e) {
			continue
		}
		scaleUp := TheirScaleUpEvent{
			Pod: e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name, UID: e.InvolvedObject.UID,
			Time: firstOccurrence(e), Message: e.Message,
		}
		traces.scaleUps = append(traces.scaleUps, scaleUp)
		if within(scaleUp.Time) {
			namespaces.Insert(e.InvolvedObject.Namespace)
		}
	}

	var unparsed []string
	for _, reason := range []string{scaledown.EventReasonScaleDown, reasonScaleDownEmpty} {
		events, err := listEvents(ctx, c, reason)
		if err != nil {
			return nil, err
		}
		for i := range events {
			e := &events[i]
			if !fromOtherAutoscaler(e) {
				continue
			}
			node, err := scaleDownNode(e)
			switch {
			case errors.Is(err, errNotAboutANode):
			case err != nil:
				if within(firstOccurrence(e)) {
					unparsed = append(unparsed, err.Error())
				}
			default:
				traces.scaleDowns = append(traces.scaleDowns, TheirScaleDown{Node: node, Time: firstOccurrence(e)})
			}
		}
	}
	if len(unparsed) > 0 {
		traces.notes = append(traces.notes, fmt.Sprintf("%s of the other autoscaler not understood, e.g. %s", cli.Plural(int32(len(unparsed)), "scale-down event"), unparsed[0]))
	}

	var unreadable []string
	var firstErr error
	for _, namespace := range sets.List(namespaces) {
		if err := readPodCreations(ctx, c, namespace, traces.pods); err != nil {
			unreadable = append(unreadable, namespace)
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if len(unreadable) > 0 {
		traces.notes = append(traces.notes, fmt.Sprintf("cannot read the pods of namespaces %s, so the other autoscaler's latency for them is unknown: %v",
			strings.Join(unreadable, ", "), firstErr))
	}

	configMap := &corev1.ConfigMap{}
	switch err := c.Get(ctx, statusKey, configMap); {
	case apierrors.IsNotFound(err):
		traces.notes = append(traces.notes, fmt.Sprintf("no status ConfigMap %s: the other autoscaler writes none (capi-autoscaler does not; upstream not with --write-status-configmap=false), or another (--status-configmap)", statusKey))
	case err != nil:
		traces.notes = append(traces.notes, fmt.Sprintf("cannot read the other autoscaler's status ConfigMap %s: %v", statusKey, err))
	default:
		traces.status = parseTheirStatus(configMap)
	}
	return traces, nil
}

// listEvents lists the events of every namespace with reason.
func listEvents(ctx context.Context, c client.Reader, reason string) ([]corev1.Event, error) {
	var all []corev1.Event
	list := &corev1.EventList{}
	for {
		if err := c.List(ctx, list, client.MatchingFields{"reason": reason}, client.Limit(listPage), client.Continue(list.Continue)); err != nil {
			return nil, fmt.Errorf("listing the %s events of the workload cluster: %w", reason, err)
		}
		all = append(all, list.Items...)
		if list.Continue == "" {
			return all, nil
		}
	}
}

// readPodCreations adds when the pods of namespace were created.
func readPodCreations(ctx context.Context, c client.Reader, namespace string, pods map[string]PodCreation) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	for {
		if err := c.List(ctx, list, client.InNamespace(namespace), client.Limit(listPage), client.Continue(list.Continue)); err != nil {
			return err
		}
		for _, pod := range list.Items {
			pods[pod.Namespace+"/"+pod.Name] = PodCreation{UID: pod.UID, Created: pod.CreationTimestamp.Time}
		}
		if list.Continue == "" {
			return nil
		}
	}
}

func printCompare(w io.Writer, output string, report *CompareReport, p cli.Palette, now time.Time) error {
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
func writeCompare(w io.Writer, r *CompareReport, p cli.Palette, now time.Time) {
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

func writeTheirStatus(w io.Writer, s *TheirStatus, r *CompareReport, p cli.Palette, now time.Time) {
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
