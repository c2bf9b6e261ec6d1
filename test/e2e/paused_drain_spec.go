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
	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// PausedDrainSpecInput is the input of PausedDrainSpec.
type PausedDrainSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "paused")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })
		invariants := WatchInvariants(ctx, WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		drain := StartHeldDrain(ctx, StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster})
		md, ca := drain.Group, drain.ClusterAutoscaler

		By("Pausing the Cluster in the middle of the drain")
		setClusterPaused(mgmt, cluster, true)
		DeferCleanup(func() { setClusterPaused(mgmt, cluster, false) })
		pausedAt := time.Now()

		By("Seeing " + drain.Drained + " given back within seconds")
		expectReleased := func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, node)).To(Succeed())
			g.Expect(HasDeletionTaint(node)).To(BeFalse(), "Node %s still has the deletion taint", drain.Drained)
			g.Expect(node.Spec.Unschedulable).To(BeFalse(), "Node %s is still cordoned", drain.Drained)
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.CordonedAnnotation))
		}
		Eventually(expectReleased, ReleaseTimeout, AutoscalerPoll).Should(Succeed())
		AddReportEntry("node given back after the pause", time.Since(pausedAt).Round(time.Second).String())
		Eventually(func(g Gomega) {
			events := ObjectEvents(g, workload, metav1.NamespaceDefault, "Node", drain.Drained, scaledown.EventReasonScaleDownCancelled)
			g.Expect(EventMessages(events)).To(ContainElement(ContainSubstring("the autoscaler stopped autoscaling the cluster")))
		}, ReleaseTimeout, AutoscalerPoll).Should(Succeed(), "the node's event says why it was given back")

		By("Seeing the autoscaler leave the paused Cluster alone")
		Eventually(func(g Gomega) {
			g.Expect(GetClusterAutoscaler(g, mgmt, ca).Status.Conditions).To(ContainElement(And(
				HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionFalse),
				HaveField("Reason", autoscalingv1alpha1.ClusterPausedReason))))
		}, ReleaseTimeout, AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			expectReleased(g)
			g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(2))
			for _, m := range MachinesOf(g, mgmt, md) {
				g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s", m.Name)
			}
		}, 10*time.Second, AutoscalerPoll).Should(Succeed())

		By("Letting the evicted pod go, and unpausing the Cluster")
		drain.LetGo(workload)
		Eventually(func() error {
			return workload.Get(ctx, client.ObjectKeyFromObject(drain.Held), &corev1.Pod{})
		}, DeletionTimeout, AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))
		setClusterPaused(mgmt, cluster, false)

		By("Seeing autoscaling resume: ScalingActive True, and the empty node removed")
		Eventually(func(g Gomega) {
			g.Expect(GetClusterAutoscaler(g, mgmt, ca).Status.Conditions).To(ContainElement(And(
				HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionTrue))))
		}, ReleaseTimeout, AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(1))
			err := workload.Get(ctx, client.ObjectKey{Name: drain.Drained}, &corev1.Node{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s", drain.Drained)
			g.Expect(MachinesOf(g, mgmt, md)).To(HaveLen(1))
		}, ScaleDownTimeout, AutoscalerPoll).Should(Succeed())
		expectReplacementRunning(workload, drain.Small, drain.Kept)

		ExpectNothingLeftBehind(ctx, ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		DeleteClusterAutoscaler(mgmt, ca)
	})
}

// setClusterPaused sets the Cluster's spec.paused.
func setClusterPaused(mgmt client.Client, cluster *clusterv1.Cluster, paused bool) {
	GinkgoHelper()
	patchObject(mgmt, cluster.DeepCopy(), true, func(current *clusterv1.Cluster) {
		current.Spec.Paused = ptr.To(paused)
	})
}
