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
	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// LimitsSpecInput is the input of LimitsSpec.
type LimitsSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "limits")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })

		md := CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](1),
			Annotations: SizeAnnotations(1, 10),
			Machine:     SimMachine("2"),
			Labels:      map[string]string{ClusterLabel: cluster.Name},
		})
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		// The limits count every Node of the workload cluster; in the
		// self-hosted topology that includes other Clusters' Nodes.
		var baseline int
		Eventually(func(g Gomega) { baseline = CountNodes(g, workload) }).Should(Succeed())
		maxNodes := int32(baseline + 2)
		By("Turning autoscaling on with maxNodesTotal at the current node count + 2")
		spec := FastClusterAutoscalerSpec(cluster.Name)
		spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{MaxNodesTotal: ptr.To(maxNodes)}
		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Asking for 6 nodes' worth of pods")
		app := CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 6,
			Requests:     CPURequest("1500m"),
			NodeSelector: map[string]string{ClusterLabel: cluster.Name},
		})

		By("Seeing the group grow to exactly maxNodesTotal, with 3 pods left pending")
		expectStableSize(mgmt, workload, md, 3, namespace.Name, 3)
		Expect(CountNodes(Default, workload)).To(BeNumerically("==", maxNodes))
		expectNotTriggerReason(mgmt, ca, "max total nodes in cluster reached")

		By("Replacing maxNodesTotal by a cores max that leaves room for one more 2-core node")
		cores := ClusterCores(Default, workload)
		PatchClusterAutoscalerSpec(mgmt, ca, func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{
				Cores: &autoscalingv1alpha1.ResourceRange{Max: ptr.To(int32(cores + 2))},
			}
		})
		expectStableSize(mgmt, workload, md, 4, namespace.Name, 2)
		Expect(ClusterCores(Default, workload)).To(BeNumerically("==", cores+2))
		expectNotTriggerReason(mgmt, ca, "max cluster cpu limit reached")

		By("Lowering the group's max size to its size and lifting the cluster limits")
		patchObject(mgmt, md.DeepCopy(), false, func(current *clusterv1.MachineDeployment) {
			current.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] = "4"
		})
		Eventually(func(g Gomega) {
			g.Expect(NodeGroupRow(g, mgmt, ca, md).MaxSize).To(HaveValue(BeEquivalentTo(4)))
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
		PatchClusterAutoscalerSpec(mgmt, ca, func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = nil
		})
		expectNotTriggerReason(mgmt, ca, "max node group size reached")
		// Events about one pod are rate limited (client-go's spam filter:
		// 25 per object, then one per 5 minutes): the pods pending since the
		// start may have used theirs up. A new pod has its own budget.
		By("Adding one more pod and seeing its NotTriggerScaleUp event name the max size")
		patchObject(workload, app.DeepCopy(), false, func(current *appsv1.Deployment) {
			current.Spec.Replicas = ptr.To[int32](7)
		})
		Eventually(func(g Gomega) {
			var messages []string
			for _, events := range PodEvents(g, workload, namespace.Name, "NotTriggerScaleUp") {
				messages = append(messages, EventMessages(events)...)
			}
			g.Expect(messages).To(ContainElement(ContainSubstring("max node group size reached")))
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
		expectStableSize(mgmt, workload, md, 4, namespace.Name, 3)

		DeleteClusterAutoscaler(mgmt, ca)
	})
}

// expectStableSize waits until md has size Ready Nodes with pending pods
// left in namespace, and checks that it stays so over several loops.
func expectStableSize(mgmt, workload client.Client, md *clusterv1.MachineDeployment, size int, namespace string, pending int) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(size))
	}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
	WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: size})
	Eventually(func(g Gomega) {
		g.Expect(PendingPods(g, workload, namespace)).To(Equal(pending))
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed())
	Consistently(func(g Gomega) {
		g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(size))
		g.Expect(PendingPods(g, workload, namespace)).To(Equal(pending))
	}, 15*time.Second, AutoscalerPoll).Should(Succeed(), "%s grew past %d", md.Name, size)
}

// expectNotTriggerReason waits until the ClusterAutoscaler status says
// that pods did not trigger a scale-up for reason.
func expectNotTriggerReason(mgmt client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(GetClusterAutoscaler(g, mgmt, ca).Status.NotTriggerScaleUpReasons).To(ContainElement(HaveField("Reason", ContainSubstring(reason))))
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
}
