//go:build e2e

package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// DuplicateClusterAutoscalerSpecInput is the input of DuplicateClusterAutoscalerSpec.
type DuplicateClusterAutoscalerSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// DuplicateClusterAutoscalerSpec shows what a user sees who creates a second
// ClusterAutoscaler for a Cluster that has one: the second is refused, in
// its Ready condition and in a warning event that name the first, and the
// first alone scales the Cluster; once the first is deleted, the second
// takes over.
func DuplicateClusterAutoscalerSpec(ctx context.Context, inputGetter func() DuplicateClusterAutoscalerSpecInput) {
	var input DuplicateClusterAutoscalerSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DuplicateClusterAutoscalerSpec needs a stack")
	})

	It("refuses a second ClusterAutoscaler for a Cluster, and hands the Cluster over to it when the first is deleted", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "duplicate")

		By("Autoscaling a Cluster with a node group of one 2-cpu node, at most 5")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "duplicate", WorkloadKubeconfig: input.WorkloadKubeconfig})
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 5),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: namespace.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		first := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		// expectScaledUp waits until ca has grown the node group to
		// replicas for app's pods, in one scale-up.
		expectScaledUp := func(ca *autoscalingv1alpha1.ClusterAutoscaler, app *appsv1.Deployment, replicas int32) {
			GinkgoHelper()
			Eventually(func(g Gomega) int32 {
				return framework.Replicas(ctx, g, mgmt, md)
			}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Equal(replicas))
			framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
			Expect(framework.Replicas(ctx, Default, mgmt, md)).To(Equal(replicas), "the node group grew beyond what the pods need")
			Eventually(func(g Gomega) {
				g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, md).Ready).To(Equal(replicas))
				g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.LastScaleUpTime).NotTo(BeNil())
			}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		}

		By("Creating a second ClusterAutoscaler for the same Cluster: it is refused, naming the first")
		second := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "second"},
			Spec:       framework.FastClusterAutoscalerSpec(cluster.Name),
		}
		Expect(mgmt.Create(ctx, second)).To(Succeed())
		Eventually(func(g Gomega) {
			ready := conditions.Get(framework.GetClusterAutoscaler(ctx, g, mgmt, second), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
			g.Expect(ready.Message).To(ContainSubstring("ClusterAutoscaler " + first.Name + " already autoscales"))
			refused := framework.ObjectEvents(ctx, g, mgmt, namespace.Name, "ClusterAutoscaler", second.Name, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason)
			g.Expect(framework.EventMessages(refused)).To(ContainElement(ContainSubstring(first.Name)))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing the first alone add the one node that a pending pod needs")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2,
			Requests: framework.CPURequest("1500m"), NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})
		expectScaledUp(first, app, 2)
		refused := framework.GetClusterAutoscaler(ctx, Default, mgmt, second)
		Expect(refused.Status.NodeGroups).To(BeEmpty())
		Expect(refused.Status.LastScaleUpTime).To(BeNil())

		By("Deleting the first: the second takes over and scales up")
		framework.DeleteClusterAutoscaler(ctx, mgmt, first)
		Eventually(func(g Gomega) {
			ready := conditions.Get(framework.GetClusterAutoscaler(ctx, g, mgmt, second), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		more := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "more", Replicas: 1,
			Requests: framework.CPURequest("1500m"), NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})
		expectScaledUp(second, more, 3)

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: second, Cluster: cluster})
	})
}
