//go:build e2e

package e2e

import (
	"bytes"
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// KubectlPluginSpecInput is the input of KubectlPluginSpec.
type KubectlPluginSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// KubectlPluginSpec runs `kubectl capi-autoscaler` against a Cluster the
// manager autoscales, reading only what the manager publishes: status
// shows the node group and a pod no group can hold, explain pod says why
// each group cannot, explain node why the group's only node stays.
func KubectlPluginSpec(ctx context.Context, inputGetter func() KubectlPluginSpecInput) {
	var (
		input     KubectlPluginSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "KubectlPluginSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "kubectl-plugin")
	})

	It("shows the Cluster and explains its pods and nodes", func() {
		By("Creating a Cluster with a node group of one 2-cpu node, at most 2, autoscaled")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "plugin", WorkloadKubeconfig: input.WorkloadKubeconfig})
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:  mgmt,
			Cluster: cluster,
			Name:    "workers",
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "1",
				clusterv1.AutoscalerMaxSizeAnnotation: "2",
			},
			Labels: map[string]string{framework.ClusterLabel: namespace.Name},
			Machine: infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("4Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			}},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		machines := framework.MachinesOf(ctx, Default, mgmt, md)
		Expect(machines).To(HaveLen(1))
		Expect(machines[0].Status.NodeRef.IsDefined()).To(BeTrue())
		node := machines[0].Status.NodeRef.Name

		By("Creating a pod of 8 cpu, which no node of the group can hold")
		framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "huge", Replicas: 1,
			Requests:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})
		pods := &corev1.PodList{}
		Eventually(func(g Gomega) {
			g.Expect(workload.List(ctx, pods, client.InNamespace(namespace.Name), client.MatchingLabels{"app": "huge"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		pod := namespace.Name + "/" + pods.Items[0].Name

		kubectl := func(g Gomega, args ...string) string {
			var out, errOut bytes.Buffer
			cmd := plugin.NewCommand(cli.Streams{Out: &out, ErrOut: &errOut})
			cmd.SetArgs(append(args, "--kubeconfig="+input.Stack.Management.KubeconfigPath, "--color=never"))
			g.Expect(cmd.ExecuteContext(ctx)).To(Succeed(), "kubectl capi-autoscaler %v: %s", args, errOut.String())
			return out.String()
		}

		By("Reading the Cluster, its node group and the pod in status")
		Eventually(func(g Gomega) {
			out := kubectl(g, "status", cluster.Name, "-n", namespace.Name)
			g.Expect(out).To(ContainSubstring("Cluster %s/%s", namespace.Name, cluster.Name))
			g.Expect(out).To(MatchRegexp(`MachineDeployment workers\s+min 1\s+target 1\s+ready 1\s+upcoming 0\s+max 2`))
			g.Expect(out).To(ContainSubstring("1 pod triggered no scale-up: 1 Insufficient cpu"))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Asking why the pod triggered no scale-up")
		Eventually(func(g Gomega) {
			out := kubectl(g, "explain", "pod", pod, "--cluster", namespace.Name+"/"+cluster.Name)
			g.Expect(out).To(ContainSubstring("Pod %s triggered no scale-up", pod))
			g.Expect(out).To(MatchRegexp(`MachineDeployment workers: .*Insufficient cpu`))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Asking why the group's only node stays")
		Eventually(func(g Gomega) {
			out := kubectl(g, "explain", "node", node, "--cluster", namespace.Name+"/"+cluster.Name)
			g.Expect(out).To(ContainSubstring("Node %s is kept", node))
			g.Expect(out).To(ContainSubstring("node group:     MachineDeployment workers"))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
	})
}
