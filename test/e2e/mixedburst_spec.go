//go:build e2e

package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// MixedBurstSpecInput is the input of MixedBurstSpec.
type MixedBurstSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "mixed-burst")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})

		By("Creating a pool of 2-cpu machines and a pool of 8-cpu machines, one node each, at most 4")
		pool := func(name, cpu string) *clusterv1.MachineDeployment {
			md := CreateNodeGroup(ctx, CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: name, Annotations: SizeAnnotations(1, 4),
				Labels:  map[string]string{ClusterLabel: namespace.Name, poolLabel: name},
				Machine: SimMachine(cpu),
			})
			WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
			return md
		}
		small, large := pool("small", "2"), pool("large", "8")
		nodesBefore := NodeNames(workload)

		By("Creating, before autoscaling is on, 6 pods of 600m for the small pool and 4 of 3 cpu for the large one")
		// 3 small pods per small node, 2 large pods per large node: each pool
		// needs one more node.
		workloadFor := func(name, md string, replicas int32, cpu string) *appsv1.Deployment {
			return CreateWorkload(ctx, WorkloadInput{
				Client: workload, Namespace: namespace.Name, Name: name, Replicas: replicas, Requests: CPURequest(cpu),
				NodeSelector: map[string]string{ClusterLabel: namespace.Name, poolLabel: md},
			})
		}
		web, batch := workloadFor("web", small.Name, 6, "600m"), workloadFor("batch", large.Name, 4, "3")
		Eventually(func(g Gomega) {
			g.Expect(PendingPods(g, workload, namespace.Name)).To(Equal(5))
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed(), "3 web pods and 2 batch pods wait for nodes")

		By("Turning autoscaling on: its first scale-up grows both pools by one")
		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: FastClusterAutoscalerSpec(cluster.Name)})
		Eventually(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, small)).To(BeEquivalentTo(2))
			g.Expect(Replicas(g, mgmt, large)).To(BeEquivalentTo(2))
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			events := PodEvents(g, workload, namespace.Name, "TriggeredScaleUp")
			g.Expect(events).To(HaveLen(5), "every pending pod triggered the scale-up")
			for pod, podEvents := range events {
				g.Expect(podEvents).To(HaveLen(1), "pod %s was planned for once", pod)
				g.Expect(podEvents[0].Message).To(And(ContainSubstring(NodeGroupID(small)), ContainSubstring(NodeGroupID(large))),
					"one scale-up grew both groups")
			}
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())

		By("Seeing every pod Running, the planned ones on the new nodes")
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: small, Count: 2})
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: large, Count: 2})
		WaitForPodsRunning(ctx, workload, web, ScaleUpTimeout)
		WaitForPodsRunning(ctx, workload, batch, ScaleUpTimeout)
		ExpectPlannedPodsScheduledOnNewNodes(ctx, ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{web, batch}, NodesBefore: nodesBefore,
		})
		for _, md := range []*clusterv1.MachineDeployment{small, large} {
			Expect(Replicas(Default, mgmt, md)).To(BeEquivalentTo(2), "%s grew beyond what the pods need", md.Name)
		}

		DeleteAutoscaledCluster(ctx, DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
