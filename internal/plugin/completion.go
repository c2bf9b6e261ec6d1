package plugin

import (
	"io"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// newCompletionCommand returns the completion command: cobra's scripts,
// which complete kubectl-capi_autoscaler by asking it (__complete).
func newCompletionCommand(o *cli.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script of kubectl-capi_autoscaler",
		Long: `Print the shell completion script of kubectl-capi_autoscaler, run by its own name.

Run as kubectl capi-autoscaler, the plugin is completed by kubectl's own
completion (kubectl 1.26 and later), which runs kubectl_complete-capi_autoscaler
when it is on the PATH: the release archive has it, beside the plugin.`,
		Example: `  # bash, with the bash-completion package, in ~/.bashrc
  source <(kubectl capi-autoscaler completion bash)

  # zsh, in a directory of $fpath
  kubectl capi-autoscaler completion zsh > "${fpath[1]}/_kubectl-capi_autoscaler"

  # fish
  kubectl capi-autoscaler completion fish > ~/.config/fish/completions/kubectl-capi_autoscaler.fish`,
		ValidArgs:             slices.Sorted(maps.Keys(completionScripts)),
		Args:                  cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		DisableFlagsInUseLine: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return completionScripts[args[0]](cmd.Root(), o.Streams.Out)
		},
	}
}

// completionScripts write cobra's completion script of root for each shell.
var completionScripts = map[string]func(root *cobra.Command, out io.Writer) error{
	"bash": func(root *cobra.Command, out io.Writer) error { return root.GenBashCompletionV2(out, true) },
	"zsh":  (*cobra.Command).GenZshCompletion,
	"fish": func(root *cobra.Command, out io.Writer) error { return root.GenFishCompletion(out, true) },
}
