//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// CheckCapacitySpecInput is the input of CheckCapacitySpec.
type CheckCapacitySpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// CheckCapacitySpec shows check-capacity ProvisioningRequests answered from
// the nodes that exist, without a scale-up.
func CheckCapacitySpec(ctx context.Context, inputGetter func() CheckCapacitySpecInput) {
	var (
		input     CheckCapacitySpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "CheckCapacitySpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "check-capacity")
	})

	It("finds the room that exists, books it, and adds no node for what does not fit", func() {
		By("Creating a Cluster with one empty 2-cpu node, at most 4")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "check", WorkloadKubeconfig: input.WorkloadKubeconfig})
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers",
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "1",
				clusterv1.AutoscalerMaxSizeAnnotation: "4",
			},
			Labels: map[string]string{framework.ClusterLabel: namespace.Name},
			Machine: infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
			}},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Asking whether 2 one-cpu pods fit, then 2 more")
		Expect(workload.Create(ctx, &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: "worker"},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
				Containers: []corev1.Container{{Name: "worker", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
				}}},
			}},
		})).To(Succeed())
		request := func(name string) *provisioningv1.ProvisioningRequest {
			return &provisioningv1.ProvisioningRequest{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: name},
				Spec: provisioningv1.ProvisioningRequestSpec{
					ProvisioningClassName: provisioningv1.CheckCapacityProvisioningClass,
					PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: "worker"}, Count: 2}},
				},
			}
		}
		first := request("first")
		Expect(workload.Create(ctx, first)).To(Succeed())
		framework.ExpectProvisioned(ctx, workload, first, metav1.ConditionTrue, provisioningv1.CapacityIsFoundReason)
		second := request("second")
		Expect(workload.Create(ctx, second)).To(Succeed())
		framework.ExpectProvisioned(ctx, workload, second, metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason)

		By("Seeing no scale-up for the room the first booked and the second lacks")
		Consistently(func(g Gomega) int32 { return framework.Replicas(ctx, g, mgmt, md) }, 5*time.Second, framework.AutoscalerPoll).Should(BeEquivalentTo(1))
	})
}
