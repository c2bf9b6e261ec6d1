//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// AtomicRollbackBesideScaleUpSpecInput is the input of
// AtomicRollbackBesideScaleUpSpec.
type AtomicRollbackBesideScaleUpSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// groupLabel tells the spec's two node groups apart on their Nodes (Cluster
// API propagates *.node.cluster.x-k8s.io labels).
const groupLabel = "e2e.node.cluster.x-k8s.io/group"

// AtomicRollbackBesideScaleUpSpec rolls back a best-effort-atomic
// ProvisioningRequest whose Machines were created together with those of a
// regular scale-up of the same group:
//
//   - the request asks for 2 nodes of group "shared" and 1 of group
//     "failing", whose Machines fail; both MachineSets are paused
//     (cluster.x-k8s.io/paused), so no Machine is created yet;
//   - a loop later, a regular pod ("web") needs a third node of "shared";
//   - "shared" is unpaused: its three Machines appear together, and their
//     Nodes get Ready; then "failing" is unpaused, its Machine fails, and
//     the request's scale-up is rolled back.
//
// The web pod's scheduler is the spec (its schedulerName), which binds it
// as kube-scheduler may: to a Ready node that is schedulable (neither
// cordoned nor tainted NoSchedule), at the worst moment, the first one whose
// Machine the rollback has chosen to remove, as soon as it has. The
// rollback must take back the two nodes the request added and the failed
// Machine, and nothing else: the web pod keeps running where it was bound,
// its node and Machine stay, and no node running a pod other than
// DaemonSet ones is removed.
func AtomicRollbackBesideScaleUpSpec(ctx context.Context, inputGetter func() AtomicRollbackBesideScaleUpSpecInput) {
	var input AtomicRollbackBesideScaleUpSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "AtomicRollbackBesideScaleUpSpec needs a stack")
	})

	It("takes back only the request's Machines, and no node a regular pod runs on", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "atomic-beside")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		twoCPUs := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}
		selector := func(group string) map[string]string {
			return map[string]string{framework.ClusterLabel: cluster.Name, groupLabel: group}
		}
		By("Creating two groups at 0 of 2-core nodes: shared (up to 4) and failing (up to 1, its Machines fail), their MachineSets paused")
		shared := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "shared", Replicas: ptr.To[int32](0), Annotations: framework.SizeAnnotations(0, 4),
			Labels: selector("shared"), Machine: infrav1.SimMachineSpec{Capacity: twoCPUs},
		})
		failing := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "failing", Replicas: ptr.To[int32](0), Annotations: framework.SizeAnnotations(0, 1),
			Labels: selector("failing"), Machine: infrav1.SimMachineSpec{Capacity: twoCPUs, Provisioning: infrav1.ProvisioningFail},
		})
		sharedSet, failingSet := pauseMachineSet(ctx, mgmt, shared), pauseMachineSet(ctx, mgmt, failing)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By("Asking, atomically, for 4 one-core pods on shared and 1 on failing: 2 nodes of shared, 1 of failing")
		request := createAtomicRequest(ctx, workload, namespace.Name, "job", map[string]podSet{
			"job-shared":  {count: 4, nodeSelector: selector("shared")},
			"job-failing": {count: 1, nodeSelector: selector("failing")},
		})
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, shared)).To(BeEquivalentTo(2))
			g.Expect(framework.Replicas(ctx, g, mgmt, failing)).To(BeEquivalentTo(1))
		}, framework.ScaleUpTimeout, framework.PollInterval).Should(Succeed(), "the request's scale-up did not start")

		By("A regular pod that needs a third node of shared; the spec is its scheduler")
		web := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "web", Replicas: 1,
			Requests: framework.CPURequest("1500m"), NodeSelector: selector("shared"),
			Mutate: func(template *corev1.PodTemplateSpec) { template.Spec.SchedulerName = heldScheduler },
		})
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			pods := framework.PodsSelected(ctx, g, workload, web.Namespace, web.Spec.Selector)
			g.Expect(pods).To(HaveLen(1))
			pod = pods[0]
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())
		markUnschedulable(ctx, workload, &pod)
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, shared)).To(BeEquivalentTo(3))
		}, framework.ScaleUpTimeout, framework.PollInterval).Should(Succeed(), "no scale-up for the regular pod")

		By("Unpausing shared: its three Machines appear together, and their Nodes get Ready")
		setPausedAnnotation(ctx, mgmt, sharedSet, false)
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: shared, Count: 3})

		By("Unpausing failing: its Machine fails, and the request's scale-up is rolled back; the spec binds the web pod meanwhile")
		setPausedAnnotation(ctx, mgmt, failingSet, false)
		binding := bindDuringRollback(ctx, bindDuringRollbackInput{Management: mgmt, Workload: workload, Group: shared, Pod: &pod, Request: request})
		boundTo := binding.node
		AddReportEntry("web pod bound", fmt.Sprintf("to %s (a node the rollback chose to remove: %t); nodes the rollback chose that were no longer schedulable when seen: %v",
			boundTo, binding.chosenByRollback, sets.List(binding.unschedulableChosen)))

		var failed *metav1.Condition
		Eventually(func(g Gomega) {
			current := &provisioningv1.ProvisioningRequest{}
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(request), current)).To(Succeed())
			failed = meta.FindStatusCondition(current.Status.Conditions, provisioningv1.FailedCondition)
			g.Expect(failed).NotTo(BeNil())
			g.Expect(failed.Reason).To(Equal(provisioningv1.ScaleUpFailedReason))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed(), "the request's scale-up was not rolled back")
		AddReportEntry("request failed", failed.Message)

		By("Seeing the request's nodes go, and the web pod stay where it was bound, on its Machine")
		expectPodStays := func(g Gomega) {
			current := &corev1.Pod{}
			err := workload.Get(ctx, client.ObjectKeyFromObject(&pod), current)
			g.Expect(err).NotTo(HaveOccurred(), "web pod %s, bound to %s, was removed", pod.Name, boundTo)
			g.Expect(current.DeletionTimestamp).To(BeNil(), "web pod %s is being evicted from %s", pod.Name, boundTo)
			g.Expect(current.Spec.NodeName).To(Equal(boundTo))
			g.Expect(current.Status.Phase).To(Equal(corev1.PodRunning))
			machine := groupMachineOfNode(ctx, g, mgmt, shared, boundTo)
			g.Expect(machine).NotTo(BeNil(), "the Machine of %s, which runs the web pod, is gone", boundTo)
			g.Expect(machine.DeletionTimestamp).To(BeNil(), "Machine %s, which runs the web pod, is being deleted", machine.Name)
			g.Expect(machine.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s, which runs the web pod, is marked for deletion", machine.Name)
		}
		Eventually(func(g Gomega) {
			expectPodStays(g)
			g.Expect(framework.MachinesOf(ctx, g, mgmt, shared)).To(HaveLen(1), "shared keeps more than the web pod's Machine")
			g.Expect(framework.Replicas(ctx, g, mgmt, shared)).To(BeEquivalentTo(1))
			g.Expect(framework.MachinesOf(ctx, g, mgmt, failing)).To(BeEmpty())
			g.Expect(framework.Replicas(ctx, g, mgmt, failing)).To(BeZero())
		}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed())
		Consistently(expectPodStays, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		// Up for the request, then for the web pod, and never beyond.
		framework.ExpectReplicasAtMost(invariants.Replicas(shared), 3)
		AddReportEntry("shared replicas", framework.FormatTrajectory(invariants.Replicas(shared)))
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// pauseMachineSet pauses the MachineSet of md, once it exists, until the
// spec ends: its controller creates no Machine.
func pauseMachineSet(ctx context.Context, mgmt client.Client, md *clusterv1.MachineDeployment) *clusterv1.MachineSet {
	GinkgoHelper()
	var machineSet *clusterv1.MachineSet
	Eventually(func(g Gomega) {
		list := &clusterv1.MachineSetList{}
		g.Expect(mgmt.List(ctx, list, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		machineSet = &list.Items[0]
	}, framework.ClusterReadyTimeout, framework.PollInterval).Should(Succeed(), "MachineDeployment %s has no MachineSet", md.Name)
	setPausedAnnotation(ctx, mgmt, machineSet, true)
	DeferCleanup(func() { setPausedAnnotation(ctx, mgmt, machineSet, false) })
	return machineSet
}

// podSet is a pod set of a ProvisioningRequest: count one-core pods.
type podSet struct {
	count        int32
	nodeSelector map[string]string
}

// createAtomicRequest creates a best-effort-atomic-scale-up
// ProvisioningRequest with a PodTemplate for each pod set, by name.
func createAtomicRequest(ctx context.Context, workload client.Client, namespace, name string, sets map[string]podSet) *provisioningv1.ProvisioningRequest {
	GinkgoHelper()
	request := &provisioningv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec:       provisioningv1.ProvisioningRequestSpec{ProvisioningClassName: provisioningv1.BestEffortAtomicScaleUpProvisioningClass},
	}
	for _, template := range slices.Sorted(maps.Keys(sets)) {
		set := sets[template]
		Expect(workload.Create(ctx, &corev1.PodTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: template},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				NodeSelector: set.nodeSelector,
				Containers: []corev1.Container{{Name: "worker", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
					Requests: framework.CPURequest("1"),
				}}},
			}},
		})).To(Succeed())
		request.Spec.PodSets = append(request.Spec.PodSets, provisioningv1.PodSet{PodTemplateRef: provisioningv1.Reference{Name: template}, Count: set.count})
	}
	Expect(workload.Create(ctx, request)).To(Succeed())
	return request
}

