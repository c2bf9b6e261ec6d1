//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ScaleDownSpecInput is the input of ScaleDownSpec.
type ScaleDownSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ScaleDownSpec shows nodes going away once their workload is gone: after
// the unneeded time, the Machines of the emptied Nodes are deleted, a Node
// whose pod needs it stays, and the node group never goes below its min
// size.
func ScaleDownSpec(ctx context.Context, inputGetter func() ScaleDownSpecInput) {
	var (
		input     ScaleDownSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace framework.SpecNamespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ScaleDownSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = framework.CreateSpecNamespace(ctx, input.Stack, "scale-down")
	})

	It("removes the emptied nodes after the unneeded time, down to the min size", func() {
		By("Creating a Cluster with a node group of 4 nodes of 2 cpu, at least 2")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "scale-down", WorkloadKubeconfig: input.WorkloadKubeconfig})
		const minSize = 2
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:   mgmt,
			Cluster:  cluster,
			Name:     "workers",
			Replicas: ptr.To[int32](4),
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "2",
				clusterv1.AutoscalerMaxSizeAnnotation: "5",
			},
			Labels: map[string]string{framework.ClusterLabel: namespace.Name},
			Machine: infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("2"),
				corev1.ResourceMemory: resource.MustParse("4Gi"),
				corev1.ResourcePods:   resource.MustParse("110"),
			}},
		})
		nodesByMachine := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 4})

		By("Filling every node with one pod of 1500m cpu: 1 that stays, 3 of a batch job")
		// 1500m of 2 cpu is above the 0.5 utilization threshold: no node is
		// unneeded while its pod runs, and no pod fits beside another.
		requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}
		nodeSelector := map[string]string{framework.ClusterLabel: namespace.Name}
		steady := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "steady", Replicas: 1, Requests: requests, NodeSelector: nodeSelector})
		steadyPod := framework.WaitForPodsRunning(ctx, workload, steady, framework.NodesReadyTimeout)[0]
		batch := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "batch", Replicas: 3, Requests: requests, NodeSelector: nodeSelector})
		emptied := sets.New[string]()
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, batch, framework.NodesReadyTimeout) {
			emptied.Insert(pod.Spec.NodeName)
		}
		Expect(emptied.Len()).To(Equal(3))
		Expect(emptied.Has(steadyPod.Spec.NodeName)).To(BeFalse())

		By("Turning autoscaling on: every node is needed")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		unneededTime := ca.Spec.ScaleDown.UnneededTime.Duration

		By("Deleting the batch job")
		emptiedAt := time.Now()
		framework.DeleteWorkload(ctx, workload, batch)

		By("Seeing 2 of the 3 emptied nodes removed, not before the unneeded time")
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, md)
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(minSize))
		Expect(time.Since(emptiedAt)).To(BeNumerically(">=", unneededTime), "nodes were removed before they were unneeded for %s", unneededTime)

		By("Seeing the removed Nodes stay unschedulable until Cluster API deleted them")
		removed := sets.New[string]()
		machines := map[string]clusterv1.Machine{}
		for _, m := range framework.MachinesOf(ctx, Default, mgmt, md) {
			machines[m.Name] = m
		}
		for machine, node := range nodesByMachine {
			m, ok := machines[machine]
			if !ok || !m.DeletionTimestamp.IsZero() || m.Annotations[clusterv1.DeleteMachineAnnotation] != "" {
				removed.Insert(node)
			}
		}
		Expect(removed.Len()).To(Equal(len(nodesByMachine) - minSize))
		Eventually(func(g Gomega) {
			for name := range removed {
				node := &corev1.Node{}
				err := workload.Get(ctx, client.ObjectKey{Name: name}, node)
				if err == nil && !framework.HasDeletionTaint(node) {
					StopTrying("Node " + name + " lost the " + nodefacts.ToBeDeletedTaint + " taint before it was deleted").Now()
				}
				g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s is not deleted yet", name)
			}
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed())
		remaining := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: minSize})
		for machine, node := range nodesByMachine {
			if _, ok := remaining[machine]; !ok {
				Expect(emptied.Has(node)).To(BeTrue(), "Machine %s of Node %s was deleted, but its Node ran a pod", machine, node)
			}
		}
		Expect(remaining).To(ContainElement(steadyPod.Spec.NodeName), "the Node of the steady pod was removed")

		By("Seeing the steady pod never moved")
		pods := framework.WaitForPodsRunning(ctx, workload, steady, framework.NodesReadyTimeout)
		Expect(pods[0].UID).To(Equal(steadyPod.UID))
		Expect(pods[0].Spec.NodeName).To(Equal(steadyPod.Spec.NodeName))

		By("Seeing the node group stay at its min size although one node is still empty")
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(minSize))
			g.Expect(framework.MachinesOf(ctx, g, mgmt, md)).To(HaveLen(minSize))
		}, unneededTime+5*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Reading the scale-down in the ClusterAutoscaler status")
		Eventually(func(g Gomega) {
			row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
			g.Expect(row.TargetSize).To(BeEquivalentTo(minSize))
			g.Expect(row.Registered).To(BeEquivalentTo(minSize))
			current := framework.GetClusterAutoscaler(ctx, g, mgmt, ca)
			g.Expect(current.Status.LastScaleDownTime).NotTo(BeNil())
			g.Expect(current.Status.LastScaleDownTime.Time).To(BeTemporally(">=", emptiedAt.Truncate(time.Second)))
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
