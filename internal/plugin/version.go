package plugin

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// version is the release the plugin was built for: `make
// release-kubectl-plugin` sets it (-ldflags -X).
var version string

// newVersionCommand returns the version command.
func newVersionCommand(o *cli.Options) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version",
		Long: `Print the plugin's version: the release it was built for, else the module
version the go command stamped (go install ...@v0.1.0), else (devel); then the
Go version and the platform it was built for.`,
		Example: "  kubectl capi-autoscaler version",
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(o.Streams.Out, "kubectl-capi_autoscaler %s %s %s/%s\n", pluginVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// pluginVersion is the release's version, else the module's.
func pluginVersion() string {
	if version != "" {
		return version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
		return info.Main.Version
	}
	return "(devel)"
}
