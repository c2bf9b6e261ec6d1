//go:build e2e

package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ScaleFromZeroSpecInput is the input of ScaleFromZeroSpec.
type ScaleFromZeroSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ScaleFromZeroSpec shows node groups with no node growing for the pods
// that select them: one described by its SimMachineTemplate's
// status.capacity, one by the capacity annotations of its
// MachineDeployment, each selected through labels that only the template
// node can tell (a label Cluster API propagates from the machine template,
// a label from the labels annotation).
func ScaleFromZeroSpec(ctx context.Context, inputGetter func() ScaleFromZeroSpecInput) {
	var (
		input     ScaleFromZeroSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ScaleFromZeroSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "from-zero")
	})

	It("grows the node groups that the pending pods select from zero", func() {
		By("Creating a Cluster with two node groups at 0 replicas, min 0")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "from-zero", WorkloadKubeconfig: input.WorkloadKubeconfig})
		bounds := map[string]string{
			clusterv1.AutoscalerMinSizeAnnotation: "0",
			clusterv1.AutoscalerMaxSizeAnnotation: "3",
		}
		const poolLabel = "e2e.node.cluster.x-k8s.io/pool"
		standardCapacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		// Its SimMachineTemplate publishes the capacity in status.
		standard := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:      mgmt,
			Cluster:     cluster,
			Name:        "standard",
			Replicas:    ptr.To[int32](0),
			Annotations: bounds,
			Labels:      map[string]string{framework.ClusterLabel: namespace.Name, poolLabel: "standard"},
			Machine:     infrav1.SimMachineSpec{Capacity: standardCapacity},
		})

		// Its capacity annotations describe the Nodes, including a label
		// that the machine's Nodes get from the provider, not from Cluster
		// API.
		const highMemRole = "node-role.kubernetes.io/worker-highmem"
		const diskLabel = "e2e.capi-autoscaler.io/disk"
		highMemCapacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		highMemAnnotations := map[string]string{
			"capacity.cluster-autoscaler.kubernetes.io/cpu":     "4",
			"capacity.cluster-autoscaler.kubernetes.io/memory":  "16Gi",
			"capacity.cluster-autoscaler.kubernetes.io/maxPods": "110",
			"capacity.cluster-autoscaler.kubernetes.io/labels":  diskLabel + "=ssd",
		}
		for k, v := range bounds {
			highMemAnnotations[k] = v
		}
		highMem := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:      mgmt,
			Cluster:     cluster,
			Name:        "highmem",
			Replicas:    ptr.To[int32](0),
			Annotations: highMemAnnotations,
			Labels:      map[string]string{framework.ClusterLabel: namespace.Name, highMemRole: ""},
			Machine: infrav1.SimMachineSpec{
				Capacity:   highMemCapacity,
				NodeLabels: map[string]string{diskLabel: "ssd"},
			},
		})

		By("Waiting for the standard template to publish its capacity")
		framework.WaitForTemplateCapacity(ctx, mgmt, standard)

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating 2 pods of 1500m cpu for the standard pool and 3 pods of 6Gi for the highmem role with ssd disks")
		cpuRequests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}
		cpuApp := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "cpu-app", Replicas: 2, Requests: cpuRequests,
			NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name, poolLabel: "standard"},
		})
		memRequests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("6Gi")}
		memApp := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "mem-app", Replicas: 3, Requests: memRequests,
			NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name, highMemRole: "", diskLabel: "ssd"},
		})
		standardNeeded := framework.CeilDiv(2, framework.PodsPerNode(standardCapacity, cpuRequests))
		highMemNeeded := framework.CeilDiv(3, framework.PodsPerNode(highMemCapacity, memRequests))
		Expect(standardNeeded).To(Equal(2))
		Expect(highMemNeeded).To(Equal(2))

		By("Seeing each node group grow from 0 to what its pods need")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, standard)).To(BeEquivalentTo(standardNeeded))
			g.Expect(framework.Replicas(ctx, g, mgmt, highMem)).To(BeEquivalentTo(highMemNeeded))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: standard, Count: standardNeeded})
		highMemNodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: highMem, Count: highMemNeeded})

		By("Seeing every pod Running on the nodes of the group it selects")
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, memApp, framework.ScaleUpTimeout) {
			Expect(highMemNodes).To(ContainElement(pod.Spec.NodeName), "pod %s", pod.Name)
		}
		framework.WaitForPodsRunning(ctx, workload, cpuApp, framework.ScaleUpTimeout)
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{cpuApp, memApp}, NodesBefore: nodesBefore,
		})
		Expect(framework.Replicas(ctx, Default, mgmt, standard)).To(BeEquivalentTo(standardNeeded))
		Expect(framework.Replicas(ctx, Default, mgmt, highMem)).To(BeEquivalentTo(highMemNeeded))

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
