// Command manager is capi-autoscaler's manager with node groups that panic
// while their resource carries faults.PanicAnnotation, for the end-to-end
// suite's isolation spec. The product's manager is the repository's main.go.
package main

import (
	"os"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faults"
	"github.com/capi-autoscaler/capi-autoscaler/internal/manager"
)

func main() {
	os.Exit(manager.Main(manager.Options{NodeGroups: faults.PanickingNodeGroups}))
}
