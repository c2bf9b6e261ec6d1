//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// LimitsSpecInput is the input of LimitsSpec.
type LimitsSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// LimitsSpec shows that the cluster-wide limits (maxNodesTotal, cores max)
// and a group's max size stop growth exactly at the limit, with pods left
// pending and the reason reported.
func LimitsSpec(ctx context.Context, inputGetter func() LimitsSpecInput) {
	var input LimitsSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "LimitsSpec needs a stack")
	})

	It("stops at maxNodesTotal, at the cores max and at the group's max size", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "limits")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 10),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		// The limits count every Node of the workload cluster; in the
		// self-hosted topology that includes other Clusters' Nodes.
		var baseline int
		Eventually(func(g Gomega) { baseline = framework.CountNodes(ctx, g, workload) }).Should(Succeed())
		maxNodes := int32(baseline + 2)
		By("Turning autoscaling on with maxNodesTotal at the current node count + 2")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{MaxNodesTotal: ptr.To(maxNodes)}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Asking for 6 nodes' worth of pods")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 6,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})

		By("Seeing the group grow to exactly maxNodesTotal, with 3 pods left pending")
		expectStableSize(ctx, mgmt, workload, md, 3, namespace.Name, 3)
		Expect(framework.CountNodes(ctx, Default, workload)).To(BeNumerically("==", maxNodes))
		framework.ExpectNotTriggerReason(ctx, mgmt, ca, "max total nodes in cluster reached")

		By("Replacing maxNodesTotal by a cores max that leaves room for one more 2-core node")
		cores := framework.ClusterCores(ctx, Default, workload)
		framework.PatchClusterAutoscalerSpec(ctx, mgmt, ca, func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{
				Cores: &autoscalingv1alpha1.ResourceRange{Max: ptr.To(int32(cores + 2))},
			}
		})
		expectStableSize(ctx, mgmt, workload, md, 4, namespace.Name, 2)
		Expect(framework.ClusterCores(ctx, Default, workload)).To(BeNumerically("==", cores+2))
		framework.ExpectNotTriggerReason(ctx, mgmt, ca, "max cluster cpu limit reached")

		By("Lowering the group's max size to its size and lifting the cluster limits")
		framework.PatchObject(ctx, mgmt, md.DeepCopy(), false, func(current *clusterv1.MachineDeployment) {
			current.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] = "4"
		})
		Eventually(func(g Gomega) {
			g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, md).MaxSize).To(HaveValue(BeEquivalentTo(4)))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.PatchClusterAutoscalerSpec(ctx, mgmt, ca, func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = nil
		})
		framework.ExpectNotTriggerReason(ctx, mgmt, ca, "max node group size reached")
		// Events about one pod are rate limited (client-go's spam filter:
		// 25 per object, then one per 5 minutes): the pods pending since the
		// start may have used theirs up. A new pod has its own budget.
		By("Adding one more pod and seeing its NotTriggerScaleUp event name the max size")
		framework.PatchObject(ctx, workload, app.DeepCopy(), false, func(current *appsv1.Deployment) {
			current.Spec.Replicas = ptr.To[int32](7)
		})
		Eventually(func(g Gomega) {
			var messages []string
			for _, events := range framework.PodEvents(ctx, g, workload, namespace.Name, "NotTriggerScaleUp") {
				messages = append(messages, framework.EventMessages(events)...)
			}
			g.Expect(messages).To(ContainElement(ContainSubstring("max node group size reached")))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		expectStableSize(ctx, mgmt, workload, md, 4, namespace.Name, 3)

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// expectStableSize waits until md has size Ready Nodes with pending pods
// left in namespace, and checks that it stays so over several loops.
func expectStableSize(ctx context.Context, mgmt, workload client.Client, md *clusterv1.MachineDeployment, size int, namespace string, pending int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(size))
	}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
	framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: size})
	Eventually(func(g Gomega) {
		g.Expect(framework.PendingPods(ctx, g, workload, namespace)).To(Equal(pending))
	}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
	Consistently(func(g Gomega) {
		g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(size))
		g.Expect(framework.PendingPods(ctx, g, workload, namespace)).To(Equal(pending))
	}, 15*time.Second, framework.AutoscalerPoll).Should(Succeed(), "%s grew past %d", md.Name, size)
}
