//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// BadInputSpecInput is the input of BadInputSpec.
type BadInputSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// BadInputSpec shows that a MachineDeployment with min > max is left alone,
// with an event and a status row saying why, while the other groups of the
// cluster keep scaling.
func BadInputSpec(ctx context.Context, inputGetter func() BadInputSpecInput) {
	var input BadInputSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "BadInputSpec needs a stack")
	})

	It("skips a MachineDeployment with min > max and scales the others", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "bad-input")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating a MachineDeployment with min 3 > max 1 and a good one, 1 node each")
		bad := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "bad",
			Replicas:    ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(3, 1),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
		})
		good := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "good",
			Replicas:    ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 5),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: bad, Count: 1})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: good, Count: 1})

		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Seeing a status row with a problem for the bad group and a normal row for the good one")
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, bad)
			g.Expect(row.Problem).To(And(ContainSubstring("min"), ContainSubstring("max")))
			g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, good).Problem).To(BeEmpty())
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.NodeGroupCount).To(BeEquivalentTo(1))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing a Warning event that names the bad group's annotation")
		Eventually(func(g Gomega) {
			events := &corev1.EventList{}
			g.Expect(mgmt.List(ctx, events, client.InNamespace(namespace.Name))).To(Succeed())
			var messages []string
			for _, event := range events.Items {
				onBad := event.InvolvedObject.Kind == "MachineDeployment" && event.InvolvedObject.Name == bad.Name
				onCA := event.InvolvedObject.Kind == "ClusterAutoscaler" && event.InvolvedObject.Name == ca.Name
				if (onBad || onCA) && event.Type == corev1.EventTypeWarning {
					messages = append(messages, event.Message)
				}
			}
			g.Expect(messages).To(ContainElement(And(ContainSubstring(bad.Name), ContainSubstring("min"))))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Running 4 pods of 1.5 cores: 2 fit, 2 need new nodes, which only the good group adds")
		framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 4,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, good)).To(BeEquivalentTo(3))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: good, Count: 3})
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, bad)).To(BeEquivalentTo(1), "the bad group is not touched")
			g.Expect(framework.Replicas(ctx, g, mgmt, good)).To(BeEquivalentTo(3))
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(BeZero())
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
