//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ScaleUpSpecInput is the input of ScaleUpSpec.
type ScaleUpSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ScaleUpSpec shows a node group growing for pods that do not fit: by
// exactly the nodes the pods need, reported in the ClusterAutoscaler status
// and in events on the pods, with kube-scheduler placing the pods where the
// autoscaler planned them.
func ScaleUpSpec(ctx context.Context, inputGetter func() ScaleUpSpecInput) {
	var (
		input     ScaleUpSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ScaleUpSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "scale-up")
	})

	It("adds exactly the nodes that pending pods need", func() {
		By("Creating a Cluster with a node group of one 2-cpu node, at most 6")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "scale-up", WorkloadKubeconfig: input.WorkloadKubeconfig})
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:  mgmt,
			Cluster: cluster,
			Name:    "workers",
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "1",
				clusterv1.AutoscalerMaxSizeAnnotation: "6",
			},
			Labels:  map[string]string{framework.ClusterLabel: namespace.Name},
			Machine: infrav1.SimMachineSpec{Capacity: capacity},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating 7 pods of 600m cpu: 3 fit on the node, the other 4 need 2 more nodes")
		requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("600m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
		const replicas = 7
		podsPerNode := framework.PodsPerNode(capacity, requests)
		Expect(podsPerNode).To(Equal(3))
		pending := replicas - podsPerNode
		needed := framework.CeilDiv(pending, podsPerNode)
		scaleUpStarted := time.Now()
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: replicas,
			Requests: requests, NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})

		By("Seeing the MachineDeployment grow from 1 to 3 replicas")
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, md)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(1 + needed))

		By("Seeing every pod Running on 3 Ready Nodes")
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1 + needed})
		framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(1+needed), "the node group grew beyond what the pods need")

		planned := framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{app}, NodesBefore: nodesBefore,
		})
		Expect(planned.Len()).To(BeNumerically("<=", pending), "pods that fit on the first node triggered the scale-up")

		By("Reading the scale-up in the ClusterAutoscaler status")
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
			g.Expect(row).To(gstruct.MatchFields(gstruct.IgnoreExtras, gstruct.Fields{
				"MinSize":    HaveValue(BeEquivalentTo(1)),
				"MaxSize":    HaveValue(BeEquivalentTo(6)),
				"TargetSize": BeEquivalentTo(1 + needed),
				"Registered": BeEquivalentTo(1 + needed),
				"Ready":      BeEquivalentTo(1 + needed),
				"Upcoming":   BeZero(),
			}))
			current := framework.GetClusterAutoscaler(ctx, g, mgmt, ca)
			g.Expect(current.Status.LastScaleUpTime).NotTo(BeNil())
			g.Expect(current.Status.LastScaleUpTime.Time).To(BeTemporally(">=", scaleUpStarted.Truncate(time.Second)))
			g.Expect(current.Status.UnschedulablePods).To(BeZero())
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Reading the TriggeredScaleUp event on a pod")
		Eventually(func(g Gomega) {
			events := framework.PodEvents(ctx, g, workload, namespace.Name, "TriggeredScaleUp")
			g.Expect(events).NotTo(BeEmpty())
			for _, podEvents := range events {
				g.Expect(podEvents[0].Message).To(ContainSubstring(framework.NodeGroupID(md)))
				g.Expect(podEvents[0].Source.Component).To(Equal("cluster-autoscaler"))
			}
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
