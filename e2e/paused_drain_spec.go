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

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// PausedDrainSpecInput is the input of PausedDrainSpec.
type PausedDrainSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// PausedDrainSpec pauses the Cluster (spec.paused) while the autoscaler
// drains one of its nodes, a drain that cannot finish: the autoscaler must
// give the node back within seconds, taint and cordon, and leave it alone
// while the Cluster is paused; once unpaused, it scales again (ScalingActive
// True) and removes the node, now empty, cleanly.
func PausedDrainSpec(ctx context.Context, inputGetter func() PausedDrainSpecInput) {
	var input PausedDrainSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "PausedDrainSpec needs a stack")
	})

	It("gives the node back while the Cluster is paused and scales again once unpaused", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "paused")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster})
		md, ca := drain.Group, drain.ClusterAutoscaler

		By("Pausing the Cluster in the middle of the drain")
		setClusterPaused(ctx, mgmt, cluster, true)
		DeferCleanup(func() { setClusterPaused(ctx, mgmt, cluster, false) })
		pausedAt := time.Now()

		By("Seeing " + drain.Drained + " given back within seconds")
		expectReleased := func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s still has the deletion taint", drain.Drained)
			g.Expect(node.Spec.Unschedulable).To(BeFalse(), "Node %s is still cordoned", drain.Drained)
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.CordonedAnnotation))
		}
		Eventually(expectReleased, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		AddReportEntry("node given back after the pause", time.Since(pausedAt).Round(time.Second).String())
		Eventually(func(g Gomega) {
			events := framework.ObjectEvents(ctx, g, workload, metav1.NamespaceDefault, "Node", drain.Drained, scaledown.EventReasonScaleDownCancelled)
			g.Expect(framework.EventMessages(events)).To(ContainElement(ContainSubstring("the autoscaler stopped autoscaling the cluster")))
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed(), "the node's event says why it was given back")

		By("Seeing the autoscaler leave the paused Cluster alone")
		Eventually(func(g Gomega) {
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.Conditions).To(ContainElement(And(
				HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", autoscalingv1alpha1.ClusterPausedReason))))
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			expectReleased(g)
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
			for _, m := range framework.MachinesOf(ctx, g, mgmt, md) {
				g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s", m.Name)
			}
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Letting the evicted pod go, and unpausing the Cluster")
		drain.LetGo(ctx, workload)
		Eventually(func() error {
			return workload.Get(ctx, client.ObjectKeyFromObject(drain.Held), &corev1.Pod{})
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))
		setClusterPaused(ctx, mgmt, cluster, false)

		By("Seeing autoscaling resume: ScalingActive True, and the empty node removed")
		Eventually(func(g Gomega) {
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.Conditions).To(ContainElement(And(
				HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionTrue))))
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
			err := workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, &corev1.Node{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s", drain.Drained)
			g.Expect(framework.MachinesOf(ctx, g, mgmt, md)).To(HaveLen(1))
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.ExpectReplacementRunning(ctx, workload, drain.Small, drain.Kept)

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// setClusterPaused sets the Cluster's spec.paused.
func setClusterPaused(ctx context.Context, mgmt client.Client, cluster *clusterv1.Cluster, paused bool) {
	GinkgoHelper()
	framework.PatchObject(ctx, mgmt, cluster.DeepCopy(), true, func(current *clusterv1.Cluster) {
		current.Spec.Paused = ptr.To(paused)
	})
}
