// Package compare is `kubectl capi-autoscaler compare`: a DryRun
// ClusterAutoscaler's decisions against what the other autoscaler of its
// workload cluster did (Compare), read from that cluster's events and the
// upstream autoscaler's status ConfigMap.
package compare

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
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
			// One clock for the comparison and the ages it prints.
			now := o.Now()
			report, err := runCompare(cmd.Context(), compareRun{
				management: c, namespace: namespace, name: args[0], now: now,
				opts: co, statusConfigMap: statusKey,
				workload: func(ca *autoscalingv1alpha1.ClusterAutoscaler) (client.Reader, error) {
					return workloadClient(cmd.Context(), c, ca, co.workloadKubeconfig)
				},
			})
			if err != nil {
				return err
			}
			if err := printCompare(o.Out(), co.output, report, o.Palette(), now); err != nil {
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
	cli.AddOutputFlag(cmd, &co.output, "Print the comparison as json or yaml")
	flags.BoolVar(&co.failOnDifference, "fail-on-difference", false, "Exit with 2 when the autoscalers differ")
	return cmd
}

// parseObjectKey reads NAMESPACE/NAME.
func parseObjectKey(s string) (client.ObjectKey, error) {
	namespace, name, ok := cli.SplitNamespacedName(s)
	if !ok || namespace == "" {
		return client.ObjectKey{}, fmt.Errorf("want NAMESPACE/NAME, not %q", s)
	}
	return client.ObjectKey{Namespace: namespace, Name: name}, nil
}

// Report is what compare prints: the comparison, whose ClusterAutoscaler
// it is, what the other autoscaler's status says, and notes on what limits it.
type Report struct {
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

func runCompare(ctx context.Context, run compareRun) (*Report, error) {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	if err := run.management.Get(ctx, client.ObjectKey{Namespace: run.namespace, Name: run.name}, ca); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no ClusterAutoscaler %s in namespace %s", run.name, run.namespace)
		}
		return nil, fmt.Errorf("reading ClusterAutoscaler %s/%s: %w", run.namespace, run.name, err)
	}
	decisions := ca.Status.DryRunDecisions
	report := &Report{
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
	in := Input{Now: run.now, Window: run.opts.since, Tolerance: run.opts.tolerance, Decisions: decisions}
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
