package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// StartHeldDrainInput is the input of StartHeldDrain.
type StartHeldDrainInput struct {
	Stack     *localstack.Stack
	Namespace SpecNamespace
	Cluster   *clusterv1.Cluster
	// Spare nodes the group has besides the two, empty and kept from
	// scale-down by the scale-down-disabled annotation on their Node.
	Spare int
	// Spec of the ClusterAutoscaler; FastClusterAutoscalerSpec when nil.
	Spec *autoscalingv1alpha1.ClusterAutoscalerSpec
	// Labels of the ClusterAutoscaler, e.g. cluster.x-k8s.io/watch-filter.
	Labels map[string]string
}

// HeldDrain is a drain the autoscaler started and cannot finish: the pod
// it evicted stays Terminating until the spec lets it go.
type HeldDrain struct {
	// Group has two 4-core nodes and the spare ones, 1 to one more.
	Group *clusterv1.MachineDeployment
	// Nodes are the names of the group's Nodes by Machine name.
	Nodes map[string]string
	// Drained is the node being drained; Kept is filled to 75% and stays.
	Drained, Kept string
	// Spare are the spare nodes.
	Spare []string
	// Small is the Deployment of the evicted pod, Held.
	Small *appsv1.Deployment
	Held  *corev1.Pod
	// ClusterAutoscaler runs with FastClusterAutoscalerSpec.
	ClusterAutoscaler *autoscalingv1alpha1.ClusterAutoscaler
}

// StartHeldDrain creates a group of two nodes whose second one the
// autoscaler drains, and returns once the node is tainted and its pod
// evicted, but held Terminating by a finalizer (and a grace period of
// minutes): the drain is in progress and cannot finish. The finalizer is
// removed after the spec, or earlier with LetGo.
func StartHeldDrain(ctx context.Context, input StartHeldDrainInput) HeldDrain {
	GinkgoHelper()
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	size := 2 + input.Spare
	md, nodes := CreateWorkerGroup(ctx, CreateWorkerGroupInput{Stack: input.Stack, Cluster: input.Cluster, Nodes: size, MaxSize: size + 1})
	d := HeldDrain{Group: md, Nodes: nodes}
	for _, node := range nodes {
		switch {
		case d.Drained == "":
			d.Drained = node
		case d.Kept == "":
			d.Kept = node
		default:
			d.Spare = append(d.Spare, node)
		}
	}
	for _, node := range d.Spare {
		By("Keeping spare node " + node + " from scale-down")
		SetNodeAnnotation(ctx, workload, node, scaledown.ScaleDownDisabledAnnotation, "true")
	}

	By("Filling " + d.Kept + " to 75% so that it stays, and putting a small pod on " + d.Drained)
	CreateWorkload(ctx, WorkloadInput{
		Client: workload, Namespace: input.Namespace.Name, Name: "big", Replicas: 1,
		Requests:     CPURequest("3"),
		NodeSelector: map[string]string{ClusterLabel: input.Cluster.Name, corev1.LabelHostname: d.Kept},
	})
	// The small pod prefers the node to drain, but may move to the other
	// one: the node is unneeded. Its grace period keeps its eviction
	// pending for minutes.
	d.Small = CreateWorkload(ctx, WorkloadInput{
		Client: workload, Namespace: input.Namespace.Name, Name: "small", Replicas: 1,
		Requests:     CPURequest("500m"),
		NodeSelector: map[string]string{ClusterLabel: input.Cluster.Name},
		Mutate: func(template *corev1.PodTemplateSpec) {
			template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](300)
			template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 100,
					Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{d.Drained},
					}}},
				}},
			}}
		},
	})
	pods := WaitForPodsRunning(ctx, workload, d.Small, NodesReadyTimeout)
	Expect(pods[0].Spec.NodeName).To(Equal(d.Drained))
	d.Held = &pods[0]
	By("Holding the small pod with a finalizer: once evicted, it stays Terminating")
	PatchPod(ctx, workload, d.Held, func(pod *corev1.Pod) { pod.Finalizers = append(pod.Finalizers, holdFinalizer) })
	DeferCleanup(func(ctx context.Context) { d.LetGo(ctx, workload) })

	spec := FastClusterAutoscalerSpec(input.Cluster.Name)
	if input.Spec != nil {
		spec = *input.Spec
	}
	d.ClusterAutoscaler = CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: input.Cluster, Spec: spec, Labels: input.Labels})

	By("Waiting until the autoscaler drains " + d.Drained + ": tainted, its pod evicted and Terminating")
	Eventually(func(g Gomega) {
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: d.Drained}, node)).To(Succeed())
		g.Expect(HasDeletionTaint(node)).To(BeTrue(), "Node %s has no deletion taint", d.Drained)
		pod := &corev1.Pod{}
		g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(d.Held), pod)).To(Succeed())
		g.Expect(pod.DeletionTimestamp).NotTo(BeNil(), "pod %s is not evicted", pod.Name)
	}, ScaleDownTimeout, AutoscalerPoll).Should(Succeed())
	return d
}

