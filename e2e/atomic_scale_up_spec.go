//go:build e2e

package e2e

import (
	"context"
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

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// AtomicScaleUpSpecInput is the input of AtomicScaleUpSpec.
type AtomicScaleUpSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// AtomicScaleUpSpec shows best-effort-atomic-scale-up ProvisioningRequests
// on Cluster API: all the nodes of a request, or none of them.
func AtomicScaleUpSpec(ctx context.Context, inputGetter func() AtomicScaleUpSpecInput) {
	var (
		input     AtomicScaleUpSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)
	twoCPUs := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
	}
	// createRequest creates a PodTemplate of one-cpu pods and an atomic
	// request for count of them.
	createRequest := func(name string, count int32) *provisioningv1.ProvisioningRequest {
		GinkgoHelper()
		Expect(workload.Create(ctx, &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: name},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
				Containers: []corev1.Container{{Name: "worker", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				}}},
			}},
		})).To(Succeed())
		request := &provisioningv1.ProvisioningRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: name},
			Spec: provisioningv1.ProvisioningRequestSpec{
				ProvisioningClassName: provisioningv1.BestEffortAtomicScaleUpProvisioningClass,
				PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: name}, Count: count}},
			},
		}
		Expect(workload.Create(ctx, request)).To(Succeed())
		return request
	}

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "AtomicScaleUpSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "atomic")
	})

	It("removes every Machine of the request from both groups when one group's Machines fail", func() {
		By("Creating a healthy group of at most 2 nodes, preferred, and a failing one, both at 0")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "rollback", WorkloadKubeconfig: input.WorkloadKubeconfig})
		bounds := map[string]string{clusterv1.AutoscalerMinSizeAnnotation: "0", clusterv1.AutoscalerMaxSizeAnnotation: "2"}
		labels := map[string]string{framework.ClusterLabel: namespace.Name}
		healthy := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "healthy", Replicas: ptr.To[int32](0), Annotations: bounds, Labels: labels,
			Machine: infrav1.SimMachineSpec{Capacity: twoCPUs},
		})
		failing := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "failing", Replicas: ptr.To[int32](0), Annotations: bounds, Labels: labels,
			Machine: infrav1.SimMachineSpec{Capacity: twoCPUs, Provisioning: infrav1.ProvisioningFail},
		})
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{
			{Priority: 100, NodeGroupIDPatterns: []string{"/healthy$"}},
			{Priority: 10, NodeGroupIDPatterns: []string{"/failing$"}},
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Asking for 6 one-cpu pods at once: 2 nodes of the healthy group, 1 of the failing one")
		request := createRequest("job", 6)

		By("Seeing the request fail and both groups back where they began")
		Eventually(func(g Gomega) {
			current := &provisioningv1.ProvisioningRequest{}
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(request), current)).To(Succeed())
			failed := meta.FindStatusCondition(current.Status.Conditions, provisioningv1.FailedCondition)
			g.Expect(failed).NotTo(BeNil())
			g.Expect(failed.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(failed.Reason).To(Equal(provisioningv1.ScaleUpFailedReason))
			g.Expect(failed.Message).To(ContainSubstring(failing.Name), "the failing group's Machine is the cause")
			g.Expect(current.Status.ProvisioningClassDetails).NotTo(HaveKey(provisioningv1.ScaleUpDetail))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, healthy)).To(BeZero())
			g.Expect(framework.Replicas(ctx, g, mgmt, failing)).To(BeZero())
			g.Expect(framework.MachinesOf(ctx, g, mgmt, healthy)).To(BeEmpty())
			g.Expect(framework.MachinesOf(ctx, g, mgmt, failing)).To(BeEmpty())
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed())
		replicasOf := func(md *clusterv1.MachineDeployment) []int32 {
			var replicas []int32
			for _, seen := range invariants.Replicas(md) {
				replicas = append(replicas, seen.Replicas)
			}
			return replicas
		}
		Expect(replicasOf(healthy)).To(ContainElement(BeEquivalentTo(2)), "the healthy group was raised to 2")
		Expect(replicasOf(failing)).To(ContainElement(BeEquivalentTo(1)), "the failing group was raised to 1")
		invariants.ExpectNoViolations()

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})

	It("provisions all the nodes of the request, and its pods consume them", func() {
		By("Creating a group at 0, at most 3 nodes")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "atomic", WorkloadKubeconfig: input.WorkloadKubeconfig})
		labels := map[string]string{framework.ClusterLabel: namespace.Name}
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](0), Labels: labels,
			Annotations: map[string]string{clusterv1.AutoscalerMinSizeAnnotation: "0", clusterv1.AutoscalerMaxSizeAnnotation: "3"},
			Machine:     infrav1.SimMachineSpec{Capacity: twoCPUs},
		})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Asking for 4 one-cpu pods at once, and seeing it provisioned once its 2 nodes are up")
		request := createRequest("job", 4)
		framework.ExpectProvisioned(ctx, workload, request, metav1.ConditionTrue, provisioningv1.CapacityIsProvisionedReason)
		nodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})

		By("Creating the 4 pods, which consume the request, and seeing them run on its nodes without another scale-up")
		job := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "job", Replicas: 4,
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}, NodeSelector: labels,
			Mutate: func(template *corev1.PodTemplateSpec) {
				template.Annotations = map[string]string{provisioningv1.ConsumeProvisioningRequestAnnotation: request.Name}
			},
		})
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, job, framework.ScaleUpTimeout) {
			Expect(nodes).To(ContainElement(pod.Spec.NodeName), "pod %s", pod.Name)
		}
		Consistently(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, 5*time.Second, framework.AutoscalerPoll).Should(BeEquivalentTo(2))

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
