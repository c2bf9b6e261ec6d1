//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ZoneSpreadSpecInput is the input of ZoneSpreadSpec.
type ZoneSpreadSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ZoneSpreadSpec shows pods with a zone topology spread, over one
// MachineDeployment per failure domain and without balancing, getting the
// nodes they need in every zone at once, while machines take a while to
// provision: no pod triggers a second scale-up and no node is left over.
func ZoneSpreadSpec(ctx context.Context, inputGetter func() ZoneSpreadSpecInput) {
	var input ZoneSpreadSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ZoneSpreadSpec needs a stack")
	})

	It("adds the nodes a zone spread needs in every zone, once", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "zone-spread")
		zones := []string{"zone-a", "zone-b", "zone-c"}
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: zones, WorkloadKubeconfig: input.WorkloadKubeconfig,
		})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating one MachineDeployment of 2-core machines per failure domain, 1 node each, machines taking 15s to provision")
		machine := framework.SimMachine("2")
		// Long enough for several loops to see the new machines on their way.
		machine.ProvisioningDelay = metav1.Duration{Duration: 15 * time.Second}
		groups := framework.CreateZonalNodeGroups(ctx, framework.CreateZonalNodeGroupsInput{
			Management: mgmt, Workload: workload, Cluster: cluster, Zones: zones,
			Replicas: 1, Annotations: framework.SizeAnnotations(1, 8), Machine: machine,
		})
		By("Turning autoscaling on, without balancing")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Running 12 pods of 1.5 cores spread over the zones with maxSkew 1: one pod per node, 4 nodes per zone")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 12,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate:       framework.SpreadOverZones,
		})

		By("Seeing every pod run on 4 nodes per zone")
		pods := framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		Expect(pods).To(HaveLen(12))
		Eventually(func(g Gomega) {
			perZone := map[string]int{}
			for _, node := range framework.ClusterNodes(ctx, g, workload, cluster) {
				perZone[node.Labels[corev1.LabelTopologyZone]]++
			}
			g.Expect(perZone).To(Equal(map[string]int{"zone-a": 4, "zone-b": 4, "zone-c": 4}))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing no further growth, and no pod that triggered a scale-up twice")
		Consistently(func(g Gomega) {
			for _, md := range groups {
				g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(4), "replicas of %s", md.Name)
			}
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			for pod, events := range framework.PodEvents(ctx, g, workload, namespace.Name, "TriggeredScaleUp") {
				count := int32(0)
				for _, event := range events {
					count += max(event.Count, 1)
				}
				g.Expect(count).To(BeEquivalentTo(1), "TriggeredScaleUp events of pod %s: %v", pod, framework.EventMessages(events))
			}
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
