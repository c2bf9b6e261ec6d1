//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// ConsolidationReplaceSpecInput is the input of ConsolidationReplaceSpec.
type ConsolidationReplaceSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// ConsolidationReplaceSpec shows a replacement on real Cluster API: three
// 4-cpu nodes whose pods fit neither beside each other nor under the
// utilization threshold go for one 8-cpu node of another group, cheaper
// than the three; the new node is Ready before any of them is tainted,
// only their Machines go, and a node whose pod forbids disruption stays.
func ConsolidationReplaceSpec(ctx context.Context, inputGetter func() ConsolidationReplaceSpecInput) {
	var input ConsolidationReplaceSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ConsolidationReplaceSpec needs a stack")
	})

	It("replaces three half-used nodes by one cheaper node, Ready before the drain, and keeps a do-not-disrupt pod's node", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "replace")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, CheckEvictions: true})
		timeline := framework.WatchNodeTimeline(ctx, input.Stack, cluster)
		evictions := framework.RecordEvictions(ctx, input.Stack, namespace.Name)

		By("Creating 4 nodes of 4 cpu at 0.2 an hour, and a group of 8-cpu nodes at 0.3 at zero")
		group := func(name, cpu, price string, replicas int32, minSize, maxSize int) *clusterv1.MachineDeployment {
			annotations := framework.SizeAnnotations(minSize, maxSize)
			annotations[template.PriceAnnotation] = price
			return framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: name, Replicas: ptr.To(replicas), Annotations: annotations,
				Labels:  map[string]string{framework.ClusterLabel: cluster.Name, poolLabel: name},
				Machine: framework.SimMachine(cpu),
			})
		}
		medium := group("medium", "4", "0.2", 4, 1, 4)
		large := group("large", "8", "0.3", 0, 0, 2)
		framework.WaitForTemplateCapacity(ctx, mgmt, large)
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: medium, Count: 4})

		By("Running a 2200m pod on each node: one annotated do-not-disrupt, three of an app")
		// 2200m of 4 cpu: above the 0.5 utilization threshold, and no two
		// fit on one node, so neither scale-down nor a deletion can remove
		// any; three fit on an 8-cpu node, which costs 0.3 for their 0.6.
		requests := framework.CPURequest("2200m")
		nodeSelector := map[string]string{framework.ClusterLabel: cluster.Name}
		pinned := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "pinned", Replicas: 1, Requests: requests, NodeSelector: nodeSelector,
			Mutate: func(template *corev1.PodTemplateSpec) {
				template.Annotations = map[string]string{scaledown.DoNotDisruptAnnotation: "true"}
			},
		})
		pinnedPod := framework.WaitForPodsRunning(ctx, workload, pinned, framework.NodesReadyTimeout)[0]
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 3, Requests: requests, NodeSelector: nodeSelector})
		replaced := sets.New[string]()
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, app, framework.NodesReadyTimeout) {
			replaced.Insert(pod.Spec.NodeName)
		}
		Expect(replaced.Len()).To(Equal(3))
		Expect(replaced.Has(pinnedPod.Spec.NodeName)).To(BeFalse())

		By("Turning autoscaling on with consolidation Replace")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{
			Policy:           autoscalingv1alpha1.ConsolidationReplace,
			ConsolidateAfter: &metav1.Duration{Duration: 5 * time.Second},
			Budget:           &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("3")},
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Seeing one 8-cpu node added, and the Machines of the three app nodes deleted")
		added := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: large, Count: 1})
		var newNode string
		for _, node := range added {
			newNode = node
		}
		kept := framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: medium, Count: 1})
		Expect(kept).To(ConsistOf(pinnedPod.Spec.NodeName), "the do-not-disrupt pod's node stays")

		By("Checking that the new node was Ready before any replaced node was tainted")
		readyAt := timeline.ReadyAt(newNode)
		Expect(readyAt).NotTo(BeZero(), "the watch never saw %s Ready", newNode)
		for node := range replaced {
			taintedAt := timeline.TaintedAt(node)
			Expect(taintedAt).NotTo(BeZero(), "the watch never saw %s tainted", node)
			Expect(taintedAt).To(BeTemporally(">", readyAt), "%s was tainted %s before %s was Ready", node, readyAt.Sub(taintedAt), newNode)
		}
		Expect(timeline.TaintedAt(pinnedPod.Spec.NodeName)).To(BeZero(), "the do-not-disrupt pod's node was tainted")

		By("Seeing the app's pods Running on the new node, the pinned pod never moved")
		for _, pod := range framework.WaitForPodsRunning(ctx, workload, app, framework.NodesReadyTimeout) {
			Expect(pod.Spec.NodeName).To(Equal(newNode), "pod %s", pod.Name)
		}
		pinnedNow := framework.WaitForPodsRunning(ctx, workload, pinned, framework.NodesReadyTimeout)[0]
		Expect(pinnedNow.UID).To(Equal(pinnedPod.UID))
		Expect(pinnedNow.Spec.NodeName).To(Equal(pinnedPod.Spec.NodeName))
		evicted := evictions.Evictions()
		Expect(evicted).To(HaveLen(3), "each app pod evicted once: %v", evicted)
		for _, e := range evicted {
			Expect(e.Owner).To(Equal(app.Name))
			Expect(replaced.Has(e.Node)).To(BeTrue(), "pod %s was evicted from %s", e.Pod, e.Node)
		}

		By("Reading the replacement in the groups' events and status rows")
		Eventually(func(g Gomega) {
			for _, md := range []*clusterv1.MachineDeployment{medium, large} {
				messages := framework.EventMessages(framework.ObjectEvents(ctx, g, mgmt, namespace.Name, "MachineDeployment", md.Name, "Consolidation"))
				// The decision's event; the one recorded when the drain
				// starts has a message of its own.
				g.Expect(messages).To(ContainElement(And(
					ContainSubstring("consolidation: replacing nodes"), ContainSubstring("with 1 × "+framework.NodeGroupID(large)+" saves 0.3/h"),
				)), "on %s", md.Name)
				for node := range replaced {
					g.Expect(messages).To(HaveEach(ContainSubstring(node)), "on %s", md.Name)
				}
			}
			g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, medium).TargetSize).To(BeEquivalentTo(1))
			g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, large).TargetSize).To(BeEquivalentTo(1))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "MachineDeployment", large.Name, "ConsolidationAbandoned")).To(BeEmpty())

		By("Seeing the groups stay as they are: nothing more to save")
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, medium)).To(BeEquivalentTo(1))
			g.Expect(framework.Replicas(ctx, g, mgmt, large)).To(BeEquivalentTo(1))
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
