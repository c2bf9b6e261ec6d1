//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// RolloutDuringDrainSpecInput is the input of RolloutDuringDrainSpec.
type RolloutDuringDrainSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// RolloutDuringDrainSpec starts a rollout of a MachineDeployment while the
// autoscaler drains one of its nodes, a drain that cannot finish yet, and
// then lets the drain finish: the autoscaler must give the node back
// (taint removed, a ScaleDownCancelled event) and never lower the
// replicas while the MachineDeployment rolls out, and no Machine may go
// that neither it nor the rollout chose.
//
// The drain is held by a finalizer on the evicted pod rather than by a
// PodDisruptionBudget that refuses the eviction: the autoscaler only
// chooses nodes whose budgets allow the eviction, and a budget that turns
// against it between its taint and its eviction, written in the same loop,
// would be a race.
func RolloutDuringDrainSpec(ctx context.Context, inputGetter func() RolloutDuringDrainSpecInput) {
	var input RolloutDuringDrainSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "RolloutDuringDrainSpec needs a stack")
	})

	It("gives the node back and keeps the replicas while the group rolls out", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "rollout")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, AcceptRollouts: true})

		drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster})
		md := drain.Group

		oldMachines := map[string]bool{}
		for _, m := range framework.MachinesOf(ctx, Default, mgmt, md) {
			oldMachines[m.Name] = true
		}

		By("Rolling the MachineDeployment out: a new machine template")
		// Labels and annotations of the template are propagated in place
		// by Cluster API, without a rollout: a new infrastructure template
		// is what rolls Machines out.
		template := &infrav1.SimMachineTemplate{}
		Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, template)).To(Succeed())
		Expect(mgmt.Create(ctx, &infrav1.SimMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name + "-v2"},
			Spec:       template.Spec,
		})).To(Succeed())
		framework.PatchObject(ctx, mgmt, md.DeepCopy(), false, func(current *clusterv1.MachineDeployment) {
			current.Spec.Template.Spec.InfrastructureRef.Name = md.Name + "-v2"
			if current.Spec.Template.Labels == nil {
				current.Spec.Template.Labels = map[string]string{}
			}
			current.Spec.Template.Labels["e2e.capi-autoscaler.io/revision"] = "2"
		})
		rolloutStarted := time.Now()

		By("Seeing the autoscaler give " + drain.Drained + " back while the group rolls out")
		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s still has the deletion taint", drain.Drained)
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.CordonedAnnotation))
			g.Expect(framework.ObjectEvents(ctx, g, workload, metav1.NamespaceDefault, "Node", drain.Drained, scaledown.EventReasonScaleDownCancelled)).NotTo(BeEmpty(),
				"no %s event on Node %s", scaledown.EventReasonScaleDownCancelled, drain.Drained)
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		AddReportEntry("node given back after the rollout started", time.Since(rolloutStarted).Round(time.Second).String())

		By("Letting the evicted pod go: the drain could finish now, but must not")
		drain.LetGo(ctx, workload)
		Eventually(func() error {
			return workload.Get(ctx, client.ObjectKeyFromObject(drain.Held), &corev1.Pod{})
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))

		By("Seeing the rollout complete with the replicas at 2 all along, and no node tainted again")
		Eventually(func(g Gomega) {
			if replicas := framework.Replicas(ctx, g, mgmt, md); replicas != 2 {
				StopTrying(fmt.Sprintf("the replicas of %s went to %d during the rollout", md.Name, replicas)).Now()
			}
			for _, node := range framework.ClusterNodes(ctx, g, workload, cluster) {
				if framework.HasDeletionTaint(&node) {
					StopTrying("Node " + node.Name + " is tainted for deletion during the rollout").Now()
				}
			}
			current := &clusterv1.MachineDeployment{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(md), current)).To(Succeed())
			g.Expect(current.Status.ObservedGeneration).To(Equal(current.Generation))
			g.Expect(current.Status.UpToDateReplicas).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(current.Status.Replicas).To(HaveValue(BeEquivalentTo(2)))
			machines := framework.MachinesOf(ctx, g, mgmt, md)
			g.Expect(machines).To(HaveLen(2))
			for _, m := range machines {
				g.Expect(oldMachines).NotTo(HaveKey(m.Name), "Machine %s is not rolled out yet", m.Name)
				g.Expect(m.DeletionTimestamp).To(BeNil(), "Machine %s", m.Name)
			}
		}, 2*framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		rolledOut := time.Now()
		AddReportEntry("rollout", rolledOut.Sub(rolloutStarted).Round(time.Second).String())
		for _, seen := range invariants.Replicas(md) {
			if seen.Seen.After(rolledOut) {
				break
			}
			Expect(seen.Replicas).To(BeEquivalentTo(2), "the replicas changed during the rollout: %s", framework.FormatTrajectory(invariants.Replicas(md)))
		}
		Expect(invariants.Accepted(framework.DeletedByRollout)).To(HaveLen(2), "the rollout did not replace both old Machines: %v", invariants.Accepted(framework.DeletedByRollout))

		framework.DeleteClusterAutoscaler(ctx, mgmt, drain.ClusterAutoscaler)
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
	})
}
