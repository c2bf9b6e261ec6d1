//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
)

var _ = Describe("Local stack", func() {
	LocalStackSmokeSpec(ctx, func() LocalStackSmokeSpecInput {
		return LocalStackSmokeSpecInput{Stack: stack, WorkloadKubeconfig: workloadKubeconfig}
	})
})
