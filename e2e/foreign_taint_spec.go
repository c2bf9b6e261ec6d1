//go:build e2e

package e2e

import (
	"context"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ForeignTaintSpecInput is the input of ForeignTaintSpec.
type ForeignTaintSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ForeignTaintSpec puts on a node the deletion taint another cluster
// autoscaler (the upstream one) would put, without this autoscaler's
// annotation: while it is there, the autoscaler must refuse to act
// (ScalingActive False, reason OtherAutoscalerActive, naming the node),
// scale nothing up for the pending pods and leave the taint alone; once it
// is gone, it scales up.
func ForeignTaintSpec(ctx context.Context, inputGetter func() ForeignTaintSpecInput) {
	var input ForeignTaintSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ForeignTaintSpec needs a stack")
	})

	It("refuses to act while another autoscaler's taint is on a node, and leaves it alone", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "foreign-taint")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		md, nodes := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 3})
		node := framework.OnlyNode(nodes)

		By("Tainting " + node + " as the upstream cluster autoscaler does, without this autoscaler's annotation")
		foreign := corev1.Taint{Key: nodefacts.ToBeDeletedTaint, Value: strconv.FormatInt(time.Now().Unix(), 10), Effect: corev1.TaintEffectNoSchedule}
		framework.PatchObject(ctx, workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, false, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, foreign)
		})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Creating two 3-core pods: the tainted node takes neither")
		big := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "big", Replicas: 2,
			Requests: framework.CPURequest("3"), NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		expectForeignTaint := func(g Gomega) {
			current := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: node}, current)).To(Succeed())
			g.Expect(current.Spec.Taints).To(ContainElement(And(HaveField("Key", foreign.Key), HaveField("Value", foreign.Value))),
				"the other autoscaler's taint was removed")
			g.Expect(current.Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
		}
		Eventually(func(g Gomega) {
			current := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: node}, current)).To(Succeed())
			if !slices.ContainsFunc(current.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&foreign) && t.Value == foreign.Value }) {
				StopTrying("the other autoscaler's taint was removed from Node " + node).Now()
			}
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(2))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing the autoscaler refuse to act, naming the node")
		refusing := And(
			HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", autoscalingv1alpha1.OtherAutoscalerActiveReason), HaveField("Message", ContainSubstring(node)))
		Eventually(func(g Gomega) {
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.Conditions).To(ContainElement(refusing))
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.Conditions).To(ContainElement(refusing))
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1), "the autoscaler scaled up while another autoscaler acts")
			expectForeignTaint(g)
		}, 15*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Removing the other autoscaler's taint: one pod fits on the node, the other gets a new one")
		framework.PatchObject(ctx, workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, false, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == foreign.Key })
		})
		framework.WaitForPodsRunning(ctx, workload, big, framework.ScaleUpTimeout)
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(2))
		Eventually(func(g Gomega) {
			g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.Conditions).To(ContainElement(And(
				HaveField("Type", autoscalingv1alpha1.ScalingActiveCondition), HaveField("Status", metav1.ConditionTrue))))
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
