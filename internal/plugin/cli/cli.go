// Package cli is what the commands of kubectl-capi_autoscaler share: the
// root command and its flags, the client of the management cluster, the
// streams, with what the clusters wrote escaped for the terminal
// (TerminalText), and the formatting of times, colours and trees.
package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
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

// Options are the flags every command shares.
type Options struct {
	Streams Streams
	// loadingRules and Overrides are client-go's kubeconfig loading, as
	// kubectl's --kubeconfig, --context and --namespace set them.
	loadingRules *clientcmd.ClientConfigLoadingRules
	Overrides    *clientcmd.ConfigOverrides
	// kubeconfig loads the kubeconfig of the flags once, on first use,
	// for both the namespace and the client.
	kubeconfig    clientcmd.ClientConfig
	AllNamespaces bool
	color         string
	// Now is the clock of the ages the views show.
	Now func() time.Time
}

// Output formats of -o.
const (
	OutputText = ""
	OutputJSON = "json"
	OutputYAML = "yaml"
)

// AddOutputFlag adds -o, whose value lands in output, to cmd: the shells
// complete it with the output formats.
func AddOutputFlag(cmd *cobra.Command, output *string, usage string) {
	cmd.Flags().StringVarP(output, "output", "o", OutputText, usage)
	mustCompleteFlag(cmd, "output", OutputJSON, OutputYAML)
}

// mustCompleteFlag completes cmd's flag with values; the flag must be cmd's.
func mustCompleteFlag(cmd *cobra.Command, flag string, values ...string) {
	if err := cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)); err != nil {
		panic(err)
	}
}

// CheckOutput refuses an -o that is no output format.
func CheckOutput(output string) error {
	switch output {
	case OutputText, OutputJSON, OutputYAML:
		return nil
	}
	return fmt.Errorf("-o must be json or yaml, not %q", output)
}

// NewRootCommand returns the plugin's root command with the commands
// newCommands make, whose clock is now.
func NewRootCommand(streams Streams, now func() time.Time, newCommands ...func(*Options) *cobra.Command) *cobra.Command {
	o := &Options{
		Streams:      streams,
		loadingRules: clientcmd.NewDefaultClientConfigLoadingRules(),
		Overrides:    &clientcmd.ConfigOverrides{},
		Now:          now,
	}
	// Deferred: the flags set the loading rules and overrides first.
	o.kubeconfig = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(o.loadingRules, o.Overrides)
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
		Example: `  kubectl capi-autoscaler status -A
  kubectl capi-autoscaler explain pod shop/web-7d9f-x2x4z --cluster clusters/prod
  kubectl capi-autoscaler top clusters/prod`,
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
	flags.StringVar(&o.Overrides.CurrentContext, "context", "", "The kubeconfig context to use")
	flags.StringVarP(&o.Overrides.Context.Namespace, "namespace", "n", "", "The namespace of the ClusterAutoscalers and Clusters")
	flags.BoolVarP(&o.AllNamespaces, "all-namespaces", "A", false, "Look at the ClusterAutoscalers of every namespace")
	flags.StringVar(&o.color, "color", colorAuto, "Colour the output: auto (on a terminal, unless NO_COLOR is set), always or never")
	mustCompleteFlag(root, "color", colorAuto, colorAlways, colorNever)
	if err := root.RegisterFlagCompletionFunc("context", o.completeContext); err != nil {
		panic(err)
	}

	for _, newCommand := range newCommands {
		root.AddCommand(newCommand(o))
	}
	return root
}

// completeContext completes --context with the contexts of the kubeconfig
// (of --kubeconfig, else KUBECONFIG's files, else ~/.kube/config).
func (o *Options) completeContext(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	config, err := o.loadingRules.Load()
	if err != nil {
		return nil, cobra.ShellCompDirectiveError
	}
	return slices.Sorted(maps.Keys(config.Contexts)), cobra.ShellCompDirectiveNoFileComp
}

// Scope selects the ClusterAutoscalers a command looks at.
type Scope struct {
	// Namespace is empty for all namespaces.
	Namespace string
	// Cluster, when set, keeps the ClusterAutoscalers of the Cluster of
	// that name only.
	Cluster string
}

