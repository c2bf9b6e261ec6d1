//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// DryRunSpecInput is the input of DryRunSpec.
type DryRunSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// DryRunSpec proves the shadow mode against the active engine, as the
// upstream autoscaler cannot run on the local stack: two identical
// Clusters get the same workload, one autoscaled by an Active
// ClusterAutoscaler, the other by a DryRun one. Each has a "small" group
// of two empty nodes, one more than its minimum, and a "big" group at
// zero that the workload's pods select. The DryRun one must decide what
// the Active one does, on its own Cluster's groups, and write nothing:
// the fault proxies, which see every request of the autoscaler, see no
// write of its engine, nor to its Cluster's Machines and node groups.
func DryRunSpec(ctx context.Context, inputGetter func() DryRunSpecInput) {
	var input DryRunSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DryRunSpec needs a stack")
	})

	It("decides in DryRun mode what the Active mode does, and writes nothing", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "dry-run")

		type member struct {
			cluster    *clusterv1.Cluster
			small, big *clusterv1.MachineDeployment
			ca         *autoscalingv1alpha1.ClusterAutoscaler
		}
		active, shadow := &member{}, &member{}
		for suffix, m := range map[string]*member{"-active": active, "-shadow": shadow} {
			name := namespace.Name + suffix
			m.cluster = framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: name, WorkloadKubeconfig: input.WorkloadKubeconfig})
			DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, m.cluster) })
			m.small = framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: m.cluster, Name: name + "-small", Replicas: ptr.To[int32](2),
				Annotations: framework.SizeAnnotations(1, 5), Machine: framework.SimMachine("2"),
				Labels: map[string]string{framework.ClusterLabel: m.cluster.Name},
			})
			m.big = framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: m.cluster, Name: name + "-big", Replicas: ptr.To[int32](0),
				Annotations: framework.SizeAnnotations(0, 5), Machine: framework.SimMachine("4"),
				Labels: map[string]string{framework.ClusterLabel: m.cluster.Name + "-big"},
			})
		}
		for _, m := range []*member{active, shadow} {
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: m.small, Count: 2})
		}

		writes := watchWrites(input.Stack, namespace.Name, shadow.cluster.Name, active.cluster.Name)
		for _, m := range []*member{active, shadow} {
			spec := framework.FastClusterAutoscalerSpec(m.cluster.Name)
			if m == shadow {
				spec.Mode = autoscalingv1alpha1.DryRunMode
			}
			m.ca = framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: m.cluster, Spec: spec})
		}

		By("Giving both Clusters three 3-cpu pods that only their big group's 4-cpu nodes take")
		for _, m := range []*member{active, shadow} {
			framework.CreateWorkload(ctx, framework.WorkloadInput{
				Client: workload, Namespace: namespace.Name, Name: m.cluster.Name + "-app", Replicas: 3,
				Requests:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")},
				NodeSelector: map[string]string{framework.ClusterLabel: m.cluster.Name + "-big"},
			})
		}

		By("Seeing the Active one add three big nodes and remove one small node")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, active.big)).To(BeEquivalentTo(3))
			g.Expect(framework.Replicas(ctx, g, mgmt, active.small)).To(BeEquivalentTo(1))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing the DryRun one decide the same on its own groups")
		var decisions []autoscalingv1alpha1.DryRunDecision
		Eventually(func(g Gomega) {
			decisions = framework.GetClusterAutoscaler(ctx, g, mgmt, shadow.ca).Status.DryRunDecisions
			g.Expect(firstDecision(decisions, autoscalingv1alpha1.ScaleUpDecision)).NotTo(BeNil())
			g.Expect(firstDecision(decisions, autoscalingv1alpha1.ScaleDownDecision)).NotTo(BeNil())
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		scaleUp := firstDecision(decisions, autoscalingv1alpha1.ScaleUpDecision)
		Expect(scaleUp.NodeGroups).To(Equal([]autoscalingv1alpha1.NodeGroupDelta{{ID: framework.NodeGroupID(shadow.big), Delta: 3}}))
		Expect(scaleUp.PodCount).To(BeEquivalentTo(3))
		Expect(scaleUp.Pods).To(HaveEach(HavePrefix(namespace.Name + "/" + shadow.cluster.Name + "-app-")))
		scaleDown := firstDecision(decisions, autoscalingv1alpha1.ScaleDownDecision)
		Expect(scaleDown.NodeGroups).To(Equal([]autoscalingv1alpha1.NodeGroupDelta{{ID: framework.NodeGroupID(shadow.small), Delta: -1}}))
		Expect(scaleDown.Nodes).To(HaveLen(1))
		Expect(framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "ClusterAutoscaler", shadow.ca.Name, autoscalingv1alpha1.WouldScaleUpReason)).NotTo(BeEmpty())
		Expect(framework.ObjectEvents(ctx, Default, mgmt, namespace.Name, "ClusterAutoscaler", shadow.ca.Name, autoscalingv1alpha1.WouldScaleDownReason)).NotTo(BeEmpty())

		By("Seeing that the DryRun one changed nothing")
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, shadow.small)).To(BeEquivalentTo(2))
			g.Expect(framework.Replicas(ctx, g, mgmt, shadow.big)).To(BeZero())
			for _, node := range framework.ClusterNodes(ctx, g, workload, shadow.cluster) {
				g.Expect(node.Spec.Taints).To(BeEmpty(), "node %s", node.Name)
				g.Expect(node.Spec.Unschedulable).To(BeFalse(), "node %s", node.Name)
			}
			machines := &clusterv1.MachineList{}
			g.Expect(mgmt.List(ctx, machines, client.InNamespace(namespace.Name), client.MatchingLabels{clusterv1.ClusterNameLabel: shadow.cluster.Name})).To(Succeed())
			for _, machine := range machines.Items {
				g.Expect(machine.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "machine %s", machine.Name)
			}
		}, 5*time.Second, framework.AutoscalerPoll).Should(Succeed())
		seen, forbidden := writes.result()
		Expect(seen).NotTo(BeZero(), "the proxies saw the Active one's writes, so they would have seen the DryRun one's")
		Expect(forbidden).To(BeEmpty(), "writes of the autoscaler about the DryRun Cluster's objects")
	})
}

