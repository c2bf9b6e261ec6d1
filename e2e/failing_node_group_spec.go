//go:build e2e

package e2e

import (
	"context"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// FailingNodeGroupSpecInput is the input of FailingNodeGroupSpec.
type FailingNodeGroupSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Kind of the two node groups: scalable.KindMachineDeployment or
	// scalable.KindMachinePool.
	Kind string
}

// FailingNodeGroupSpec shows that a node group whose machines fail to
// provision does not hold pods back for maxNodeProvisionTime: the
// autoscaler prefers it, sees its Machine fail, backs it off, removes the
// failed Machine and serves the pods from a healthy group in the next
// loops. The groups are MachineDeployments or MachinePools, as Kind says.
func FailingNodeGroupSpec(ctx context.Context, inputGetter func() FailingNodeGroupSpecInput) {
	var (
		input     FailingNodeGroupSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "FailingNodeGroupSpec needs a stack")
		Expect(input.Kind).To(BeElementOf(scalable.KindMachineDeployment, scalable.KindMachinePool), "FailingNodeGroupSpec needs the kind of its node groups")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "failing-"+strings.ToLower(input.Kind))
	})

	It("backs the failing node group off and scales the healthy one well before maxNodeProvisionTime", func() {
		By("Creating a Cluster with a failing and a healthy " + input.Kind + " at 0 replicas")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "failing", WorkloadKubeconfig: input.WorkloadKubeconfig})
		// One pod of 1500m cpu fills a machine.
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("2"),
			corev1.ResourceMemory: resource.MustParse("4Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		labels := map[string]string{framework.ClusterLabel: namespace.Name}
		createGroup := func(name string, machine infrav1.SimMachineSpec) client.Object {
			if input.Kind == scalable.KindMachinePool {
				return framework.CreateMachinePool(ctx, framework.CreateMachinePoolInput{
					Client: mgmt, Cluster: cluster, Name: name, Replicas: 0, Annotations: framework.SizeAnnotations(0, 3), Labels: labels, Machine: machine,
				})
			}
			return framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: name, Replicas: ptr.To[int32](0), Annotations: framework.SizeAnnotations(0, 3), Labels: labels, Machine: machine,
			})
		}
		failing := createGroup("failing", infrav1.SimMachineSpec{Capacity: capacity, Provisioning: infrav1.ProvisioningFail})
		healthy := createGroup("healthy", infrav1.SimMachineSpec{Capacity: capacity})

		By("Turning autoscaling on, preferring the failing group, with a long maxNodeProvisionTime and backoff")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		maxNodeProvisionTime := 2 * time.Minute
		spec.MaxNodeProvisionTime = &metav1.Duration{Duration: maxNodeProvisionTime}
		spec.Backoff = &autoscalingv1alpha1.BackoffConfig{Initial: &metav1.Duration{Duration: 5 * time.Minute}}
		spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{
			{Priority: 100, NodeGroupIDPatterns: []string{"/failing$"}},
			{Priority: 10, NodeGroupIDPatterns: []string{"/healthy$"}},
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating 2 pods of 1500m cpu")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: labels,
		})
		podsCreated := time.Now()

		By("Seeing the autoscaler try the failing group first")
		Eventually(func(g Gomega) []clusterv1.Machine {
			return framework.MachinesOf(ctx, g, mgmt, failing)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).ShouldNot(BeEmpty())

		By("Seeing the pods Running on the healthy group's nodes well before maxNodeProvisionTime")
		framework.WaitForPodsRunning(ctx, workload, app, maxNodeProvisionTime/2)
		Expect(time.Since(podsCreated)).To(BeNumerically("<", maxNodeProvisionTime/2))
		healthyNodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: healthy, Count: 2})
		for _, pod := range framework.PodsOf(ctx, Default, workload, app) {
			Expect(healthyNodes).To(ContainElement(pod.Spec.NodeName), "pod %s", pod.Name)
		}
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{app}, NodesBefore: nodesBefore,
		})

		By("Reading the failing group's backoff in the ClusterAutoscaler status")
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, failing)
			g.Expect(row.BackoffUntil).NotTo(BeNil())
			g.Expect(row.BackoffUntil.Time).To(BeTemporally(">", time.Now()))
			g.Expect(row.BackoffReason).NotTo(BeEmpty())
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing the failed Machine removed and the failing group back at 0 replicas")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, failing)).To(BeZero())
			g.Expect(framework.MachinesOf(ctx, g, mgmt, failing)).To(BeEmpty())
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