// bindDuringRollbackInput is the input of bindDuringRollback.
type bindDuringRollbackInput struct {
	Management, Workload client.Client
	// Group is the group whose Nodes the pod may be bound to.
	Group *clusterv1.MachineDeployment
	// Pod waits for the spec to bind it.
	Pod *corev1.Pod
	// Request is the ProvisioningRequest being rolled back.
	Request *provisioningv1.ProvisioningRequest
}

// binding is where bindDuringRollback bound the pod.
type binding struct {
	node string
	// chosenByRollback: the rollback had chosen to remove node.
	chosenByRollback bool
	// unschedulableChosen are the Nodes the rollback had chosen that were
	// no longer schedulable (tainted, cordoned) when the spec saw them.
	unschedulableChosen sets.Set[string]
}

// bindDuringRollback binds the pod as a scheduler may: to a Ready Node of
// the group that is schedulable. It waits for the rollback to choose a
// Machine of the group to remove (marked or being deleted), and binds the
// pod to its Node at once if that is still schedulable; once the request
// has failed and no such Node came, to the first schedulable Node.
func bindDuringRollback(ctx context.Context, input bindDuringRollbackInput) binding {
	GinkgoHelper()
	bind := func(name string) {
		Expect(input.Workload.SubResource("binding").Create(ctx, input.Pod, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Namespace: input.Pod.Namespace, Name: input.Pod.Name},
			Target:     corev1.ObjectReference{Kind: "Node", Name: name},
		})).To(Succeed())
		By("Bound the web pod to " + name)
	}
	result := binding{unschedulableChosen: sets.New[string]()}
	deadline := time.Now().Add(framework.ScaleUpTimeout)
	for time.Now().Before(deadline) {
		// Read before the Machines: a request that failed after they were
		// read would have had them all in this read.
		failed := requestFailed(ctx, input.Workload, input.Request)
		var schedulable []string
		for _, machine := range framework.MachinesOf(ctx, Default, input.Management, input.Group) {
			name := machine.Status.NodeRef.Name
			if name == "" {
				continue
			}
			_, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]
			chosen := marked || machine.DeletionTimestamp != nil
			switch {
			case !schedulableNode(ctx, input.Workload, name):
				if chosen {
					result.unschedulableChosen.Insert(name)
				}
			case chosen:
				bind(name)
				result.node, result.chosenByRollback = name, true
				return result
			default:
				schedulable = append(schedulable, name)
			}
		}
		if failed {
			Expect(schedulable).NotTo(BeEmpty(), "no schedulable node of %s is left for the web pod", input.Group.Name)
			slices.Sort(schedulable)
			bind(schedulable[0])
			result.node = schedulable[0]
			return result
		}
		time.Sleep(100 * time.Millisecond)
	}
	Fail("the request's scale-up was not rolled back")
	return result
}

