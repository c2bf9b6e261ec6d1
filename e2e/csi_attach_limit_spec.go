//go:build e2e

package e2e

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// CSIAttachLimitSpecInput is the input of CSIAttachLimitSpec.
type CSIAttachLimitSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// attachDriver is the CSI driver of the attach limit specs; its Nodes can
// attach attachLimit of its volumes.
const (
	attachDriver = "attach.csi.example.com"
	attachLimit  = 2
)

// CSIAttachLimitSpec shows a node group growing for pods whose volumes
// exceed what one Node can attach, although their cpu would fit on one
// Node: 4 pods with a volume each, on 4-core Nodes that attach 2 volumes of
// the driver, need exactly 2 Nodes. The limit comes from the group's
// csi-driver annotation when it has no Node, or from the CSINode of its
// Node.
func CSIAttachLimitSpec(ctx context.Context, inputGetter func() CSIAttachLimitSpecInput) {
	var (
		input     CSIAttachLimitSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
		cluster   *clusterv1.Cluster
		machine   infrav1.SimMachineSpec
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "CSIAttachLimitSpec needs a stack")
		mgmt, workload = input.Stack.Management.Client, input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "csi-attach")
		cluster = framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Registering the CSI driver on every Node of the Cluster, which registers with a startup taint until then")
		startupTaint := nodefacts.StartupTaintPrefix + "csi-driver"
		machine = framework.SimMachine("4")
		machine.NodeTaints = []corev1.Taint{{Key: startupTaint, Effect: corev1.TaintEffectNoSchedule}}
		framework.StartCSIDriverRegistrar(ctx, framework.CSIDriverRegistrarInput{
			Client: workload, NodeLabels: map[string]string{framework.ClusterLabel: cluster.Name},
			Driver: attachDriver, Allocatable: attachLimit, StartupTaint: startupTaint,
		})
	})

	// expectAttachLimitScaleUp runs 4 pods of 100m with a volume of the
	// driver each and checks that md, at size nodes, grows to exactly 2
	// Nodes in one scale-up, with no more pods on a Node than it can attach
	// volumes.
	expectAttachLimitScaleUp := func(md *clusterv1.MachineDeployment, size int32) {
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("Binding the claims of a 4-replica StatefulSet to volumes of the driver")
		const replicas = 4
		framework.CreateBoundClaims(ctx, framework.CreateBoundClaimsInput{
			Client: workload, Namespace: namespace.Name, Claims: framework.StatefulSetClaims("data", "app", replicas), Driver: attachDriver,
		})
		By("Running it with pods of 100m: their cpu fits on one Node, their volumes need two")
		app := framework.CreateStatefulSet(ctx, framework.StatefulSetInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: replicas, ClaimTemplate: "data",
			Requests:     framework.CPURequest("100m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		// All pending before autoscaling is on, so that one loop sees them
		// all.
		Eventually(func(g Gomega) {
			g.Expect(framework.StatefulSetPods(ctx, g, workload, app)).To(HaveLen(replicas))
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(replicas - attachLimit*int(size)))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Seeing the group grow to 2 Nodes at once, and every pod Running")
		Eventually(func(g Gomega) {
			current := framework.Replicas(ctx, g, mgmt, md)
			if current != size && current != 2 {
				StopTrying(fmt.Sprintf("the group grew from %d to %d, not to 2", size, current)).Now()
			}
			g.Expect(current).To(BeEquivalentTo(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		nodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})
		perNode := map[string]int{}
		for _, pod := range framework.WaitForStatefulSetPodsRunning(ctx, workload, app, framework.ScaleUpTimeout) {
			perNode[pod.Spec.NodeName]++
		}
		Expect(perNode).To(HaveLen(len(nodes)), "pods per Node")
		for node, pods := range perNode {
			Expect(nodes).To(ContainElement(node))
			Expect(pods).To(BeNumerically("<=", attachLimit), "pods on %s: %v", node, perNode)
		}
		framework.ExpectReplicasTrajectory(invariants.Replicas(md), size, 2)
		invariants.ExpectNoViolations()

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
		framework.DeleteStatefulSet(ctx, workload, app)
	}

	It("grows a group from zero by the attach limit of its csi-driver annotation", func() {
		By("Creating a node group of 4-core machines at 0, 0 to 4, whose annotation says they attach 2 volumes of the driver")
		annotations := framework.SizeAnnotations(0, 4)
		annotations[template.CSIDriverAnnotation] = fmt.Sprintf("%s=%d", attachDriver, attachLimit)
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](0),
			Annotations: annotations, Machine: machine,
			Labels: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForTemplateCapacity(ctx, mgmt, md)

		expectAttachLimitScaleUp(md, 0)
	})

	It("grows a group by the attach limit its Node's CSINode reports", func() {
		By("Creating a node group of one 4-core machine, 1 to 4, whose CSINode says it attaches 2 volumes of the driver")
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 4), Machine: machine,
			Labels: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		expectAttachLimitScaleUp(md, 1)
	})
}
