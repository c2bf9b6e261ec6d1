//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// RestartSpecInput is the input of RestartSpec.
type RestartSpecInput struct {
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

// RestartSpec kills the manager (SIGKILL, as a crash would) in the middle
// of a drain and starts it again: the restarted manager must give the node
// back (no deletion taint left, no Machine marked for deletion, no capacity
// lost while the node's pods cannot go), and a later scale-down of the
// node, once its pods are gone, must complete cleanly.
//
// It kills and restarts the suite's manager: run it serially.
func RestartSpec(ctx context.Context, inputGetter func() RestartSpecInput) {
	var input RestartSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "RestartSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "RestartSpec needs the running manager")
		Expect(input.Restarted).NotTo(BeNil(), "RestartSpec needs to tell about the restarted manager")
	})

	It("gives a node back when the manager is killed while draining it", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "restart")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster})
		md, drained, kept, small, held := drain.Group, drain.Drained, drain.Kept, drain.Small, drain.Held

		manager := input.Manager
		restart := framework.PrepareManagerRestart(ctx, framework.ManagerRestartInput{Stack: input.Stack, Manager: manager, Args: input.ManagerArgs, Restarted: input.Restarted})

		By("Killing the manager in the middle of the drain")
		Expect(manager.Kill()).To(Succeed())
		Expect(manager.Exited()).To(BeClosed())
		// The pod cannot go, and the node must not either: mark it so
		// that the restarted manager has no reason of its own to drain it
		// again.
		framework.SetNodeAnnotation(ctx, workload, drained, scaledown.ScaleDownDisabledAnnotation, "true")

		restart()

		By("Seeing the restarted manager undo the drain: the taint goes, the node and its Machine stay")
		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drained}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s still has the deletion taint", drained)
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drained}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s is tainted again", drained)
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
			machines := framework.MachinesOf(ctx, g, mgmt, md)
			g.Expect(machines).To(HaveLen(2))
			for _, m := range machines {
				g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s", m.Name)
				g.Expect(m.DeletionTimestamp).To(BeNil(), "Machine %s", m.Name)
			}
		}, 20*time.Second, framework.AutoscalerPoll).Should(Succeed())
		framework.ExpectReplacementRunning(ctx, workload, small, kept)

		By("Letting the held pod go and allowing scale-down again: the now empty node is removed cleanly")
		drain.LetGo(ctx, workload)
		Eventually(func() error {
			return workload.Get(ctx, client.ObjectKeyFromObject(held), &corev1.Pod{})
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))
		framework.SetNodeAnnotation(ctx, workload, drained, scaledown.ScaleDownDisabledAnnotation, "")
		Eventually(func(g Gomega) {
			err := workload.Get(ctx, client.ObjectKey{Name: drained}, &corev1.Node{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s", drained)
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
			machines := framework.MachinesOf(ctx, g, mgmt, md)
			g.Expect(machines).To(HaveLen(1))
			g.Expect(machines[0].Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: kept}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse())
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForPodsRunning(ctx, workload, small, framework.NodesReadyTimeout)
		framework.ExpectReplacementRunning(ctx, workload, small, kept)

		framework.DeleteClusterAutoscaler(ctx, mgmt, drain.ClusterAutoscaler)
	})
}
