// Command manager runs capi-autoscaler: one controller-runtime manager in a
// Cluster API management cluster that autoscales every workload cluster with
// a ClusterAutoscaler object. Its wiring is internal/manager.
package main

import (
	"os"
	// The image is scratch, without a zone database: the time zones of
	// scheduled capacity buffers are read from the one in the binary.
	_ "time/tzdata"

	"github.com/capi-autoscaler/capi-autoscaler/internal/manager"
)

func main() {
	// os.Exit skips deferred calls: Main returns once the logs are flushed.
	os.Exit(manager.Main(manager.Options{}))
}
