//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// DeletedNodeSpecInput is the input of DeletedNodeSpec.
type DeletedNodeSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// deletedNodeProvisionTime is the shortest maxNodeProvisionTime allowed.
const deletedNodeProvisionTime = time.Minute

// DeletedNodeSpec deletes the Node of a Machine older than
// maxNodeProvisionTime, as `kubectl delete node` would: the Machine has no
// Node from that moment, and the time it may stay so counts from then, not
// from the Machine's creation. The autoscaler must not delete it for the
// next 30s; then its kubelet registers the Node again and the Machine stays.
//
// The simulated provider creates a Machine's Node again whenever it
// reconciles its SimMachine: the spec tells it not to (spec.provisioning
// NeverRegister) while the Node is away, and to register it again after.
func DeletedNodeSpec(ctx context.Context, inputGetter func() DeletedNodeSpecInput) {
	var input DeletedNodeSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DeletedNodeSpec needs a stack")
	})

	It("does not delete a Machine older than maxNodeProvisionTime as soon as its Node is deleted", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "deleted-node")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		md, nodes := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 2, MaxSize: 3})
		By("Autoscaling with maxNodeProvisionTime 1m, scale-down off: no node goes for being empty")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.MaxNodeProvisionTime = &metav1.Duration{Duration: deletedNodeProvisionTime}
		spec.ScaleDown.Enabled = ptr.To(false)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		var machine clusterv1.Machine
		for _, m := range framework.MachinesOf(ctx, Default, mgmt, md) {
			machine = m
		}
		node := nodes[machine.Name]
		By("Waiting until Machine " + machine.Name + " is older than maxNodeProvisionTime")
		Eventually(func() time.Duration {
			return time.Since(machine.CreationTimestamp.Time)
		}, 2*deletedNodeProvisionTime, framework.AutoscalerPoll).Should(BeNumerically(">", deletedNodeProvisionTime+5*time.Second))

		By("Deleting Node " + node + ", and keeping the provider from creating it again")
		simMachine := &infrav1.SimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: machine.Namespace, Name: machine.Spec.InfrastructureRef.Name}}
		framework.PatchObject(ctx, mgmt, simMachine, false, func(m *infrav1.SimMachine) { m.Spec.Provisioning = infrav1.ProvisioningNeverRegister })
		Expect(workload.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})).To(Succeed())
		Eventually(func() error {
			return workload.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))

		By("Seeing the Machine stay, unmarked, for 30s")
		expectMachineKept := func(g Gomega) {
			m := &clusterv1.Machine{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(&machine), m)).To(Succeed())
			g.Expect(m.DeletionTimestamp).To(BeNil(), "Machine %s is being deleted", m.Name)
			g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s is marked for deletion", m.Name)
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
		}
		Consistently(expectMachineKept, 30*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Letting the kubelet register the Node again: the Machine stays")
		framework.PatchObject(ctx, mgmt, simMachine, false, func(m *infrav1.SimMachine) { m.Spec.Provisioning = infrav1.ProvisioningSucceed })
		Eventually(func(g Gomega) {
			n := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
			g.Expect(nodefacts.KubeletReady(n)).To(BeTrue(), "Node %s", node)
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(expectMachineKept, 5*time.Second, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
