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

	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// BadInputSpecInput is the input of BadInputSpec.
type BadInputSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "bad-input")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })

		By("Creating a MachineDeployment with min 3 > max 1 and a good one, 1 node each")
		bad := CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "bad",
			Replicas:    ptr.To[int32](1),
			Annotations: SizeAnnotations(3, 1),
			Machine:     SimMachine("2"),
			Labels:      map[string]string{ClusterLabel: cluster.Name},
		})
		good := CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "good",
			Replicas:    ptr.To[int32](1),
			Annotations: SizeAnnotations(1, 5),
			Machine:     SimMachine("2"),
			Labels:      map[string]string{ClusterLabel: cluster.Name},
		})
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: bad, Count: 1})
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: good, Count: 1})

		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: FastClusterAutoscalerSpec(cluster.Name)})

		By("Seeing a status row with a problem for the bad group and a normal row for the good one")
		Eventually(func(g Gomega) {
			row := NodeGroupRow(g, mgmt, ca, bad)
			g.Expect(row.Problem).To(And(ContainSubstring("min"), ContainSubstring("max")))
			g.Expect(NodeGroupRow(g, mgmt, ca, good).Problem).To(BeEmpty())
			g.Expect(GetClusterAutoscaler(g, mgmt, ca).Status.NodeGroupCount).To(BeEquivalentTo(1))
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())

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
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())

		By("Running 4 pods of 1.5 cores: 2 fit, 2 need new nodes, which only the good group adds")
		CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 4,
			Requests:     CPURequest("1500m"),
			NodeSelector: map[string]string{ClusterLabel: cluster.Name},
		})
		Eventually(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, good)).To(BeEquivalentTo(3))
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: good, Count: 3})
		Consistently(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, bad)).To(BeEquivalentTo(1), "the bad group is not touched")
			g.Expect(Replicas(g, mgmt, good)).To(BeEquivalentTo(3))
			g.Expect(PendingPods(g, workload, namespace.Name)).To(BeZero())
		}, 10*time.Second, AutoscalerPoll).Should(Succeed())

		DeleteClusterAutoscaler(mgmt, ca)
	})
}
