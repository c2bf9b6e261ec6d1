//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// PendingBindingSpecInput is the input of PendingBindingSpec.
type PendingBindingSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

const (
	// heldScheduler is the scheduler of the spec's pod: the spec itself,
	// which binds the pod only when it chooses to.
	heldScheduler = "e2e-held-scheduler"
	// bindingHeldFor is how long the spec holds the binding once the new
	// node is Ready: more than twice the unneededTime of
	// FastClusterAutoscalerSpec.
	bindingHeldFor = 25 * time.Second
)

// PendingBindingSpec grows a group for a pod whose binding is then held
// back for longer than unneededTime after the new node is Ready, as the
// scheduler's backoff, a slow kubelet or a volume still attaching would:
// the node looks empty, but the pod fits there and waits for it. The group
// must go up once and never down while the pod waits, and the pod runs on
// the node once bound. The spec plays the pod's scheduler: it marks the
// pod unschedulable as kube-scheduler would, and binds it late.
func PendingBindingSpec(ctx context.Context, inputGetter func() PendingBindingSpecInput) {
	var input PendingBindingSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "PendingBindingSpec needs a stack")
	})

	It("keeps a new node while the pod it was added for waits to be bound", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "pending-binding")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		md, nodes := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 3})
		first := framework.OnlyNode(nodes)

		By("Filling " + first + " to 75%, and creating a 2-core pod that only the spec schedules")
		framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "big", Replicas: 1,
			Requests:     framework.CPURequest("3"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name, corev1.LabelHostname: first},
		})
		held := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "held", Replicas: 1,
			Requests:     framework.CPURequest("2"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate:       func(template *corev1.PodTemplateSpec) { template.Spec.SchedulerName = heldScheduler },
		})
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			pods := framework.PodsSelected(ctx, g, workload, held.Namespace, held.Spec.Selector)
			g.Expect(pods).To(HaveLen(1))
			pod = pods[0]
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		markUnschedulable(ctx, workload, &pod)

		By("Autoscaling: the group grows by one node for the pod")
		framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		grown := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})
		var added string
		for _, node := range grown {
			if node != first {
				added = node
			}
		}

		By("Holding the pod's binding for " + bindingHeldFor.String() + ": " + added + " looks empty, and must stay")
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: added}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeFalse(), "Node %s is being removed while the pod waits for it", added)
		}, bindingHeldFor, framework.AutoscalerPoll).Should(Succeed())

		By("Binding the pod to " + added + ": it runs there")
		Expect(workload.SubResource("binding").Create(ctx, &pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: added},
		})).To(Succeed())
		running := framework.WaitForPodsRunning(ctx, workload, held, framework.ScaleUpTimeout)
		Expect(running[0].Spec.NodeName).To(Equal(added))
		Expect(framework.FormatTrajectory(invariants.Replicas(md))).To(Equal("1→2"), "the group went up once, and never down")
		invariants.ExpectNoViolations()
	})
}

// markUnschedulable sets the PodScheduled condition of a pod to False,
// reason Unschedulable, as kube-scheduler does for a pod no node takes.
func markUnschedulable(ctx context.Context, workload client.Client, pod *corev1.Pod) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 Insufficient cpu.", LastTransitionTime: metav1.Now(),
		})
		g.Expect(workload.Status().Update(ctx, pod)).To(Succeed())
	}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
}
