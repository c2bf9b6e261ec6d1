//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// RemediationDuringScaleDownSpecInput is the input of
// RemediationDuringScaleDownSpec.
type RemediationDuringScaleDownSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

const (
	// remediationNodeDeletionTimeout is the nodeDeletionTimeout of the spec.
	remediationNodeDeletionTimeout = 20 * time.Second
	// slowInfrastructureHook holds a Machine's deletion after its drain,
	// as an infrastructure provider slow to delete its VM would.
	slowInfrastructureHook = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/e2e-slow-infrastructure"
)

// RemediationDuringScaleDownSpec lets a MachineHealthCheck remediate a
// Machine of a group while the autoscaler drains another node of the same
// group, and holds the remediated Machine's deletion (a pre-terminate
// hook) until the autoscaler has finished its drain. Lowering the replicas
// now would let Cluster API count the Machine being remediated as the one
// to remove and keep the marked one, so the autoscaler gives the node back
// as a removal that no longer holds (ScaleDownCancelled, not a failure that
// delays every scale-down), and removes it later as any other empty node.
// If it lowered the replicas in the instant before the remediation, it
// gives the node back after nodeDeletionTimeout (NodeNotDeleted). Either
// way no node stays tainted, and only the remediated Machine may go
// without the autoscaler's mark.
func RemediationDuringScaleDownSpec(ctx context.Context, inputGetter func() RemediationDuringScaleDownSpecInput) {
	var input RemediationDuringScaleDownSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "RemediationDuringScaleDownSpec needs a stack")
	})

	It("removes the drained node once the remediated Machine is gone, and strands nothing", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "remediation")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, AcceptRemediation: true})

		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScaleDown.NodeDeletionTimeout = &metav1.Duration{Duration: remediationNodeDeletionTimeout}
		drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster, Spare: 1, Spec: &spec})
		md := drain.Group
		remediated, kept := machineOfNode(drain.Nodes, drain.Spare[0]), machineOfNode(drain.Nodes, drain.Kept)

		By("Remediating Machine " + remediated + " with a MachineHealthCheck, its deletion held after its drain")
		Expect(mgmt.Create(ctx, &clusterv1.MachineHealthCheck{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: md.Name},
			Spec: clusterv1.MachineHealthCheckSpec{
				ClusterName: cluster.Name,
				Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}},
			},
		})).To(Succeed())
		machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: remediated}}
		framework.PatchObject(ctx, mgmt, machine, false, func(m *clusterv1.Machine) {
			framework.SetOrDelete(&m.Annotations, slowInfrastructureHook, "e2e")
			framework.SetOrDelete(&m.Annotations, clusterv1.RemediateMachineAnnotation, "true")
		})
		DeferCleanup(func() {
			framework.PatchObject(ctx, mgmt, machine, true, func(m *clusterv1.Machine) { framework.SetOrDelete(&m.Annotations, slowInfrastructureHook, "") })
		})
		Eventually(func(g Gomega) {
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(machine), machine)).To(Succeed())
			g.Expect(machine.DeletionTimestamp).NotTo(BeNil(), "Machine %s is not being remediated", remediated)
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Letting the drain of " + drain.Drained + " finish while " + remediated + " is still being deleted")
		drain.LetGo(ctx, workload)
		handedOver := func(g Gomega) bool { return framework.Replicas(ctx, g, mgmt, md) == 2 }
		refused := func(g Gomega) bool {
			return len(framework.ObjectEvents(ctx, g, workload, metav1.NamespaceDefault, "Node", drain.Drained, scaledown.EventReasonScaleDownCancelled)) > 0
		}
		Eventually(func(g Gomega) bool { return handedOver(g) || refused(g) }, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(BeTrue(),
			"the autoscaler neither lowered the replicas nor gave %s back", drain.Drained)
		if handedOver(Default) {
			AddReportEntry("scale-down", "replicas lowered while "+remediated+" was being deleted")
			By("Seeing " + drain.Drained + " given back after nodeDeletionTimeout, with a NodeNotDeleted event")
			Eventually(func(g Gomega) {
				node := &corev1.Node{}
				g.Expect(workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, node)).To(Succeed())
				g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s keeps the deletion taint", drain.Drained)
				g.Expect(framework.ObjectEvents(ctx, g, mgmt, md.Namespace, "MachineDeployment", md.Name, autoscaler.EventNodeNotDeleted)).NotTo(BeEmpty())
			}, remediationNodeDeletionTimeout+framework.ReleaseTimeout+10*time.Second, framework.AutoscalerPoll).Should(Succeed())
		} else {
			AddReportEntry("scale-down", "refused while "+remediated+" was being deleted")
			By("Seeing " + drain.Drained + " given back untainted, as a removal that no longer holds, not a failure")
			node := &corev1.Node{}
			Expect(workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, node)).To(Succeed())
			Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s keeps the deletion taint", drain.Drained)
			Expect(framework.ObjectEvents(ctx, Default, workload, metav1.NamespaceDefault, "Node", drain.Drained, scaledown.EventReasonScaleDownFailed)).To(BeEmpty(),
				"a remediation in progress is no failure of the scale-down")
		}

		By("Letting " + remediated + " go: the autoscaler removes the empty " + drain.Drained + " in a scale-down of its own")
		framework.PatchObject(ctx, mgmt, machine, true, func(m *clusterv1.Machine) { framework.SetOrDelete(&m.Annotations, slowInfrastructureHook, "") })
		Eventually(func(g Gomega) {
			machines := framework.MachinesOf(ctx, g, mgmt, md)
			g.Expect(machines).To(HaveLen(1), "the group's Machines")
			g.Expect(machines[0].Name).To(Equal(kept))
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
		}, remediationNodeDeletionTimeout+framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(invariants.Accepted(framework.DeletedByRemediation)).To(ConsistOf(remediated))

		framework.DeleteClusterAutoscaler(ctx, mgmt, drain.ClusterAutoscaler)
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
	})
}

// machineOfNode is the name of the Machine of node in nodes, the names of
// Nodes by Machine name.
func machineOfNode(nodes map[string]string, node string) string {
	for machine, n := range nodes {
		if n == node {
			return machine
		}
	}
	return ""
}