// LetGo removes the finalizer that holds the evicted pod.
func (d HeldDrain) LetGo(ctx context.Context, workload client.Client) {
	GinkgoHelper()
	PatchPod(ctx, workload, d.Held, func(pod *corev1.Pod) { pod.Finalizers = nil })
}

// CreatePodsForTwoNodes creates three 3-core pods for a Cluster whose only
// node has 4 cores, and waits until the two that do not fit are pending:
// the Cluster needs exactly two more nodes.
func CreatePodsForTwoNodes(ctx context.Context, workload client.Client, namespace SpecNamespace, cluster *clusterv1.Cluster) *appsv1.Deployment {
	GinkgoHelper()
	By("Three 3-core pods: one fits on the node, the two others need exactly two more nodes")
	big := CreateWorkload(ctx, WorkloadInput{
		Client: workload, Namespace: namespace.Name, Name: "big", Replicas: 3,
		Requests:     CPURequest("3"),
		NodeSelector: map[string]string{ClusterLabel: cluster.Name},
	})
	Eventually(func(g Gomega) {
		g.Expect(PendingPods(ctx, g, workload, namespace.Name)).To(Equal(2))
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed())
	return big
}

// ExpectReplicasAtMost fails when a group's replicas went beyond max: the
// group was scaled for more than the pods needed, e.g. twice for the same
// pods.
func ExpectReplicasAtMost(trajectory []ReplicasSeen, max int32) {
	GinkgoHelper()
	Expect(trajectory).NotTo(BeEmpty(), "no replicas were seen")
	for _, seen := range trajectory {
		Expect(seen.Replicas).To(BeNumerically("<=", max), "the group was scaled beyond the %d replicas needed: %s", max, FormatTrajectory(trajectory))
	}
}

// ScaleCycleInput is the input of ScaleCycle.
type ScaleCycleInput struct {
	Stack     *localstack.Stack
	Namespace SpecNamespace
	Cluster   *clusterv1.Cluster
	// Group is a group of 4-core nodes at 1 (CreateWorkerGroup), with room
	// for 3.
	Group *clusterv1.MachineDeployment
	// Name tells the cycle's workloads and steps apart.
	Name string

	// WhilePending, when set, runs once the pods that need two more nodes
	// exist, before the spec waits for them to run.
	WhilePending func()
	// AfterScaleUp, when set, runs once they run on three nodes.
	AfterScaleUp func()
	// BeforeScaleDown, when set, runs once small pods run on every node,
	// just before the big pods go.
	BeforeScaleDown func()
	// AfterScaleDown, when set, runs once the group is back at one node,
	// before the small pods go.
	AfterScaleDown func()
}

// ScaleCycle scales the group of a reliability spec up and down once:
// three 3-core pods need three 4-core nodes; then a 300m pod runs on each
// node and the big pods go, so that two nodes are drained (evictions, not
// just empty nodes), one after the other, back to one node.
func ScaleCycle(ctx context.Context, input ScaleCycleInput) {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	selector := map[string]string{ClusterLabel: input.Cluster.Name}
	By(input.Name + ": three 3-core pods need three nodes")
	big := CreateWorkload(ctx, WorkloadInput{
		Client: workload, Namespace: input.Namespace.Name, Name: "big-" + input.Name, Replicas: 3,
		Requests: CPURequest("3"), NodeSelector: selector,
	})
	if input.WhilePending != nil {
		input.WhilePending()
	}
	WaitForPodsRunning(ctx, workload, big, 2*ScaleUpTimeout)
	Expect(Replicas(ctx, Default, mgmt, input.Group)).To(BeEquivalentTo(3))
	Expect(ClusterNodes(ctx, Default, workload, input.Cluster)).To(HaveLen(3))
	if input.AfterScaleUp != nil {
		input.AfterScaleUp()
	}

	By(input.Name + ": small pods on every node, then the big pods go: two nodes are drained")
	small := CreateWorkload(ctx, WorkloadInput{
		Client: workload, Namespace: input.Namespace.Name, Name: "small-" + input.Name, Replicas: 3,
		Requests: CPURequest("300m"), NodeSelector: selector, Mutate: spreadOverNodes,
	})
	WaitForPodsRunning(ctx, workload, small, NodesReadyTimeout)
	if input.BeforeScaleDown != nil {
		input.BeforeScaleDown()
	}
	DeleteWorkload(ctx, workload, big)
	Eventually(func(g Gomega) {
		g.Expect(Replicas(ctx, g, mgmt, input.Group)).To(BeEquivalentTo(1))
		g.Expect(ClusterNodes(ctx, g, workload, input.Cluster)).To(HaveLen(1))
	}, 2*ScaleDownTimeout, AutoscalerPoll).Should(Succeed(), "the drained nodes did not go")
	WaitForPodsRunning(ctx, workload, small, NodesReadyTimeout)
	if input.AfterScaleDown != nil {
		input.AfterScaleDown()
	}
	DeleteWorkload(ctx, workload, small)
}

// ManagerRestartInput is the input of PrepareManagerRestart.
type ManagerRestartInput struct {
	Stack *localstack.Stack
	// Manager is the running manager the spec kills.
	Manager *localstack.Process
	// Args are the arguments its binary is started again with.
	Args []string
	// Restarted is told about the manager started in its place.
	Restarted func(*localstack.Process)
}

// PrepareManagerRestart checks that the manager runs and returns the
// function that starts it again (as restartedManager) once the spec has
// killed it. Should the spec fail after the kill and before the restart,
// the manager is started again when the spec ends, for the next specs.
func PrepareManagerRestart(ctx context.Context, input ManagerRestartInput) (restart func()) {
	GinkgoHelper()
	manager := input.Manager
	Expect(manager.Exited()).NotTo(BeClosed(), "the manager %s is not running", manager.Name())
	restarted := false
	restart = func() {
		By("Starting the autoscaler manager again, logging to " + restartedManager + ".log")
		p, err := input.Stack.StartProcess(ctx, restartedManager, manager.Binary(), input.Args...)
		Expect(err).NotTo(HaveOccurred())
		input.Restarted(p)
		restarted = true
	}
	DeferCleanup(func() {
		select {
		case <-manager.Exited():
			if !restarted {
				restart()
			}
		default:
		}
	})
	return restart
}

// ExpectReplacementRunning waits until the Deployment's pod that is not
// being deleted runs on node: the evicted pod's replacement.
func ExpectReplacementRunning(ctx context.Context, workload client.Client, deployment *appsv1.Deployment, node string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var live []corev1.Pod
		for _, pod := range PodsOf(ctx, g, workload, deployment) {
			if pod.DeletionTimestamp == nil {
				live = append(live, pod)
			}
		}
		g.Expect(live).To(HaveLen(1))
		g.Expect(live[0].Spec.NodeName).To(Equal(node))
		g.Expect(live[0].Status.Phase).To(Equal(corev1.PodRunning))
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed(), "the replacement of the evicted pod does not run on %s", node)
}

