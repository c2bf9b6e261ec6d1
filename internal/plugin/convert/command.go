package convert

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// Values of convert --report.
const (
	reportStderr   = "stderr"
	reportComments = "comments"
	reportNone     = "none"
)

// convertFlags are the flags of convert.
type convertFlags struct {
	fromDeployment     string
	fromArgs           string
	fromHelmValues     []string
	fromPriorityConfig string
	container          string
	name, clusterName  string
	mode               string
	upstreamVersion    string
	report             string
	strict             bool
}

// NewCommand returns the convert command.
func NewCommand(o *cli.Options) *cobra.Command {
	f := &convertFlags{}
	cmd := &cobra.Command{
		Use:   "convert (--from-deployment FILE | --from-helm-values FILE... | --from-args ARGS | -- ARGS...)",
		Short: "Turn the configuration of the upstream cluster-autoscaler into a ClusterAutoscaler",
		Long: `Read the configuration of the upstream cluster-autoscaler that autoscales a
Cluster API cluster (--cloud-provider=clusterapi) and print the ClusterAutoscaler
that does the same: only the fields that differ from capi-autoscaler's defaults
or that the configuration sets. It reads one of:

  --from-deployment FILE   a Deployment or Pod, YAML or JSON, among other objects
                           or not (- for stdin): its cluster-autoscaler container's
                           command and args, its image tag for the upstream release,
                           and its Secret volumes for the kubeconfig
  --from-helm-values FILE  values of the upstream Helm chart (repeatable, as helm -f),
                           merged over the chart's defaults, rendered as the chart's
                           Deployment renders them
  --from-args "ARGS"       a command line; or the command line after --

The Cluster and its namespace come from --node-group-auto-discovery=
clusterapi:clusterName=...,namespace=..., or from --cluster-name and -n. The
ClusterAutoscaler is in DryRun mode unless --mode Active: it runs beside the
upstream autoscaler, which stays in charge, and says what it would do until you
switch over. The priority expander's priorities are in a ConfigMap that no
flag holds: give it with --from-priority-config (or the Helm values'
expanderPriorities).

A report, on stderr or with --report=comments as comments before the YAML,
says what became of each flag: the field it maps to, or why it maps to none
and what takes its place; the upstream defaults, of flags not given, that
differ from ours; the size annotations --nodes asks for, as kubectl annotate
commands; and what was amiss (malformed values, unknown flags), which
--strict turns into an error. Nothing is read from or written to a cluster.`,
		Example: `  # The Deployment of a management cluster
  kubectl get deployment -n capi-system autoscaler-prod -o yaml | kubectl capi-autoscaler convert --from-deployment - > prod.yaml

  # The values of the upstream Helm chart, with the report in the output
  kubectl capi-autoscaler convert --from-helm-values values.yaml --report=comments

  # A command line
  kubectl capi-autoscaler convert -n clusters -- --cloud-provider=clusterapi \
    --node-group-auto-discovery=clusterapi:clusterName=prod --scale-down-unneeded-time=5m`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runConvert(cmd, o, f, args)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.fromDeployment, "from-deployment", "", "A file with the Deployment or Pod of the upstream cluster-autoscaler, YAML or JSON; - for stdin")
	fs.StringVar(&f.fromArgs, "from-args", "", "The command line of the upstream cluster-autoscaler, quoted as for a shell")
	fs.StringArrayVar(&f.fromHelmValues, "from-helm-values", nil, "A values file of the upstream cluster-autoscaler Helm chart; repeatable, later files win; - for stdin")
	fs.StringVar(&f.fromPriorityConfig, "from-priority-config", "", "The upstream ConfigMap cluster-autoscaler-priority-expander, YAML or JSON, for the priority expander; - for stdin")
	fs.StringVar(&f.container, "container", "", "The container of --from-deployment that runs cluster-autoscaler, when its image and flags do not tell")
	fs.StringVar(&f.name, "name", "", "The name of the ClusterAutoscaler; the Cluster's name by default")
	fs.StringVar(&f.clusterName, "cluster-name", "", "The Cluster to autoscale; by default the clusterName of --node-group-auto-discovery")
	fs.StringVar(&f.mode, "mode", string(autoscalingv1alpha1.DryRunMode), "The mode of the ClusterAutoscaler: DryRun, to run beside the upstream autoscaler, or Active")
	fs.StringVar(&f.upstreamVersion, "upstream-version", "", "The upstream release whose defaults apply, such as 1.32; by default the image tag's, else the latest")
	fs.StringVar(&f.report, "report", reportStderr, "Where the report goes: stderr, comments (before the YAML, on stdout) or none")
	fs.BoolVar(&f.strict, "strict", false, "Fail, printing only the report, when something could not be converted or was amiss")
	return cmd
}

