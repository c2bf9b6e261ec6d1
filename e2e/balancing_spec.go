//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// BalancingSpecInput is the input of BalancingSpec.
type BalancingSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// BalancingSpec shows balanceSimilarNodeGroups: three MachineDeployments of
// the same machines, one per failure domain, grow evenly.
func BalancingSpec(ctx context.Context, inputGetter func() BalancingSpecInput) {
	var input BalancingSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "BalancingSpec needs a stack")
	})

	It("spreads a scale-up evenly over similar node groups in three failure domains", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "balancing")
		zones := []string{"zone-a", "zone-b", "zone-c"}
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: zones, WorkloadKubeconfig: input.WorkloadKubeconfig,
		})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating one MachineDeployment of 2-core machines per failure domain, 1 node each")
		groups := framework.CreateZonalNodeGroups(ctx, framework.CreateZonalNodeGroupsInput{
			Management: mgmt, Workload: workload, Cluster: cluster, Zones: zones,
			Replicas: 1, Annotations: framework.SizeAnnotations(1, 5), Machine: framework.SimMachine("2"),
		})

		By("Turning autoscaling on with balanceSimilarNodeGroups")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.BalanceSimilarNodeGroups = ptr.To(true)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Running 6 pods of 1.5 cores: 3 fit on the existing nodes, 3 need one node each")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 6,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})

		By("Seeing every MachineDeployment grow by one")
		Eventually(func(g Gomega) {
			for _, md := range groups {
				g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2), "replicas of %s", md.Name)
			}
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		pods := framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		Expect(pods).To(HaveLen(6))

		By("Seeing two Nodes in every zone, and no further growth")
		Eventually(func(g Gomega) {
			perZone := map[string]int{}
			for _, node := range framework.ClusterNodes(ctx, g, workload, cluster) {
				perZone[node.Labels[corev1.LabelTopologyZone]]++
			}
			g.Expect(perZone).To(Equal(map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			for _, md := range groups {
				g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2), "replicas of %s", md.Name)
			}
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			for _, md := range groups {
				row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
				g.Expect(row.TargetSize).To(BeEquivalentTo(2), "status row of %s", md.Name)
				g.Expect(row.Ready).To(BeEquivalentTo(2), "status row of %s", md.Name)
			}
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
