//go:build e2e

// Package e2e runs capi-autoscaler end to end on the local stack
// (e2e/framework/localstack): real Kubernetes and Cluster API processes on
// this machine, kwok Nodes and the simulated infrastructure provider. Each
// scenario is a spec function taking an input, in a *_spec.go file, and is
// registered in a *_test.go file; what the scenarios share is in
// e2e/framework.
package e2e

import (
	"context"
	"flag"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

var (
	topology    = flag.String("e2e.topology", string(localstack.SelfHosted), "Topology of the local stack: SelfHosted or SeparateWorkload")
	repoRoot    = flag.String("e2e.repo-root", "..", "Root of the repository, with the binaries in bin/k8s")
	workDir     = flag.String("e2e.work-dir", "", "Empty directory that keeps the stack's logs, kubeconfigs and data after the run")
	manager     = flag.String("e2e.manager", "", "Autoscaler manager binary to run against the management cluster; built from the repository when empty")
	managerArgs = flag.String("e2e.manager-args", "", "Space-separated extra arguments of the manager")

	ctx   = context.Background()
	stack *localstack.Stack

	// suiteManager is the autoscaler manager running against the stack; a
	// spec that restarts it puts the new handle here.
	suiteManager *localstack.Process
	// suiteManagerArgs are the arguments the manager was started with, to
	// start its binary again.
	suiteManagerArgs []string
	// workloadKubeconfig reaches the workload cluster as
	// WorkloadServiceAccount: every ClusterAutoscaler of the suite names it.
	workloadKubeconfig []byte
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "capi-autoscaler end-to-end suite")
}

var _ = BeforeSuite(func() {
	logger := zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger)
	ctx = ctrl.LoggerInto(ctx, logger)

	Expect(autoscalingv1alpha1.AddToScheme(localstack.Scheme)).To(Succeed())
	Expect(capacitybufferv1beta1.AddToScheme(localstack.Scheme)).To(Succeed())
	Expect(provisioningv1.AddToScheme(localstack.Scheme)).To(Succeed())
	managerBinary := *manager
	if managerBinary == "" {
		By("Building the autoscaler manager")
		managerBinary = framework.BuildManager(ctx, *repoRoot, GinkgoT().TempDir(), framework.ProductManager)
	}

	By("Starting the local stack, " + *topology)
	var err error
	stack, err = localstack.Start(ctx, localstack.Options{
		Topology: localstack.Topology(*topology), RepoRoot: *repoRoot, WorkDir: *workDir,
		AutoscalerNeedsTokens: true,
	})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		By("Stopping the local stack")
		Expect(stack.Stop()).To(Succeed())
	})

	By("Installing the shipped RBAC: the manager runs as its ServiceAccount, and as the ServiceAccount of config/workload-rbac in the workload cluster")
	kubeconfig := framework.InstallManagerRBAC(ctx, stack, *repoRoot)
	workloadKubeconfig = framework.InstallWorkloadRBAC(ctx, stack, *repoRoot)
	framework.InstallWorkloadCRDs(ctx, stack, *repoRoot)
	// Registered after the stack's clean-up, so it runs first.
	DeferCleanup(func() {
		By("Checking that no request of the autoscaler was forbidden")
		framework.ExpectNoForbiddenRequests(stack)
	})

	By("Starting the autoscaler manager")
	// No fixed ports: other stacks may run on the same machine.
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--diagnostics-address=0",
		"--health-probe-bind-address=0",
	}, strings.Fields(*managerArgs)...)
	suiteManager, err = stack.StartProcess(ctx, "capi-autoscaler", managerBinary, args...)
	Expect(err).NotTo(HaveOccurred())
	suiteManagerArgs = args
})