func (s Scope) String() string {
	where := "in namespace " + s.Namespace
	if s.Namespace == "" {
		where = "in any namespace"
	}
	if s.Cluster != "" {
		return fmt.Sprintf("for Cluster %s %s", s.Cluster, where)
	}
	return where
}

// NewScheme knows what the plugin reads: ClusterAutoscalers, and the
// ConfigMaps and events.k8s.io Events of client-go's scheme.
func NewScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, autoscalingv1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// Client connects to the management cluster the kubeconfig flags select.
func (o *Options) Client() (client.WithWatch, error) {
	cfg, err := o.kubeconfig.ClientConfig()
	if err != nil {
		return nil, err
	}
	// The API server's warnings, e.g. of deprecations, are not the user's
	// business here and would garble the live view.
	cfg.WarningHandler = rest.NoWarnings{}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme})
}

// Namespace is the namespace of -n, else the kubeconfig context's, else
// default; explicit says whether -n set it.
func (o *Options) Namespace(cmd *cobra.Command) (namespace string, explicit bool, err error) {
	namespace, _, err = o.kubeconfig.Namespace()
	return namespace, cmd.Flags().Changed("namespace"), err
}

// Scope is where status and top look: the namespace, or all of them with
// -A (which wins over -n, as in kubectl), and the Cluster of the argument,
// as namespace/name or name.
func (o *Options) Scope(cmd *cobra.Command, args []string) (Scope, error) {
	namespace, _, err := o.Namespace(cmd)
	if err != nil {
		return Scope{}, err
	}
	if o.AllNamespaces {
		namespace = ""
	}
	if len(args) == 0 {
		return Scope{Namespace: namespace}, nil
	}
	return ClusterScope(args[0], namespace)
}

// ScopedClient is the scope of the arguments (Scope) and a client of the
// management cluster (Client).
func (o *Options) ScopedClient(cmd *cobra.Command, args []string) (Scope, client.WithWatch, error) {
	scope, err := o.Scope(cmd, args)
	if err != nil {
		return Scope{}, nil, err
	}
	c, err := o.Client()
	return scope, c, err
}

// ClusterScope is the Cluster named namespace/name, or name in namespace
// (in any namespace when namespace is empty).
func ClusterScope(cluster, namespace string) (Scope, error) {
	ns, name, ok := SplitNamespacedName(cluster)
	switch {
	case !ok:
		return Scope{}, fmt.Errorf("a Cluster is namespace/name or name, not %q", cluster)
	case ns != "":
		namespace = ns
	}
	return Scope{Namespace: namespace, Cluster: name}, nil
}

// SplitNamespacedName splits namespace/name, or name alone, whose
// namespace is then "". ok is false for anything else with a slash.
func SplitNamespacedName(s string) (namespace, name string, ok bool) {
	namespace, name, found := strings.Cut(s, "/")
	if !found {
		return "", s, true
	}
	return namespace, name, namespace != "" && name != "" && !strings.Contains(name, "/")
}

// Palette is the colour of the output, on stdout.
func (o *Options) Palette() Palette {
	switch o.color {
	case colorAlways:
		return Palette{Enabled: true}
	case colorNever:
		return Palette{}
	}
	return Palette{Enabled: o.OutIsTerminal() && os.Getenv("NO_COLOR") == ""}
}

// Out is stdout for what the commands print: as TerminalText, whatever
// the clusters wrote into the strings printed.
func (o *Options) Out() io.Writer { return terminalWriter{o.Streams.Out} }

// TerminalStreams are the streams with stdout and stderr as out.
func (o *Options) TerminalStreams() Streams {
	return Streams{In: o.Streams.In, Out: o.Out(), ErrOut: terminalWriter{o.Streams.ErrOut}}
}

// OutIsTerminal says whether stdout is a terminal.
func (o *Options) OutIsTerminal() bool {
	f, ok := o.Streams.Out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ExitError ends the plugin with Code, having printed Message, if any, on
// stderr.
type ExitError struct {
	Code    int
	Message string
}

func (e *ExitError) Error() string { return e.Message }

// ClusterAutoscalerKind is the kind events of a ClusterAutoscaler name.
const ClusterAutoscalerKind = "ClusterAutoscaler"
