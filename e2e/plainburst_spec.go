//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "plain-burst")
		zones := []string{"zone-a", "zone-b", "zone-c"}
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: zones, WorkloadKubeconfig: input.WorkloadKubeconfig,
		})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating one MachineDeployment of 4-core machines per zone, 1 node each, machines taking 20s")
		machine := framework.SimMachine("4")
		machine.ProvisioningDelay = metav1.Duration{Duration: 20 * time.Second}
		groups := framework.CreateZonalNodeGroups(ctx, framework.CreateZonalNodeGroupsInput{
			Management: mgmt, Workload: workload, Cluster: cluster, Zones: zones,
			Replicas: 1, Annotations: framework.SizeAnnotations(1, 20), Machine: machine,
		})
		nodesBefore := framework.NodeNames(ctx, workload)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		watchCtx, stopWatching := context.WithCancel(ctx)
		burst := watchBurst(watchCtx, burstWatchInput{
			Management: mgmt, Workload: workload, Namespace: namespace.Name, Groups: groups, NodesBefore: nodesBefore, Pods: plainBurstPods,
		})
		DeferCleanup(stopWatching)
		steps := framework.WatchReadyToRunning(ctx, input.Stack, cluster, namespace.Name)
		burstStarted := time.Now()

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
