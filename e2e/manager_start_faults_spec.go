//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ManagerStartDuringFaultsSpecInput is the input of
// ManagerStartDuringFaultsSpec.
type ManagerStartDuringFaultsSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscaler reaches the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
	// Manager is the running manager the spec kills, started again with
	// ManagerArgs; Restarted is told of the new one.
	Manager     *localstack.Process
	ManagerArgs []string
	Restarted   func(*localstack.Process)
}

// startFaultsFor is how long every request of the restarted manager fails.
const startFaultsFor = 10 * time.Second

// ManagerStartDuringFaultsSpec starts the manager while every request it
// makes fails, as the soak of seeds 1796607729352608303 and
// 1796609189400834875 (SeparateWorkload) did at 50%: it must wait for the
// API server and run, not exit: once the requests succeed again, it
// serves a new ClusterAutoscaler.
func ManagerStartDuringFaultsSpec(ctx context.Context, inputGetter func() ManagerStartDuringFaultsSpecInput) {
	var input ManagerStartDuringFaultsSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ManagerStartDuringFaultsSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "ManagerStartDuringFaultsSpec needs the manager")
	})

	It("waits for the API server instead of exiting", func() {
		var restarted *localstack.Process
		restart := framework.PrepareManagerRestart(ctx, framework.ManagerRestartInput{
			Stack: input.Stack, Manager: input.Manager, Args: input.ManagerArgs,
			Restarted: func(p *localstack.Process) {
				restarted = p
				input.Restarted(p)
			},
		})
		proxies := framework.ProxiesOf(input.Stack)
		DeferCleanup(func() { setFaults(proxies, faultproxy.Faults{}) })

		By("Killing the manager, then failing every request of the autoscaler")
		Expect(input.Manager.Kill()).To(Succeed())
		Eventually(input.Manager.Exited()).Should(BeClosed())
		setFaults(proxies, faultproxy.Faults{Rate: 1, Kinds: []faultproxy.Fault{faultproxy.InternalError, faultproxy.ServiceUnavailable}})
		restart()

		By("Seeing the manager keep running while every request fails, and after")
		Consistently(restarted.Exited(), startFaultsFor, framework.AutoscalerPoll).ShouldNot(BeClosed(), "the manager exited while its requests failed")
		setFaults(proxies, faultproxy.Faults{})

		By("Seeing it serve a ClusterAutoscaler once its requests succeed")
		mgmt := input.Stack.Management.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "start-faults")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		framework.ExpectManagerHealthy(restarted)
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