func runConvert(cmd *cobra.Command, o *cli.Options, f *convertFlags, args []string) error {
	opts, err := f.options(cmd, o)
	if err != nil {
		return err
	}
	var stdin io.Reader
	if o.Streams.In != nil {
		stdin = o.Streams.In
	}
	in, err := f.input(stdin, args, cmd.ArgsLenAtDash())
	if err != nil {
		return err
	}
	result, err := convert(in, opts)
	if err != nil {
		return err
	}
	if f.strict && len(result.report.warnings) > 0 {
		if err := writeReport(o.Streams.ErrOut, result, ""); err != nil {
			return err
		}
		return fmt.Errorf("--strict: %d warnings (above); no ClusterAutoscaler printed", len(result.report.warnings))
	}
	return printConversion(o.Streams, result, f.report)
}

// options checks convert's flags.
func (f *convertFlags) options(cmd *cobra.Command, o *cli.Options) (convertOptions, error) {
	mode := autoscalingv1alpha1.Mode(f.mode)
	if mode != autoscalingv1alpha1.DryRunMode && mode != autoscalingv1alpha1.ActiveMode {
		return convertOptions{}, fmt.Errorf("--mode must be DryRun or Active, not %q", f.mode)
	}
	switch f.report {
	case reportStderr, reportComments, reportNone:
	default:
		return convertOptions{}, fmt.Errorf("--report must be stderr, comments or none, not %q", f.report)
	}
	if f.container != "" && f.fromDeployment == "" {
		return convertOptions{}, fmt.Errorf("--container goes with --from-deployment")
	}
	opts := convertOptions{name: f.name, clusterName: f.clusterName, mode: mode, upstreamVersion: f.upstreamVersion}
	if cmd.Flags().Changed("namespace") {
		opts.namespace = o.Overrides.Context.Namespace
	}
	return opts, nil
}

// input reads the one source of the upstream configuration.
func (f *convertFlags) input(stdin io.Reader, args []string, dashAt int) (convertInput, error) {
	if len(args) > 0 && dashAt != 0 {
		return convertInput{}, fmt.Errorf("the upstream command line follows --, as in convert -- --cloud-provider=clusterapi ...; got %q", args[0])
	}
	sources := 0
	for _, given := range []bool{f.fromDeployment != "", f.fromArgs != "", len(f.fromHelmValues) > 0, len(args) > 0} {
		if given {
			sources++
		}
	}
	if sources != 1 {
		return convertInput{}, fmt.Errorf("give one of --from-deployment, --from-helm-values, --from-args, or the command line after --")
	}
	in, err := f.readSource(stdin, args)
	if err != nil {
		return convertInput{}, err
	}
	if f.fromPriorityConfig != "" {
		err = f.readPriorities(stdin, &in)
	}
	return in, err
}

func (f *convertFlags) readSource(stdin io.Reader, args []string) (convertInput, error) {
	switch {
	case f.fromDeployment != "":
		data, name, err := readInputFile(f.fromDeployment, stdin)
		if err != nil {
			return convertInput{}, err
		}
		return readDeployment(data, name, f.container)
	case len(f.fromHelmValues) > 0:
		files := make([][]byte, 0, len(f.fromHelmValues))
		names := make([]string, 0, len(f.fromHelmValues))
		for _, file := range f.fromHelmValues {
			data, name, err := readInputFile(file, stdin)
			if err != nil {
				return convertInput{}, err
			}
			files, names = append(files, data), append(names, name)
		}
		return readHelmValues(files, names)
	case f.fromArgs != "":
		words, err := splitCommandLine(f.fromArgs)
		if err != nil {
			return convertInput{}, fmt.Errorf("--from-args: %w", err)
		}
		return convertInput{source: "the command line of --from-args", args: words}, nil
	}
	return convertInput{source: "the command line after --", args: args}, nil
}

func (f *convertFlags) readPriorities(stdin io.Reader, in *convertInput) error {
	data, name, err := readInputFile(f.fromPriorityConfig, stdin)
	if err != nil {
		return err
	}
	priorities, err := readPriorityConfigMap(data, name)
	if err != nil {
		return err
	}
	if len(in.priorities) > 0 {
		in.warnings = append(in.warnings, fmt.Sprintf("the priorities of %s replace %s", name, in.prioritiesSource))
	}
	in.priorities, in.prioritiesSource = priorities, "the ConfigMap "+name
	return nil
}

// readInputFile reads file, or stdin for -.
func readInputFile(file string, stdin io.Reader) (data []byte, name string, err error) {
	if file != "-" {
		data, err = os.ReadFile(file)
		return data, file, err
	}
	if stdin == nil {
		return nil, "", fmt.Errorf("- reads stdin, which there is none of")
	}
	data, err = io.ReadAll(stdin)
	return data, "stdin", err
}

// printConversion prints the ClusterAutoscaler, and the report where
// --report says.
func printConversion(streams cli.Streams, result *converted, report string) error {
	data, err := marshalManifest(&result.object)
	if err != nil {
		return err
	}
	switch report {
	case reportStderr:
		err = writeReport(streams.ErrOut, result, "")
	case reportComments:
		err = writeReport(streams.Out, result, "# ")
	}
	if err != nil {
		return err
	}
	_, err = streams.Out.Write(data)
	return err
}
