//go:build e2e

package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// MixedBurstSpecInput is the input of MixedBurstSpec.
type MixedBurstSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// poolLabel is a Machine label Cluster API copies to the Nodes: the pool a
// workload selects.
const poolLabel = "pool.node.cluster.x-k8s.io/name"

// MixedBurstSpec shows one loop growing every node group a burst of pending
// pods needs: pods for small machines and pods for large ones arrive
// together, and one scale-up grows both groups.
func MixedBurstSpec(ctx context.Context, inputGetter func() MixedBurstSpecInput) {
	var input MixedBurstSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "MixedBurstSpec needs a stack")
	})

	It("grows both node groups a burst of two kinds of pods needs, in one scale-up", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "mixed-burst")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})

		By("Creating a pool of 2-cpu machines and a pool of 8-cpu machines, one node each, at most 4")
		pool := func(name, cpu string) *clusterv1.MachineDeployment {
			md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: name, Annotations: framework.SizeAnnotations(1, 4),
				Labels:  map[string]string{framework.ClusterLabel: namespace.Name, poolLabel: name},
				Machine: framework.SimMachine(cpu),
			})
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
			return md
		}
		small, large := pool("small", "2"), pool("large", "8")
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating, before autoscaling is on, 6 pods of 600m for the small pool and 4 of 3 cpu for the large one")
		// 3 small pods per small node, 2 large pods per large node: each pool
		// needs one more node.
		workloadFor := func(name, md string, replicas int32, cpu string) *appsv1.Deployment {
			return framework.CreateWorkload(ctx, framework.WorkloadInput{
				Client: workload, Namespace: namespace.Name, Name: name, Replicas: replicas, Requests: framework.CPURequest(cpu),
				NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name, poolLabel: md},
			})
		}
		web, batch := workloadFor("web", small.Name, 6, "600m"), workloadFor("batch", large.Name, 4, "3")
		Eventually(func(g Gomega) {
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(5))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed(), "3 web pods and 2 batch pods wait for nodes")

		By("Turning autoscaling on: its first scale-up grows both pools by one")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, small)).To(BeEquivalentTo(2))
			g.Expect(framework.Replicas(ctx, g, mgmt, large)).To(BeEquivalentTo(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			events := framework.PodEvents(ctx, g, workload, namespace.Name, "TriggeredScaleUp")
			g.Expect(events).To(HaveLen(5), "every pending pod triggered the scale-up")
			for pod, podEvents := range events {
				g.Expect(podEvents).To(HaveLen(1), "pod %s was planned for once", pod)
				g.Expect(podEvents[0].Message).To(And(ContainSubstring(framework.NodeGroupID(small)), ContainSubstring(framework.NodeGroupID(large))),
					"one scale-up grew both groups")
			}
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing every pod Running, the planned ones on the new nodes")
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: small, Count: 2})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: large, Count: 2})
		framework.WaitForPodsRunning(ctx, workload, web, framework.ScaleUpTimeout)
		framework.WaitForPodsRunning(ctx, workload, batch, framework.ScaleUpTimeout)
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{web, batch}, NodesBefore: nodesBefore,
		})
		for _, md := range []*clusterv1.MachineDeployment{small, large} {
			Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(2), "%s grew beyond what the pods need", md.Name)
		}

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
