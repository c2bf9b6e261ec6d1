// Command kubectl-capi_autoscaler is the kubectl plugin of capi-autoscaler:
// with it on the PATH, `kubectl capi-autoscaler status`, `explain` and `top`
// show what the autoscaler does in the Clusters of a management cluster,
// and why, and `convert` turns an upstream cluster-autoscaler's
// configuration into a ClusterAutoscaler.
package main

import (
	"fmt"
	"os"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin"
)

func main() {
	cmd := plugin.NewCommand(plugin.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}
