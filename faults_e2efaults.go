//go:build e2efaults

package main

import "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faults"

// The end-to-end suite's isolation spec runs a manager built with the
// e2efaults tag, whose node groups panic on request (faults.PanicAnnotation).
func init() {
	nodeGroups = faults.PanickingNodeGroups
}
