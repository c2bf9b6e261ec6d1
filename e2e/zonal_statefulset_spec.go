//go:build e2e

package e2e

import (
	"context"
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ZonalStatefulSetSpecInput is the input of ZonalStatefulSetSpec.
type ZonalStatefulSetSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ZonalStatefulSetSpec shows a StatefulSet whose claims are bound to zonal
// volumes getting its nodes in the volumes' zone: of two node groups in
// different zones, the expander prefers the other one, which the pods'
// volumes rule out, and it never grows.
func ZonalStatefulSetSpec(ctx context.Context, inputGetter func() ZonalStatefulSetSpecInput) {
	var input ZonalStatefulSetSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ZonalStatefulSetSpec needs a stack")
	})

	It("grows the node group of the zone the pods' volumes are in, and only that one", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "zonal-sts")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, FailureDomains: []string{"zone-a", "zone-b"}, WorkloadKubeconfig: input.WorkloadKubeconfig,
		})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating a node group of 2-core machines in zone-a and one in zone-b, 1 node each")
		groups := framework.CreateZonalNodeGroups(ctx, framework.CreateZonalNodeGroupsInput{
			Management: mgmt, Workload: workload, Cluster: cluster, Zones: []string{"zone-a", "zone-b"},
			Replicas: 1, Annotations: framework.SizeAnnotations(1, 4), Machine: framework.SimMachine("2"),
		})
		zoneA, zoneB := groups[0], groups[1]
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("Binding the claims of a 3-replica StatefulSet to volumes in zone-b")
		const replicas = 3
		claims := framework.StatefulSetClaims("data", "db", replicas)
		framework.CreateBoundClaims(ctx, framework.CreateBoundClaimsInput{
			Client: workload, Namespace: namespace.Name, Claims: claims, Driver: "zonal.csi.example.com", Zone: "zone-b",
		})

		By("Running it with pods of 1.5 cores: one fits on the zone-b node, two need new zone-b nodes")
		db := framework.CreateStatefulSet(ctx, framework.StatefulSetInput{
			Client: workload, Namespace: namespace.Name, Name: "db", Replicas: replicas, ClaimTemplate: "data",
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		// All pending before autoscaling is on, so that one loop sees them
		// all.
		Eventually(func(g Gomega) {
			g.Expect(framework.StatefulSetPods(ctx, g, workload, db)).To(HaveLen(replicas))
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(replicas - 1))
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Turning autoscaling on, with the priority expander preferring zone-a")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{
			{Priority: 100, NodeGroupIDPatterns: []string{"/" + zoneA.Name + "$"}},
			{Priority: 10, NodeGroupIDPatterns: []string{"/" + zoneB.Name + "$"}},
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Seeing the zone-b group grow by 2, and every pod Running in zone-b")
		Eventually(func(g Gomega) {
			if size := framework.Replicas(ctx, g, mgmt, zoneA); size != 1 {
				StopTrying(fmt.Sprintf("the zone-a group grew to %d, for pods whose volumes are in zone-b", size)).Now()
			}
			g.Expect(framework.Replicas(ctx, g, mgmt, zoneB)).To(BeEquivalentTo(replicas))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: zoneB, Count: replicas})
		for _, pod := range framework.WaitForStatefulSetPodsRunning(ctx, workload, db, framework.ScaleUpTimeout) {
			node := &corev1.Node{}
			Expect(workload.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, node)).To(Succeed())
			Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelTopologyZone, "zone-b"), "pod %s runs on %s", pod.Name, node.Name)
		}

		By("Checking that the zone-a group never grew, and that the pods' scale-up named only the zone-b group")
		framework.ExpectReplicasTrajectory(invariants.Replicas(zoneA), 1)
		framework.ExpectReplicasTrajectory(invariants.Replicas(zoneB), 1, replicas)
		invariants.ExpectNoViolations()
		Eventually(func(g Gomega) {
			events := framework.PodEvents(ctx, g, workload, namespace.Name, "TriggeredScaleUp")
			g.Expect(events).To(HaveLen(replicas-1), "every pending pod triggered the scale-up")
			for pod, podEvents := range events {
				for _, message := range framework.EventMessages(podEvents) {
					g.Expect(message).To(And(ContainSubstring(framework.NodeGroupID(zoneB)), Not(ContainSubstring(framework.NodeGroupID(zoneA)))), "pod %s", pod)
				}
			}
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
		framework.DeleteStatefulSet(ctx, workload, db)
	})
}
