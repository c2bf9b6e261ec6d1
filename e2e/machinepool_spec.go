//go:build e2e

package e2e

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// MachinePoolSpecInput is the input of the MachinePool specs.
type MachinePoolSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// poolCapacity is the capacity of the instances of the MachinePool specs:
// one pod of 1500m cpu fills one.
var poolCapacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("2"),
	corev1.ResourceMemory: resource.MustParse("4Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

// MachinePoolScaleSpec shows a MachinePool autoscaled as a
// MachineDeployment is: it grows for pending pods, and when one of its
// nodes is empty, exactly that node's MachinePool Machine goes, while the
// nodes whose pods need them stay.
func MachinePoolScaleSpec(ctx context.Context, inputGetter func() MachinePoolSpecInput) {
	var (
		input     MachinePoolSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "the MachinePool specs need a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "pool-scale")
	})

	It("scales a MachinePool up for pending pods, then removes the emptied node's Machine", func() {
		By("Creating a Cluster with a MachinePool of 1 instance of 2 cpu, between 1 and 4")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "pool-scale", WorkloadKubeconfig: input.WorkloadKubeconfig})
		labels := map[string]string{framework.ClusterLabel: namespace.Name}
		mp := framework.CreateMachinePool(ctx, framework.CreateMachinePoolInput{
			Client: mgmt, Cluster: cluster, Name: "pool", Replicas: 1, Annotations: framework.SizeAnnotations(1, 4), Labels: labels,
			Machine: infrav1.SimMachineSpec{Capacity: poolCapacity},
		})
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: mp, Count: 1})

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating 3 pods of 1500m cpu, one per node: 2 that stay and 1 of a batch job")
		requests := framework.CPURequest("1500m")
		steady := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "steady", Replicas: 2, Requests: requests, NodeSelector: labels})
		batch := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "batch", Replicas: 1, Requests: requests, NodeSelector: labels})

		By("Seeing the MachinePool grow to 3 instances through /scale, each with its MachinePool Machine")
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, mp)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(3))
		nodesByMachine := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: mp, Count: 3})
		steadyPods := framework.WaitForPodsRunning(ctx, workload, steady, framework.ScaleUpTimeout)
		emptied := framework.WaitForPodsRunning(ctx, workload, batch, framework.ScaleUpTimeout)[0].Spec.NodeName
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{steady, batch}, NodesBefore: nodesBefore,
		})
		Expect(framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "MachinePool", mp.Name, "ScaledUpGroup")).NotTo(BeEmpty(),
			"the scale-up is recorded on the MachinePool")
		var emptiedMachine string
		for machine, node := range nodesByMachine {
			if node == emptied {
				emptiedMachine = machine
			}
		}
		Expect(emptiedMachine).NotTo(BeEmpty())

		By("Deleting the batch job, which empties node " + emptied)
		framework.DeleteWorkload(ctx, workload, batch)

		By("Seeing exactly the emptied node's Machine go, and the replicas follow")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, mp)).To(BeEquivalentTo(2))
			err := workload.Get(ctx, client.ObjectKey{Name: emptied}, &corev1.Node{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s is not deleted yet", emptied)
		}, framework.ScaleDownTimeout+framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed())
		remaining := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: mp, Count: 2})
		Expect(remaining).NotTo(HaveKey(emptiedMachine))
		for _, pod := range steadyPods {
			Expect(remaining).To(ContainElement(pod.Spec.NodeName), "the Node of steady pod %s was removed", pod.Name)
		}
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, steady, framework.NodesReadyTimeout) {
			Expect(steadyPods).To(ContainElement(HaveField("UID", pod.UID)), "steady pod %s was replaced", pod.Name)
		}

		By("Reading the MachinePool's row in the ClusterAutoscaler status")
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, mp)
			g.Expect(row.MinSize).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(row.MaxSize).To(HaveValue(BeEquivalentTo(4)))
			g.Expect(row.TargetSize).To(BeEquivalentTo(2))
			g.Expect(row.Registered).To(BeEquivalentTo(2))
			g.Expect(row.Ready).To(BeEquivalentTo(2))
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}

// MachinePoolFromZeroSpec shows a MachinePool with no instance growing for
// the pods that select it, from the capacity its SimMachinePool publishes
// in status.
func MachinePoolFromZeroSpec(ctx context.Context, inputGetter func() MachinePoolSpecInput) {
	var (
		input     MachinePoolSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "the MachinePool specs need a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "pool-from-zero")
	})

	It("grows a MachinePool from zero with the capacity of its infrastructure machine pool", func() {
		By("Creating a Cluster with a MachinePool at 0 replicas, min 0")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "pool-from-zero", WorkloadKubeconfig: input.WorkloadKubeconfig})
		// Only the template node can tell this label Cluster API propagates.
		const poolRole = "node-role.kubernetes.io/pool"
		labels := map[string]string{framework.ClusterLabel: namespace.Name, poolRole: ""}
		mp := framework.CreateMachinePool(ctx, framework.CreateMachinePoolInput{
			Client: mgmt, Cluster: cluster, Name: "pool", Replicas: 0, Annotations: framework.SizeAnnotations(0, 3), Labels: labels,
			Machine: infrav1.SimMachineSpec{Capacity: poolCapacity},
		})

		By("Waiting for the SimMachinePool to publish its capacity")
		Eventually(func(g Gomega) {
			pool := &infrav1.SimMachinePool{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(mp), pool)).To(Succeed())
			g.Expect(pool.Status.Capacity).NotTo(BeEmpty())
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		nodesBefore := framework.NodeNames(ctx, workload)

		By("Creating 2 pods of 1500m cpu for the pool's role")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2, Requests: framework.CPURequest("1500m"), NodeSelector: labels})

		By("Seeing the MachinePool grow from 0 to 2 and the pods run on its nodes")
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, mp)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(2))
		poolNodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: mp, Count: 2})
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout) {
			Expect(poolNodes).To(ContainElement(pod.Spec.NodeName), "pod %s", pod.Name)
		}
		framework.ExpectPlannedPodsScheduledOnNewNodes(ctx, framework.ExpectPlannedPodsScheduledInput{
			Client: workload, Workloads: []*appsv1.Deployment{app}, NodesBefore: nodesBefore,
		})
		Expect(framework.Replicas(ctx, Default, mgmt, mp)).To(BeEquivalentTo(2))

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