// requestFailed says whether the ProvisioningRequest has failed.
func requestFailed(ctx context.Context, workload client.Client, request *provisioningv1.ProvisioningRequest) bool {
	GinkgoHelper()
	current := &provisioningv1.ProvisioningRequest{}
	Expect(workload.Get(ctx, client.ObjectKeyFromObject(request), current)).To(Succeed())
	return meta.IsStatusConditionTrue(current.Status.Conditions, provisioningv1.FailedCondition)
}

// schedulableNode says whether kube-scheduler could bind a pod to the
// Node: it exists, is not cordoned, has no NoSchedule or NoExecute
// taint, and Kubernetes lets it take pods (nodefacts.KubeletReady).
func schedulableNode(ctx context.Context, workload client.Client, name string) bool {
	GinkgoHelper()
	node := &corev1.Node{}
	if err := workload.Get(ctx, types.NamespacedName{Name: name}, node); err != nil {
		return false
	}
	if node.Spec.Unschedulable || node.DeletionTimestamp != nil {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect == corev1.TaintEffectNoSchedule || taint.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	return nodefacts.KubeletReady(node)
}

// groupMachineOfNode is the Machine of the group whose Node is node, or nil.
func groupMachineOfNode(ctx context.Context, g Gomega, mgmt client.Client, group *clusterv1.MachineDeployment, node string) *clusterv1.Machine {
	for _, machine := range framework.MachinesOf(ctx, g, mgmt, group) {
		if machine.Status.NodeRef.Name == node {
			return &machine
		}
	}
	return nil
}
