// Package plugin is kubectl-capi_autoscaler, the kubectl plugin that shows
// what capi-autoscaler does and why: `kubectl capi-autoscaler status`,
// `explain` and `top`. They read only what the manager publishes in the
// management cluster (ClusterAutoscalers, their explanation ConfigMaps and
// the events of them and of their node groups), with the user's own
// credentials. `compare` also reads a workload cluster: what another
// autoscaler did there, to compare with a DryRun ClusterAutoscaler's
// decisions. `convert` turns the configuration of the upstream
// cluster-autoscaler into a ClusterAutoscaler, reading no cluster.
//
// Each command lives in a package of its own, over what they share
// (package cli): view has status, explain and top; compare and convert
// theirs. completion and version are the plugin's own.
package plugin

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/compare"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/convert"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/view"
)

// NewCommand returns the plugin's root command.
func NewCommand(streams cli.Streams) *cobra.Command {
	return cli.NewRootCommand(streams, time.Now, commands...)
}

// commands make the plugin's commands.
var commands = []func(*cli.Options) *cobra.Command{
	view.NewStatusCommand, view.NewExplainCommand, view.NewTopCommand, compare.NewCommand, convert.NewCommand,
	newCompletionCommand, newVersionCommand,
}
