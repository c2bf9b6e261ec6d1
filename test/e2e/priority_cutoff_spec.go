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

	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// PriorityCutoffSpecInput is the input of PriorityCutoffSpec.
type PriorityCutoffSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "priority")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })

		By("Creating a priority class below the cutoff (-5) and one above it (10) that never preempts")
		low := createPriorityClass(workload, namespace.Name+"-low", -5)
		normal := createPriorityClass(workload, namespace.Name+"-normal", 10)

		md := CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Replicas:    ptr.To[int32](1),
			Annotations: SizeAnnotations(1, 5),
			Machine:     SimMachine("2"),
			Labels:      map[string]string{ClusterLabel: cluster.Name},
		})
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})

		By("Turning autoscaling on with podPriorityThreshold 0")
		spec := FastClusterAutoscalerSpec(cluster.Name)
		spec.PodPriorityThreshold = ptr.To[int32](0)
		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Running 3 low priority pods of 1.5 cores: one fits, two stay pending")
		lowApp := CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "low", Replicas: 3,
			Requests:          CPURequest("1500m"),
			NodeSelector:      map[string]string{ClusterLabel: cluster.Name},
			PriorityClassName: low.Name,
		})
		Eventually(func(g Gomega) {
			g.Expect(PendingPods(g, workload, namespace.Name)).To(Equal(2))
			pods := PodsOf(g, workload, lowApp)
			g.Expect(pods).To(HaveLen(3))
			for _, pod := range pods {
				g.Expect(pod.Spec.PriorityClassName).To(Equal(low.Name))
			}
		}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed())

		By("Seeing no scale-up over several loops")
		Consistently(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(1))
			g.Expect(PodEvents(g, workload, namespace.Name, "TriggeredScaleUp")).To(BeEmpty())
		}, 20*time.Second, AutoscalerPoll).Should(Succeed())
		Expect(GetClusterAutoscaler(Default, mgmt, ca).Status.LastScaleUpTime).To(BeNil())

		By("Running a pod of priority 10 that needs a node of its own")
		normalApp := CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "normal", Replicas: 1,
			Requests:          CPURequest("1500m"),
			NodeSelector:      map[string]string{ClusterLabel: cluster.Name},
			PriorityClassName: normal.Name,
		})

		By("Seeing exactly one node added, for it")
		Eventually(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(2))
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
		WaitForPodsRunning(ctx, workload, normalApp, ScaleUpTimeout)
		Consistently(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(2))
			g.Expect(PendingPods(g, workload, namespace.Name)).To(Equal(2), "the low priority pods stay pending")
		}, 15*time.Second, AutoscalerPoll).Should(Succeed())
		triggered := PodEvents(Default, workload, namespace.Name, "TriggeredScaleUp")
		for _, pod := range PodsOf(Default, workload, lowApp) {
			Expect(triggered).NotTo(HaveKey(pod.Name), "low priority pod %s triggered a scale-up", pod.Name)
		}

		DeleteClusterAutoscaler(mgmt, ca)
	})
}

// createPriorityClass creates a PriorityClass that never preempts, and
// deletes it after the spec.
func createPriorityClass(workload client.Client, name string, value int32) *schedulingv1.PriorityClass {
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
