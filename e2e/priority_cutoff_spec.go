//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// PriorityCutoffSpecInput is the input of PriorityCutoffSpec.
type PriorityCutoffSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// PriorityCutoffSpec shows podPriorityThreshold: pending pods below it never
// scale the cluster up, pending pods at or above it do.
func PriorityCutoffSpec(ctx context.Context, inputGetter func() PriorityCutoffSpecInput) {
	var input PriorityCutoffSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "PriorityCutoffSpec needs a stack")
	})

	It("scales up for pods at the priority cutoff but never for pods below it", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "priority")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating a priority class below the cutoff (-5) and one above it (10) that never preempts")
		low := createPriorityClass(ctx, workload, namespace.Name+"-low", -5)
		normal := createPriorityClass(ctx, workload, namespace.Name+"-normal", 10)

		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](1),
			Annotations: framework.SizeAnnotations(1, 5),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		By("Turning autoscaling on with podPriorityThreshold 0")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.PodPriorityThreshold = ptr.To[int32](0)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Running 3 low priority pods of 1.5 cores: one fits, two stay pending")
		lowApp := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "low", Replicas: 3,
			Requests:          framework.CPURequest("1500m"),
			NodeSelector:      map[string]string{framework.ClusterLabel: cluster.Name},
			PriorityClassName: low.Name,
		})
		Eventually(func(g Gomega) {
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(2))
			pods := framework.PodsOf(ctx, g, workload, lowApp)
			g.Expect(pods).To(HaveLen(3))
			for _, pod := range pods {
				g.Expect(pod.Spec.PriorityClassName).To(Equal(low.Name))
			}
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing no scale-up over several loops")
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
			g.Expect(framework.PodEvents(ctx, g, workload, namespace.Name, "TriggeredScaleUp")).To(BeEmpty())
		}, 20*time.Second, framework.AutoscalerPoll).Should(Succeed())
		Expect(framework.GetClusterAutoscaler(ctx, Default, mgmt, ca).Status.LastScaleUpTime).To(BeNil())

		By("Running a pod of priority 10 that needs a node of its own")
		normalApp := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "normal", Replicas: 1,
			Requests:          framework.CPURequest("1500m"),
			NodeSelector:      map[string]string{framework.ClusterLabel: cluster.Name},
			PriorityClassName: normal.Name,
		})

		By("Seeing exactly one node added, for it")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForPodsRunning(ctx, workload, normalApp, framework.ScaleUpTimeout)
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2))
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(2), "the low priority pods stay pending")
		}, 15*time.Second, framework.AutoscalerPoll).Should(Succeed())
		triggered := framework.PodEvents(ctx, Default, workload, namespace.Name, "TriggeredScaleUp")
		for _, pod := range framework.PodsOf(ctx, Default, workload, lowApp) {
			Expect(triggered).NotTo(HaveKey(pod.Name), "low priority pod %s triggered a scale-up", pod.Name)
		}

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// createPriorityClass creates a PriorityClass that never preempts, and
// deletes it after the spec.
func createPriorityClass(ctx context.Context, workload client.Client, name string, value int32) *schedulingv1.PriorityClass {
	GinkgoHelper()
	pc := &schedulingv1.PriorityClass{
		ObjectMeta:       metav1.ObjectMeta{Name: name},
		Value:            value,
		PreemptionPolicy: ptr.To(corev1.PreemptNever),
	}
	Expect(workload.Create(ctx, pc)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(workload.Delete(ctx, pc))).To(Succeed())
	})
	return pc
}
