//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/agreement"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// The CI run is a few hundred pods of one seed; make agreement runs the
// long one (docs/simulation.md).
var (
	agreementPods         = flag.Int("e2e.agreement-pods", 300, "Pending pods generated per seed by the scheduler agreement spec")
	agreementSeed         = flag.Uint64("e2e.agreement-seed", 1, "First seed of the scheduler agreement spec")
	agreementRuns         = flag.Int("e2e.agreement-runs", 1, "Seeds the scheduler agreement spec runs, from -e2e.agreement-seed on")
	agreementNodesPerKind = flag.Int("e2e.agreement-nodes-per-kind", 6, "Largest number of nodes of one kind in the scheduler agreement spec's clusters")
	agreementVolumes      = flag.Bool("e2e.agreement-volumes", true, "Generate volumes (claims, persistent volumes, storage classes, CSI attach limits) in the scheduler agreement spec")
	agreementDRA          = flag.Bool("e2e.agreement-dra", true, "Generate Dynamic Resource Allocation objects (device classes, ResourceSlices, resource claims) in the scheduler agreement spec")
)

// SchedulerAgreementSpecInput is the input of SchedulerAgreementSpec.
type SchedulerAgreementSpecInput struct {
	Stack *localstack.Stack
	// KubeScheduler is the kube-scheduler binary to compare with.
	KubeScheduler string
	// Seeds are the generated clusters, one comparison each.
	Seeds []uint64
	// Cluster is what to generate for each seed; its seed is ignored.
	Cluster clustergen.Options
}

// SchedulerAgreementSpec compares, pod by pod and node by node, where
// kube-scheduler and the simulator find that generated pending pods fit
// in generated clusters, and fails on any disagreement that no known
// difference explains.
func SchedulerAgreementSpec(ctx context.Context, inputGetter func() SchedulerAgreementSpecInput) {
	var input SchedulerAgreementSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "SchedulerAgreementSpec needs a stack")
		Expect(input.Seeds).NotTo(BeEmpty(), "SchedulerAgreementSpec needs seeds")
	})

	It("finds the nodes kube-scheduler finds for every pending pod", func() {
		var unexplained []string
		for _, seed := range input.Seeds {
			opts := input.Cluster
			opts.Seed = seed
			By(fmt.Sprintf("Comparing kube-scheduler and the simulator on the cluster of seed %d, %d pending pods", seed, opts.PendingPods))
			result, err := agreement.Run(ctx, agreement.Options{
				Stack: input.Stack, Name: names.SimpleNameGenerator.GenerateName(fmt.Sprintf("agreement-%d-", seed)),
				KubeScheduler: input.KubeScheduler, Cluster: opts, Log: GinkgoWriter,
			})
			Expect(err).NotTo(HaveOccurred())
			AddReportEntry("scheduler agreement", result.Summary())
			GinkgoWriter.Println(result.Summary())
			for _, d := range result.Unexplained() {
				unexplained = append(unexplained, d.String())
			}
		}
		Expect(unexplained).To(BeEmpty(), "disagreements no known difference explains:\n%s", strings.Join(unexplained, "\n"))
	})
}

// agreementInput is the spec's input from the suite's flags.
func agreementInput() SchedulerAgreementSpecInput {
	root, err := filepath.Abs(*repoRoot)
	Expect(err).NotTo(HaveOccurred())
	seeds := make([]uint64, *agreementRuns)
	for i := range seeds {
		seeds[i] = *agreementSeed + uint64(i)
	}
	return SchedulerAgreementSpecInput{
		Stack:         stack,
		KubeScheduler: filepath.Join(root, "bin", "k8s", "kube-scheduler"),
		Seeds:         seeds,
		Cluster:       clustergen.Options{PendingPods: *agreementPods, NodesPerKind: *agreementNodesPerKind, Volumes: *agreementVolumes, DRA: *agreementDRA},
	}
}
