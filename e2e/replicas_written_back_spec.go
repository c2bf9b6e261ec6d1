//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// ReplicasWrittenBackSpecInput is the input of ReplicasWrittenBackSpec.
type ReplicasWrittenBackSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// writtenBackNodeDeletionTimeout is the nodeDeletionTimeout of the spec.
const writtenBackNodeDeletionTimeout = 20 * time.Second

// ReplicasWrittenBackSpec lets the autoscaler scale down an empty node,
// marking its Machine and lowering the replicas, and writes the old
// replicas back right after, as a GitOps tool that owns the field would:
// Cluster API then removes no Machine, and the autoscaler must give the
// node back once nodeDeletionTimeout has passed (taint and mark removed, a
// NodeNotDeleted event, a problem on the group's status row) instead of
// leaving it tainted and marked for good.
//
// To make it deterministic, the MachineSet is paused (the
// cluster.x-k8s.io/paused annotation) while the autoscaler scales down and
// the replicas are written back: its controller cannot delete the marked
// Machine in between. The MachineDeployment, which the autoscaler checks,
// is not paused, and its controller still hands the replicas on.
func ReplicasWrittenBackSpec(ctx context.Context, inputGetter func() ReplicasWrittenBackSpecInput) {
	var input ReplicasWrittenBackSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "ReplicasWrittenBackSpec needs a stack")
	})

	It("gives a node back when its replicas are written back after its scale-down", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "written-back")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		md, nodes := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 2, MaxSize: 3})
		machineSet := onlyMachineSet(ctx, mgmt, md)
		By("Pausing MachineSet " + machineSet.Name + ": its controller deletes no Machine until the replicas are written back")
		setPausedAnnotation(ctx, mgmt, machineSet, true)
		DeferCleanup(func() { setPausedAnnotation(ctx, mgmt, machineSet, false) })

		By("Autoscaling with nodeDeletionTimeout " + writtenBackNodeDeletionTimeout.String() + ": one of the two empty nodes goes")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScaleDown.NodeDeletionTimeout = &metav1.Duration{Duration: writtenBackNodeDeletionTimeout}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, md)
		}, framework.ScaleDownTimeout, framework.PollInterval).Should(BeEquivalentTo(1))
		scaledDownAt := time.Now()

		By("Writing the replicas back to 2, as a GitOps tool would")
		Expect(mgmt.Patch(ctx, md.DeepCopy(), client.RawPatch(client.Merge.Type(), []byte(`{"spec":{"replicas":2}}`)))).To(Succeed())
		var marked clusterv1.Machine
		for _, m := range framework.MachinesOf(ctx, Default, mgmt, md) {
			if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
				marked = m
			}
		}
		Expect(marked.Name).NotTo(BeEmpty(), "no Machine is marked for deletion")
		node := nodes[marked.Name]
		AddReportEntry("replicas written back after the scale-down", time.Since(scaledDownAt).String())

		By("Unpausing the MachineSet once it has the 2 replicas again")
		Eventually(func(g Gomega) {
			current := &clusterv1.MachineSet{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(machineSet), current)).To(Succeed())
			g.Expect(current.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		}, framework.ClusterReadyTimeout, framework.PollInterval).Should(Succeed())
		setPausedAnnotation(ctx, mgmt, machineSet, false)

		By("Seeing no Machine removed, and " + node + " given back after nodeDeletionTimeout")
		Eventually(func(g Gomega) {
			machines := framework.MachinesOf(ctx, g, mgmt, md)
			if len(machines) != 2 {
				StopTrying("a Machine was removed although the replicas were written back").Now()
			}
			for _, m := range machines {
				if m.DeletionTimestamp != nil {
					StopTrying("Machine " + m.Name + " is being deleted although the replicas were written back").Now()
				}
				g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s keeps its mark", m.Name)
			}
			n := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(n)).To(BeFalse(), "Node %s keeps the deletion taint", node)
			g.Expect(n.Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
		}, writtenBackNodeDeletionTimeout+framework.ReleaseTimeout+10*time.Second, framework.AutoscalerPoll).Should(Succeed())
		AddReportEntry("node given back after the scale-down", time.Since(scaledDownAt).Round(time.Second).String())
		Expect(time.Since(scaledDownAt)).To(BeNumerically(">=", writtenBackNodeDeletionTimeout-2*time.Second), "the node was given back before nodeDeletionTimeout")

		By("Reading the problem in a NodeNotDeleted event and on the group's status row")
		Eventually(func(g Gomega) {
			g.Expect(framework.ObjectEvents(ctx, g, mgmt, md.Namespace, "MachineDeployment", md.Name, autoscaler.EventNodeNotDeleted)).NotTo(BeEmpty())
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		var problem string
		Eventually(func(g Gomega) {
			problem = framework.NodeGroupRow(ctx, g, mgmt, ca, md).Problem
			g.Expect(problem).NotTo(BeEmpty())
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		AddReportEntry("status row problem", problem)

		By("Turning scale-down off: the node, still empty, would go again")
		framework.PatchClusterAutoscalerSpec(ctx, mgmt, ca, func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) { spec.ScaleDown.Enabled = ptr.To(false) })
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// onlyMachineSet returns the only MachineSet of md.
func onlyMachineSet(ctx context.Context, mgmt client.Client, md *clusterv1.MachineDeployment) *clusterv1.MachineSet {
	GinkgoHelper()
	list := &clusterv1.MachineSetList{}
	Expect(mgmt.List(ctx, list, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
	Expect(list.Items).To(HaveLen(1))
	return &list.Items[0]
}

// setPausedAnnotation sets or removes the cluster.x-k8s.io/paused
// annotation of a Cluster API object.
func setPausedAnnotation[T client.Object](ctx context.Context, mgmt client.Client, obj T, paused bool) {
	GinkgoHelper()
	value := ""
	if paused {
		value = "true"
	}
	framework.PatchObject(ctx, mgmt, obj, true, func(current T) {
		annotations := current.GetAnnotations()
		framework.SetOrDelete(&annotations, clusterv1.PausedAnnotation, value)
		current.SetAnnotations(annotations)
	})
}
