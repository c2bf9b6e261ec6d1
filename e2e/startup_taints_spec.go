//go:build e2e

package e2e

import (
	"context"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// StartupTaintsSpecInput is the input of StartupTaintsSpec.
type StartupTaintsSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// StartupTaintsSpec shows nodes that register with Cluster API's
// uninitialized taint and a startup taint, as a kubelet started with
// --register-with-taints does: until something on the node (a CNI, a
// device plugin) removes the startup taint, the node counts as on its way,
// not as ready capacity, and the group still grows for pods that do not
// fit, although its only template is a node carrying the taints.
func StartupTaintsSpec(ctx context.Context, inputGetter func() StartupTaintsSpecInput) {
	var (
		input     StartupTaintsSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "StartupTaintsSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "startup-taints")
	})

	It("counts a node with startup taints as upcoming and still scales up its group", func() {
		startupTaint := corev1.Taint{Key: nodefacts.StartupTaintPrefix + "cni", Effect: corev1.TaintEffectNoSchedule}
		uninitialized := corev1.Taint{Key: nodefacts.ClusterAPIUninitializedTaint, Effect: corev1.TaintEffectNoSchedule}

		By("Creating a Cluster with a node group of one 2-cpu node whose Nodes register with both taints")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "startup-taints", WorkloadKubeconfig: input.WorkloadKubeconfig})
		machine := framework.SimMachine("2")
		machine.NodeTaints = []corev1.Taint{uninitialized, startupTaint}
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 4),
			Labels:      map[string]string{framework.ClusterLabel: namespace.Name},
			Machine:     machine,
		})
		first := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		Eventually(func(g Gomega) []corev1.Taint {
			return nodeTaints(ctx, g, workload, first)
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(ConsistOf(startupTaint),
			"Cluster API removes its uninitialized taint once it has synced the labels; the startup taint stays")

		By("Turning autoscaling on: the Node is Ready for Kubernetes but counts as upcoming")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
			g.Expect(row.Registered).To(BeEquivalentTo(1))
			g.Expect(row.Ready).To(BeZero())
			g.Expect(row.Upcoming).To(BeEquivalentTo(1))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Creating 2 pods of 1500m cpu, tolerating nothing: one waits for the starting Node, the other needs a new one")
		requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2,
			Requests: requests, NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, md)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(2))
		nodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
			g.Expect(row.Registered).To(BeEquivalentTo(2))
			g.Expect(row.Ready).To(BeZero())
			g.Expect(row.Upcoming).To(BeEquivalentTo(2), "both Nodes are still starting")
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(framework.PendingPods(ctx, Default, workload, namespace.Name)).To(Equal(2), "no pod runs on a Node with a startup taint")

		By("Removing the startup taints, as the CNI would: the Nodes count as ready and take the pods")
		for _, name := range nodes {
			removeNodeTaint(ctx, workload, name, startupTaint.Key)
		}
		framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
			g.Expect(row.Ready).To(BeEquivalentTo(2))
			g.Expect(row.Upcoming).To(BeZero())
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(2), "the starting Node was not asked for twice")

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}

// nodeTaints are the taints of the only Node in nodes (by Machine name).
func nodeTaints(ctx context.Context, g Gomega, workload client.Client, nodes map[string]string) []corev1.Taint {
	g.Expect(nodes).To(HaveLen(1))
	for _, name := range nodes {
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		return node.Spec.Taints
	}
	return nil
}

// removeNodeTaint removes the taints with key from the Node name.
func removeNodeTaint(ctx context.Context, workload client.Client, name, key string) {
	GinkgoHelper()
	framework.PatchObject(ctx, workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, func(node *corev1.Node) {
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == key })
	})
}
