//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// CapacityBufferSpecInput is the input of CapacityBufferSpec.
type CapacityBufferSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// CapacityBufferSpec shows a CapacityBuffer keeping a node's worth of room
// ahead of demand: a burst of pods of the buffer's shape starts on it at
// once instead of waiting for a Machine to boot, and the buffer gets its
// room back on a new Machine.
func CapacityBufferSpec(ctx context.Context, inputGetter func() CapacityBufferSpecInput) {
	var (
		input     CapacityBufferSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "CapacityBufferSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "buffer")
	})

	It("starts a burst at once on the room a buffer keeps, and restores the room", func() {
		const bootTime = 5 * time.Second
		By(fmt.Sprintf("Creating a Cluster with a node group of 2-cpu nodes whose Machines take %s to boot", bootTime))
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "buffer", WorkloadKubeconfig: input.WorkloadKubeconfig})
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "1",
				clusterv1.AutoscalerMaxSizeAnnotation: "6",
			},
			Labels:  map[string]string{framework.ClusterLabel: namespace.Name},
			Machine: infrav1.SimMachineSpec{Capacity: capacity, ProvisioningDelay: metav1.Duration{Duration: bootTime}},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		oneCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
		onCluster := map[string]string{framework.ClusterLabel: namespace.Name}
		By("Filling the first node")
		framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "base", Replicas: 2, Requests: oneCPU, NodeSelector: onCluster})

		By("Timing a burst of 2 one-cpu pods without a buffer: they wait for a Machine")
		withoutBuffer := timeBurst(ctx, workload, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "burst-a", Replicas: 2, Requests: oneCPU, NodeSelector: onCluster})
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(2))

		By("Creating a buffer of 2 such pods: a node's worth of room, on a Machine of its own")
		template := &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "one-cpu"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: onCluster, Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{Requests: oneCPU},
			}}}},
		}
		Expect(workload.Create(ctx, template)).To(Succeed())
		buffer := &capacitybufferv1beta1.CapacityBuffer{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "warm"},
			Spec: capacitybufferv1beta1.CapacityBufferSpec{
				PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: template.Name}, Replicas: ptr.To[int32](2),
			},
		}
		Expect(workload.Create(ctx, buffer)).To(Succeed())
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(3))
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 3})
		expectBufferRoom(ctx, mgmt, ca, "warm", autoscalingv1alpha1.CapacityBufferRoom{Replicas: 2, Held: 2})
		Eventually(func(g Gomega) {
			current := &capacitybufferv1beta1.CapacityBuffer{}
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(buffer), current)).To(Succeed())
			g.Expect(current.Status.Replicas).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, capacitybufferv1beta1.ProvisioningCondition)).To(BeTrue())
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, 5*time.Second, framework.AutoscalerPoll).Should(BeEquivalentTo(3),
			"the buffer's room is neither scaled down nor added again")

		By("Timing the same burst with the buffer: it starts at once")
		withBuffer := timeBurst(ctx, workload, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "burst-b", Replicas: 2, Requests: oneCPU, NodeSelector: onCluster})
		AddReportEntry("capacity buffer", fmt.Sprintf("2 one-cpu pods Running %s after creation without a buffer, %s with one (Machines boot in %s)",
			withoutBuffer.Round(100*time.Millisecond), withBuffer.Round(100*time.Millisecond), bootTime))
		Expect(withBuffer).To(BeNumerically("<", bootTime), "the burst waited for a Machine")
		Expect(withoutBuffer).To(BeNumerically(">", bootTime))

		By("Seeing the buffer get its room back on a new Machine")
		Eventually(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(4))
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 4})
		expectBufferRoom(ctx, mgmt, ca, "warm", autoscalingv1alpha1.CapacityBufferRoom{Replicas: 2, Held: 2})
	})
}

// timeBurst creates a workload and returns how long after its creation all
// its pods were Running, polled every 100 ms.
func timeBurst(ctx context.Context, c client.Client, input framework.WorkloadInput) time.Duration {
	GinkgoHelper()
	created := time.Now()
	deployment := framework.CreateWorkload(ctx, input)
	Eventually(func(g Gomega) {
		pods := framework.PodsOf(ctx, g, c, deployment)
		g.Expect(pods).To(HaveLen(int(input.Replicas)))
		for _, pod := range pods {
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		}
	}, framework.ScaleUpTimeout, 100*time.Millisecond).Should(Succeed(), "pods of %s are not all Running", input.Name)
	return time.Since(created)
}

// expectBufferRoom waits until the ClusterAutoscaler's status shows the
// room of a buffer of the spec's namespace as want (its name aside).
func expectBufferRoom(ctx context.Context, mgmt client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, name string, want autoscalingv1alpha1.CapacityBufferRoom) {
	GinkgoHelper()
	want.Name = ca.Namespace + "/" + name
	Eventually(func(g Gomega) {
		g.Expect(framework.GetClusterAutoscaler(ctx, g, mgmt, ca).Status.CapacityBuffers).To(ContainElement(want))
	}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
}
