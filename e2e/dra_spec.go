//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// DRASpecInput is the input of DRASpec.
type DRASpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// The DRA driver of the spec publishes draDevicesPerNode devices for each
// Node of the gpu group; each pod claims draDevicesPerPod of them.
const (
	draDriver         = "gpu.e2e.capi-autoscaler.io"
	draDevicesPerNode = 4
	draDevicesPerPod  = 2
	// draPublishAfter is longer than draUnneededTime, the spec's
	// unneeded time.
	draPublishAfter = 8 * time.Second
	draUnneededTime = 5 * time.Second
)

// DRASpec shows pods with Dynamic Resource Allocation claims scaling the
// node group whose devices can serve them, from zero, through the group's
// dra-driver and gpu-count annotations: 4 pods claiming 2 devices each
// need 2 Nodes of 4 devices, although their cpu fits on one Node of a
// cpu group the priority expander prefers, whose Nodes have no devices.
// The driver publishes a Node's devices a while after it is Ready, longer
// than the unneeded time: meanwhile the empty Nodes are on their way, not
// removed. The Nodes then stay while their pods hold all their devices (a
// pod that moves needs 2 free devices where it goes), and one goes once
// half the pods are gone, its pods' claims allocated anew on the other.
func DRASpec(ctx context.Context, inputGetter func() DRASpecInput) {
	var (
		input     DRASpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DRASpec needs a stack")
		mgmt, workload = input.Stack.Management.Client, input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "dra")
	})

	It("grows the group whose devices the claims need from zero, and keeps its Nodes while their devices are held", func() {
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		const poolLabel = "e2e.node.cluster.x-k8s.io/pool"

		By("Creating a cpu group of 8-core machines and a gpu group of 4-core machines, both at 0, the gpu group annotated with its DRA driver and device count")
		cpu := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "cpu", Replicas: ptr.To[int32](0),
			Annotations: framework.SizeAnnotations(0, 2), Machine: framework.SimMachine("8"),
			Labels: map[string]string{framework.ClusterLabel: cluster.Name, poolLabel: "cpu"},
		})
		gpuAnnotations := framework.SizeAnnotations(0, 3)
		gpuAnnotations[template.DRADriverAnnotation] = draDriver
		gpuAnnotations[template.GPUCountAnnotation] = strconv.Itoa(draDevicesPerNode)
		gpu := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "gpu", Replicas: ptr.To[int32](0),
			Annotations: gpuAnnotations, Machine: framework.SimMachine("4"),
			Labels: map[string]string{framework.ClusterLabel: cluster.Name, poolLabel: "gpu"},
		})
		framework.WaitForTemplateCapacity(ctx, mgmt, cpu)
		framework.WaitForTemplateCapacity(ctx, mgmt, gpu)

		By(fmt.Sprintf("Running a DRA driver that publishes %d devices for every Node of the gpu group %s after it is Ready, with no startup taint", draDevicesPerNode, draPublishAfter))
		framework.StartDRADriver(ctx, framework.DRADriverInput{
			Client: workload, NodeLabels: map[string]string{framework.ClusterLabel: cluster.Name, poolLabel: "gpu"},
			Driver: draDriver, Devices: draDevicesPerNode, PublishAfter: draPublishAfter,
		})
		class := framework.CreateDeviceClass(ctx, workload, namespace.Name, draDriver)
		claimTemplate := framework.CreateDeviceClaimTemplate(ctx, workload, namespace.Name, "gpus", class.Name, draDevicesPerPod)

		By(fmt.Sprintf("Creating 4 pods of 100m, each with a claim for %d devices", draDevicesPerPod))
		const replicas = 4
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: replicas,
			Requests:     framework.CPURequest("100m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate:       framework.WithClaimFromTemplate(claimTemplate.Name),
		})
		// All pending before autoscaling is on, so that one loop sees them
		// all.
		Eventually(func(g Gomega) {
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(replicas))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Turning autoscaling on, with the priority expander preferring the cpu group")
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		// Shorter than the driver's delay: an empty Node waiting for its
		// devices would go if it were not held as starting.
		spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: draUnneededTime}
		spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{
			{Priority: 100, NodeGroupIDPatterns: []string{"/cpu$"}},
			{Priority: 10, NodeGroupIDPatterns: []string{"/gpu$"}},
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
		nodesBefore := framework.NodeNames(ctx, workload)

		const gpuNodes = replicas * draDevicesPerPod / draDevicesPerNode
		By(fmt.Sprintf("Seeing the gpu group grow from 0 to %d at once, the cpu group stay at 0, and every pod Running with 2 on each gpu Node", gpuNodes))
		Eventually(func(g Gomega) {
			if current := framework.Replicas(ctx, g, mgmt, cpu); current != 0 {
				StopTrying(fmt.Sprintf("the cpu group grew to %d: its Nodes have no devices", current)).Now()
			}
			current := framework.Replicas(ctx, g, mgmt, gpu)
			if current != 0 && current != gpuNodes {
				StopTrying(fmt.Sprintf("the gpu group grew from 0 to %d, not to %d", current, gpuNodes)).Now()
			}
			g.Expect(current).To(BeEquivalentTo(gpuNodes))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		nodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: gpu, Count: gpuNodes})
		running := framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		// Empty for longer than the unneeded time while their devices came.
		framework.ExpectReplicasTrajectory(invariants.Replicas(gpu), 0, gpuNodes)
		expectPodsPerNode(running, nodes, draDevicesPerNode/draDevicesPerPod)
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{app}, NodesBefore: nodesBefore,
		})

		By("Seeing scale-down keep both gpu Nodes, under the utilization threshold, because no other Node has devices for their pods' claims")
		Eventually(func(g Gomega) {
			for _, node := range nodes {
				explained := framework.ExplainedNode(ctx, g, mgmt, ca, node)
				g.Expect(explained.Reason).To(Equal(string(scaledown.ReasonNoPlaceToMovePods)), "Node %s: %s", node, explained.Message)
			}
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Scaling the pods down to 2: their claims need the devices of one Node, and the other goes")
		framework.PatchObject(ctx, workload, app, false, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](2) })
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, gpu)).To(BeEquivalentTo(1))
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		remaining := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: gpu, Count: 1})
		expectPodsPerNode(framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout), remaining, draDevicesPerNode/draDevicesPerPod)
		framework.ExpectReplicasTrajectory(invariants.Replicas(gpu), 0, gpuNodes, 1)
		framework.ExpectReplicasTrajectory(invariants.Replicas(cpu), 0)
		invariants.ExpectNoViolations()

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
		framework.DeleteWorkload(ctx, workload, app)
	})
}

// expectPodsPerNode fails unless every pod runs on one of nodes (by
// Machine), with perNode pods on each.
func expectPodsPerNode(pods []corev1.Pod, nodes map[string]string, perNode int) {
	GinkgoHelper()
	count := map[string]int{}
	for _, pod := range pods {
		count[pod.Spec.NodeName]++
	}
	want := map[string]int{}
	for _, node := range nodes {
		want[node] = perNode
	}
	Expect(count).To(Equal(want), "pods per Node")
}
