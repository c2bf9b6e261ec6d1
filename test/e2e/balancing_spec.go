//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// BalancingSpecInput is the input of BalancingSpec.
type BalancingSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "balancing")
		zones := []string{"zone-a", "zone-b", "zone-c"}
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: zones,
		})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })

		By("Creating one MachineDeployment of 2-core machines per failure domain, 1 node each")
		groups := CreateZonalNodeGroups(ctx, CreateZonalNodeGroupsInput{
			Management: mgmt, Workload: workload, Cluster: cluster, Zones: zones,
			Replicas: 1, Annotations: SizeAnnotations(1, 5), Machine: SimMachine("2"),
		})

		By("Turning autoscaling on with balanceSimilarNodeGroups")
		spec := FastClusterAutoscalerSpec(cluster.Name)
		spec.BalanceSimilarNodeGroups = ptr.To(true)
		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Running 6 pods of 1.5 cores: 3 fit on the existing nodes, 3 need one node each")
		app := CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 6,
			Requests:     CPURequest("1500m"),
			NodeSelector: map[string]string{ClusterLabel: cluster.Name},
		})

		By("Seeing every MachineDeployment grow by one")
		Eventually(func(g Gomega) {
			for _, md := range groups {
				g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(2), "replicas of %s", md.Name)
			}
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
		pods := WaitForPodsRunning(ctx, workload, app, ScaleUpTimeout)
		Expect(pods).To(HaveLen(6))

		By("Seeing two Nodes in every zone, and no further growth")
		Eventually(func(g Gomega) {
			perZone := map[string]int{}
			for _, node := range ClusterNodes(g, workload, cluster) {
				perZone[node.Labels[corev1.LabelTopologyZone]]++
			}
			g.Expect(perZone).To(Equal(map[string]int{"zone-a": 2, "zone-b": 2, "zone-c": 2}))
		}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed())
		Consistently(func(g Gomega) {
			for _, md := range groups {
				g.Expect(Replicas(g, mgmt, md)).To(BeEquivalentTo(2), "replicas of %s", md.Name)
			}
		}, 10*time.Second, AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			for _, md := range groups {
				row := NodeGroupRow(g, mgmt, ca, md)
				g.Expect(row.TargetSize).To(BeEquivalentTo(2), "status row of %s", md.Name)
				g.Expect(row.Ready).To(BeEquivalentTo(2), "status row of %s", md.Name)
			}
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())

		DeleteClusterAutoscaler(mgmt, ca)
	})
}