const (
	// holdFinalizer keeps an evicted pod Terminating, so that the drain of
	// its node cannot finish.
	holdFinalizer = "e2e.capi-autoscaler.io/hold"
	// restartedManager is the process name, and log, of the manager the
	// spec starts again.
	restartedManager = "capi-autoscaler-restarted"
)

// ProxiesOf are the fault proxies of the stack's distinct API servers.
func ProxiesOf(stack *localstack.Stack) []*faultproxy.Proxy {
	var proxies []*faultproxy.Proxy
	for _, cluster := range clustersOf(stack) {
		proxies = append(proxies, cluster.Proxy)
	}
	return proxies
}

// AppendFigures adds a line of figures to file in the stack's log directory.
func AppendFigures(stack *localstack.Stack, file, figures string) {
	f, err := os.OpenFile(filepath.Join(stack.LogDir(), file), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	_, err = fmt.Fprintln(f, figures)
	Expect(err).NotTo(HaveOccurred())
}

// OnlyNode is the name of the only Node of nodes, the names of Nodes by
// Machine name that CreateWorkerGroup returns.
func OnlyNode(nodes map[string]string) string {
	GinkgoHelper()
	Expect(nodes).To(HaveLen(1))
	for _, node := range nodes {
		return node
	}
	return ""
}

// CreateWorkerGroupInput is the input of CreateWorkerGroup.
type CreateWorkerGroupInput struct {
	Stack   *localstack.Stack
	Cluster *clusterv1.Cluster
	// Nodes the group starts with; its min size is 1.
	Nodes int
	// MaxSize the group may grow to.
	MaxSize int
	// Machine is the spec of its machines; 4-core nodes when zero.
	Machine infrav1.SimMachineSpec
}

// CreateWorkerGroup creates the node group "workers" of the reliability
// specs, labelled with ClusterLabel, waits until its Nodes are Ready, and
// returns it with the names of its Nodes by Machine name.
func CreateWorkerGroup(ctx context.Context, input CreateWorkerGroupInput) (*clusterv1.MachineDeployment, map[string]string) {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	machine := input.Machine
	if machine.Capacity == nil {
		machine = SimMachine("4")
	}
	By(fmt.Sprintf("Creating a group of %d %s-core nodes, 1 to %d", input.Nodes, machine.Capacity.Cpu(), input.MaxSize))
	md := CreateNodeGroup(ctx, CreateNodeGroupInput{
		Client: mgmt, Cluster: input.Cluster, Name: "workers",
		Replicas:    ptr.To(int32(input.Nodes)),
		Annotations: SizeAnnotations(1, input.MaxSize),
		Machine:     machine,
		Labels:      map[string]string{ClusterLabel: input.Cluster.Name},
	})
	nodes := WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: input.Nodes})
	return md, nodes
}
