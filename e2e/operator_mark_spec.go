//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// OperatorMarkSpecInput is the input of OperatorMarkSpec.
type OperatorMarkSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager is the running autoscaler manager; the spec kills it.
	Manager *localstack.Process

	// ManagerArgs are the arguments the spec starts the manager's binary
	// again with.
	ManagerArgs []string

	// Restarted is told about the manager the spec started in place of
	// Manager, which it leaves running.
	Restarted func(*localstack.Process)
}

// OperatorMarkSpec marks a Machine for deletion as an operator would (only
// cluster.x-k8s.io/delete-machine, so that the next scale-down of its
// MachineDeployment takes it) and restarts the manager: the restarted
// manager looks for marks left by a drain its predecessor had under way,
// and must leave this one, which is not its own, where it is.
//
// It kills and restarts the suite's manager: run it serially.
func OperatorMarkSpec(ctx context.Context, inputGetter func() OperatorMarkSpecInput) {
	var input OperatorMarkSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "OperatorMarkSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "OperatorMarkSpec needs the running manager")
		Expect(input.Restarted).NotTo(BeNil(), "OperatorMarkSpec needs to tell about the restarted manager")
	})

	It("keeps an operator's delete-machine mark across a manager restart", func() {
		mgmt := input.Stack.Management.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "operator-mark")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("Creating a group of two nodes at its min size: the autoscaler has no reason to remove either")
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](2),
			Annotations: framework.SizeAnnotations(2, 3),
			Machine:     framework.SimMachine("4"),
			Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: input.Stack.Workload.Client, Group: md, Count: 2})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		marked := framework.MachinesOf(ctx, Default, mgmt, md)[0]
		By("Marking Machine " + marked.Name + " for deletion as an operator would: " + clusterv1.DeleteMachineAnnotation + " only")
		framework.PatchObject(ctx, mgmt, marked.DeepCopy(), false, func(m *clusterv1.Machine) {
			framework.SetOrDelete(&m.Annotations, clusterv1.DeleteMachineAnnotation, "operator")
		})
		expectMarkKept := func(g Gomega) {
			m := &clusterv1.Machine{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(&marked), m)).To(Succeed())
			g.Expect(m.Annotations).To(HaveKeyWithValue(clusterv1.DeleteMachineAnnotation, "operator"), "the operator's mark of Machine %s was removed", m.Name)
			g.Expect(m.Annotations).NotTo(HaveKey(scalable.MarkedAnnotation))
			g.Expect(m.DeletionTimestamp).To(BeNil())
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
		}
		Consistently(expectMarkKept, 5*time.Second, framework.AutoscalerPoll).Should(Succeed())

		manager := input.Manager
		restart := framework.PrepareManagerRestart(ctx, framework.ManagerRestartInput{Stack: input.Stack, Manager: manager, Args: input.ManagerArgs, Restarted: input.Restarted})

		By("Killing and restarting the manager")
		Expect(manager.Kill()).To(Succeed())
		Expect(manager.Exited()).To(BeClosed())
		restartedAt := time.Now()
		restart()

		By("Waiting until the restarted manager runs its loop, and seeing the mark stay")
		// The restarted engine writes the time of its first loop; should
		// that loop start within 2s of the restart, lastLoopTime moves
		// again with the status's refresh, at most a minute later.
		Eventually(func(g Gomega) {
			last := framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.LastLoopTime
			g.Expect(last).NotTo(BeNil())
			g.Expect(last.Time).To(BeTemporally(">", restartedAt.Add(2*time.Second)), "the restarted manager has not run a loop yet")
		}, framework.ClusterReadyTimeout+time.Minute, framework.AutoscalerPoll).Should(Succeed())
		Consistently(expectMarkKept, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
