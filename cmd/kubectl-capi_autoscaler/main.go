// Command kubectl-capi_autoscaler is the kubectl plugin of capi-autoscaler:
// with it on the PATH, `kubectl capi-autoscaler status`, `explain` and `top`
// show what the autoscaler does in the Clusters of a management cluster,
// and why; `compare` compares a DryRun autoscaler's decisions with what
// another autoscaler did, and `convert` turns an upstream
// cluster-autoscaler's configuration into a ClusterAutoscaler.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

func main() {
	cmd := plugin.NewCommand(cli.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		// An ExitError is an outcome with an exit status of its own, such
		// as compare's differences, rather than a failure.
		var exit *cli.ExitError
		if errors.As(err, &exit) {
			if exit.Message != "" {
				fmt.Fprintln(os.Stderr, cli.TerminalText(exit.Message))
			}
			os.Exit(exit.Code)
		}
		// Errors quote what the clusters hold, such as Secret contents.
		fmt.Fprintf(os.Stderr, "error: %s\n", cli.TerminalText(err.Error()))
		os.Exit(1)
	}
}
