// Package plugin is kubectl-capi_autoscaler, the kubectl plugin that shows
// what capi-autoscaler does and why: `kubectl capi-autoscaler status`,
// `explain` and `top`. They read only what the manager publishes in the
// management cluster (ClusterAutoscalers, their explanation ConfigMaps and
// the events of them and of their node groups), with the user's own
// credentials. `compare` also reads a workload cluster: what another
// autoscaler did there, to compare with a DryRun ClusterAutoscaler's
// decisions. `convert` turns the configuration of the upstream
// cluster-autoscaler into a ClusterAutoscaler, reading no cluster.
package plugin

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// Streams are the standard streams of the plugin.
type Streams struct {
	In          *os.File
	Out, ErrOut io.Writer
}

// options are the flags every command shares.
type options struct {
	streams Streams
	// loadingRules and overrides are client-go's kubeconfig loading, as
	// kubectl's --kubeconfig, --context and --namespace set them.
	loadingRules  *clientcmd.ClientConfigLoadingRules
	overrides     *clientcmd.ConfigOverrides
	allNamespaces bool
	color         string
	// now is the clock of the ages the views show.
	now func() time.Time
}

// NewCommand returns the plugin's root command.
func NewCommand(streams Streams) *cobra.Command {
	return newCommand(streams, time.Now)
}

// newCommand returns the root command with a clock of its own, for tests.
func newCommand(streams Streams, now func() time.Time) *cobra.Command {
	o := &options{
		streams:      streams,
		loadingRules: clientcmd.NewDefaultClientConfigLoadingRules(),
		overrides:    &clientcmd.ConfigOverrides{},
		now:          now,
	}
	root := &cobra.Command{
		Use: "kubectl-capi_autoscaler",
		// kubectl runs kubectl-capi_autoscaler as `kubectl capi-autoscaler`.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl capi-autoscaler"},
		Short:       "Show what capi-autoscaler does, and why",
		Long: `Show what capi-autoscaler does in the Clusters it autoscales, and why, from what
its manager publishes in the management cluster: the ClusterAutoscalers, the
explanation of their last loop and the events of them and their node groups.
compare also reads a workload cluster, to compare what a DryRun
ClusterAutoscaler would have done with what the cluster's other autoscaler did.
convert turns the configuration of the upstream cluster-autoscaler into a
ClusterAutoscaler.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			// A command line tool reports errors itself: the client
			// libraries' logs would only garble its output.
			ctrllog.SetLogger(logr.Discard())
			klog.SetLogger(logr.Discard())
			switch o.color {
			case colorAuto, colorAlways, colorNever:
				return nil
			}
			return fmt.Errorf("--color must be auto, always or never, not %q", o.color)
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)

	flags := root.PersistentFlags()
	flags.StringVar(&o.loadingRules.ExplicitPath, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file of the management cluster")
	flags.StringVar(&o.overrides.CurrentContext, "context", "", "The kubeconfig context to use")
	flags.StringVarP(&o.overrides.Context.Namespace, "namespace", "n", "", "The namespace of the ClusterAutoscalers and Clusters")
	flags.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Look at the ClusterAutoscalers of every namespace")
	flags.StringVar(&o.color, "color", colorAuto, "Colour the output: auto (on a terminal, unless NO_COLOR is set), always or never")

	root.AddCommand(newStatusCommand(o), newExplainCommand(o), newTopCommand(o), newCompareCommand(o), newConvertCommand(o))
	return root
}

// newScheme knows what the plugin reads: ClusterAutoscalers, and the
// ConfigMaps and events.k8s.io Events of client-go's scheme.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, autoscalingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// client connects to the management cluster the kubeconfig flags select.
func (o *options) client() (client.WithWatch, error) {
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loadingRules, o.overrides).ClientConfig()
	if err != nil {
		return nil, err
	}
	// The API server's warnings, e.g. of deprecations, are not the user's
	// business here and would garble the live view.
	cfg.WarningHandler = rest.NoWarnings{}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// namespace is the namespace of -n, else the kubeconfig context's, else
// default; explicit says whether -n set it.
func (o *options) namespace(cmd *cobra.Command) (namespace string, explicit bool, err error) {
	namespace, _, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loadingRules, o.overrides).Namespace()
	return namespace, cmd.Flags().Changed("namespace"), err
}

// scope is where status and top look: the namespace, or all of them with
// -A (which wins over -n, as in kubectl), and the Cluster of the argument,
// as namespace/name or name.
func (o *options) scope(cmd *cobra.Command, args []string) (Scope, error) {
	namespace, _, err := o.namespace(cmd)
	if err != nil {
		return Scope{}, err
	}
	if o.allNamespaces {
		namespace = ""
	}
	if len(args) == 0 {
		return Scope{Namespace: namespace}, nil
	}
	return clusterScope(args[0], namespace)
}

// clusterScope is the Cluster named namespace/name, or name in namespace
// (in any namespace when namespace is empty).
func clusterScope(cluster, namespace string) (Scope, error) {
	if ns, name, ok := strings.Cut(cluster, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return Scope{}, fmt.Errorf("a Cluster is namespace/name or name, not %q", cluster)
		}
		return Scope{Namespace: ns, Cluster: name}, nil
	}
	return Scope{Namespace: namespace, Cluster: cluster}, nil
}

// palette is the colour of the output, on stdout.
func (o *options) palette() palette {
	switch o.color {
	case colorAlways:
		return palette{enabled: true}
	case colorNever:
		return palette{}
	}
	return palette{enabled: o.outIsTerminal() && os.Getenv("NO_COLOR") == ""}
}

// out is stdout for what the commands print: as TerminalText, whatever
// the clusters wrote into the strings printed.
func (o *options) out() io.Writer { return terminalWriter{o.streams.Out} }

// terminalStreams are the streams with stdout and stderr as out.
func (o *options) terminalStreams() Streams {
	return Streams{In: o.streams.In, Out: o.out(), ErrOut: terminalWriter{o.streams.ErrOut}}
}

// outIsTerminal says whether stdout is a terminal.
func (o *options) outIsTerminal() bool {
	f, ok := o.streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