// firstDecision is the first decision of a kind, nil when there is none.
func firstDecision(decisions []autoscalingv1alpha1.DryRunDecision, kind autoscalingv1alpha1.DecisionKind) *autoscalingv1alpha1.DryRunDecision {
	for i := range decisions {
		if decisions[i].Kind == kind {
			return &decisions[i]
		}
	}
	return nil
}

// clusterWrites are the writes of the autoscaler that the stack's proxies
// saw for two ClusterAutoscalers: the writes of each engine, which name
// their ClusterAutoscaler in their user agent, and the writes of the
// manager to the Machines and node groups of each Cluster, whose names
// start with the Cluster's.
type clusterWrites struct {
	mu sync.Mutex
	// seen counts the writes for the other ClusterAutoscaler.
	seen int
	// forbidden are the writes for the watched one.
	forbidden []string
}

// machineResources are what the manager writes in the management cluster
// to scale a Cluster: replicas, delete-machine marks.
var machineResources = sets.New("machinedeployments", "machinesets", "machinepools", "machines")

// watchWrites observes the proxies of the stack until the spec ends. Both
// ClusterAutoscalers are named after their Cluster.
func watchWrites(stack *localstack.Stack, namespace, watched, other string) *clusterWrites {
	GinkgoHelper()
	w := &clusterWrites{}
	proxies := framework.ProxiesOf(stack)
	for _, proxy := range proxies {
		proxy.Observe(func(r faultproxy.Request) {
			switch r.Verb {
			case "create", "update", "patch", "delete", "deletecollection":
			default:
				return
			}
			writes := func(cluster string) bool {
				return strings.Contains(r.UserAgent, "(ClusterAutoscaler "+namespace+"/"+cluster+")") ||
					machineResources.Has(r.Resource) && strings.HasPrefix(r.Name, cluster+"-")
			}
			w.mu.Lock()
			defer w.mu.Unlock()
			switch {
			case writes(watched):
				w.forbidden = append(w.forbidden, fmt.Sprintf("%s %s/%s by %q: %s", r.Rule(), r.Namespace, r.Name, r.UserAgent, r.Body))
			case writes(other):
				w.seen++
			}
		})
	}
	DeferCleanup(func() {
		for _, proxy := range proxies {
			proxy.Observe(nil)
		}
	})
	return w
}

func (w *clusterWrites) result() (int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen, append([]string(nil), w.forbidden...)
}
