//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// TwoClustersSpecInput is the input of TwoClustersSpec.
type TwoClustersSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// TwoClustersSpec shows one manager autoscaling two workload clusters at
// the same time, each with its own ClusterAutoscaler, node group and pods.
// In both topologies the two Clusters' kubeconfigs point to the same API
// server, so the Nodes and pods of each Cluster are kept apart by
// ClusterLabel: a pod of one Cluster fits no node group of the other.
func TwoClustersSpec(ctx context.Context, inputGetter func() TwoClustersSpecInput) {
	var input TwoClustersSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "TwoClustersSpec needs a stack")
	})

	It("scales two workload clusters up independently at the same time", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "two-clusters")

		type member struct {
			cluster *clusterv1.Cluster
			md      *clusterv1.MachineDeployment
			ca      *autoscalingv1alpha1.ClusterAutoscaler
			app     *appsv1.Deployment
			// want is the size the pods need.
			want int32
		}
		members := []*member{{want: 3}, {want: 2}}
		for i, m := range members {
			name := namespace.Name + []string{"-a", "-b"}[i]
			m.cluster = framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: name, WorkloadKubeconfig: input.WorkloadKubeconfig})
			DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, m.cluster) })
			m.md = framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: m.cluster, Name: name + "-workers",
				Replicas:    ptr.To[int32](1),
				Annotations: framework.SizeAnnotations(1, 5),
				Machine:     framework.SimMachine("2"),
				Labels:      map[string]string{framework.ClusterLabel: m.cluster.Name},
			})
		}
		for _, m := range members {
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: m.md, Count: 1})
			m.ca = framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: m.cluster, Spec: framework.FastClusterAutoscalerSpec(m.cluster.Name)})
		}

		By("Creating pods that need 3 nodes in the first Cluster and 2 in the second, at once")
		for _, m := range members {
			m.app = framework.CreateWorkload(ctx, framework.WorkloadInput{
				Client: workload, Namespace: namespace.Name, Name: m.cluster.Name + "-app", Replicas: m.want,
				Requests:     framework.CPURequest("1500m"),
				NodeSelector: map[string]string{framework.ClusterLabel: m.cluster.Name},
			})
		}

		By("Seeing each Cluster grow its own node group to what its pods need")
		Eventually(func(g Gomega) {
			for _, m := range members {
				g.Expect(framework.Replicas(ctx, g, mgmt, m.md)).To(Equal(m.want), "replicas of %s", m.md.Name)
			}
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		for _, m := range members {
			pods := framework.WaitForPodsRunning(ctx, workload, m.app, framework.ScaleUpTimeout)
			nodes := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: m.md, Count: int(m.want)})
			names := make([]string, 0, len(nodes))
			for _, node := range nodes {
				names = append(names, node)
			}
			for _, pod := range pods {
				Expect(pod.Spec.NodeName).To(BeElementOf(names), "pod %s runs on a Node of its own Cluster", pod.Name)
			}
		}
		Consistently(func(g Gomega) {
			for _, m := range members {
				g.Expect(framework.Replicas(ctx, g, mgmt, m.md)).To(Equal(m.want), "replicas of %s", m.md.Name)
			}
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing each ClusterAutoscaler report only its own node group, and the scale-up events name it")
		Eventually(func(g Gomega) {
			for _, m := range members {
				ca := framework.GetClusterAutoscaler(ctx, g, mgmt, m.ca)
				g.Expect(ca.Status.NodeGroups).To(HaveLen(1))
				g.Expect(ca.Status.NodeGroups[0].ID).To(Equal(framework.NodeGroupID(m.md)))
				g.Expect(ca.Status.NodeGroups[0].Ready).To(Equal(m.want))
				g.Expect(ca.Status.LastScaleUpTime).NotTo(BeNil())
			}
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		triggered := framework.PodEvents(ctx, Default, workload, namespace.Name, "TriggeredScaleUp")
		for i, m := range members {
			other := members[1-i]
			for _, pod := range framework.PodsOf(ctx, Default, workload, m.app) {
				for _, event := range triggered[pod.Name] {
					Expect(event.Message).To(ContainSubstring(framework.NodeGroupID(m.md)))
					Expect(event.Message).NotTo(ContainSubstring(framework.NodeGroupID(other.md)))
				}
			}
			scaled := framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "MachineDeployment", m.md.Name, "ScaledUpGroup")
			Expect(scaled).NotTo(BeEmpty(), "ScaledUpGroup event on %s", m.md.Name)
		}

		for _, m := range members {
			framework.DeleteClusterAutoscaler(ctx, mgmt, m.ca)
		}
	})
}
