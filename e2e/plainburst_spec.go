//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// PlainBurstSpecInput is the input of PlainBurstSpec.
type PlainBurstSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// A plain burst's pods and the nodes they need: two of 1.5 cores fit a
// 4-core node, so 40 pods need 20 nodes, the 3 already there included.
const (
	plainBurstPods  = 40
	plainBurstNodes = plainBurstPods / 2
)

// PlainBurstSpec measures what issue 51 targets, every pod Running soon
// after its node is Ready, on a burst without topology spread: no pod
// waits for another zone's node, so each pod's wait after its node's
// Ready is the scheduler's and the autoscaler's alone.
func PlainBurstSpec(ctx context.Context, inputGetter func() PlainBurstSpecInput) {
	var input PlainBurstSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "PlainBurstSpec needs a stack")
	})

	It("buys the nodes the burst needs, no more, and runs the pods of each on it", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		z := startZonalBurst(ctx, input.Stack, input.WorkloadKubeconfig, "plain-burst", 20*time.Second, plainBurstPods)
		namespace, cluster, groups, ca, burst, stopWatching, steps, burstStarted := z.namespace, z.cluster, z.groups, z.ca, z.burst, z.stopWatching, z.steps, z.started

		By(fmt.Sprintf("Creating %d pods of 1.5 cores, without spread", plainBurstPods))
		web := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "web", Replicas: plainBurstPods, Requests: framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})

		By("Seeing every pod Running")
		framework.WaitForPodsRunning(ctx, workload, web, framework.ScaleUpTimeout)

		By(fmt.Sprintf("Seeing %d nodes, for good", plainBurstNodes))
		nodes := 0
		Consistently(func(g Gomega) {
			nodes = len(framework.ClusterNodes(ctx, g, workload, cluster))
			g.Expect(nodes).To(BeNumerically("<=", plainBurstNodes), "nodes of the cluster")
			replicas := int32(0)
			for _, md := range groups {
				replicas += framework.Replicas(ctx, g, mgmt, md)
			}
			g.Expect(replicas).To(BeNumerically("<=", plainBurstNodes), "replicas of the node groups")
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		stopWatching()
		report := fmt.Sprintf("%d nodes; %s", nodes, burst.Times())
		AddReportEntry("plain burst", report)
		GinkgoWriter.Println("Plain burst:", report)
		nodeSteps, podSteps := steps.Steps()
		readyToRunning := framework.NewReadyToRunningReport(nodeSteps, podSteps, burstStarted)
		AddReportEntry("plain burst: from node Ready to pod Running", readyToRunning.String())
		GinkgoWriter.Println("Plain burst, from node Ready to pod Running:\n" + readyToRunning.String())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
