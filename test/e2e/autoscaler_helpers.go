//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// Intervals of the autoscaling specs. The machine the suite runs on may be
// small and busy: the timeouts are generous, the polling is not aggressive.
var (
	ScaleUpTimeout   = 3 * time.Minute
	ScaleDownTimeout = 3 * time.Minute
	AutoscalerPoll   = 1 * time.Second
	// ReleaseTimeout bounds how long the autoscaler may take to give a
	// node back once its removal no longer holds: a few loops of a second.
	ReleaseTimeout = 30 * time.Second
)

// ClusterLabel, set on the Machines of a spec's node groups, is propagated
// by Cluster API to their Nodes. The spec's pods select it: in the
// self-hosted topology every Cluster's Nodes share one API server and one
// scheduler.
const ClusterLabel = "e2e.node.cluster.x-k8s.io/cluster"

// HasDeletionTaint says whether node carries the taint the autoscaler puts
// on the Nodes it removes.
func HasDeletionTaint(node *corev1.Node) bool {
	return nodefacts.HasTaint(node, nodefacts.ToBeDeletedTaint)
}

// BuildManager builds the autoscaler manager of the repository at repoRoot
// into dir, with the build tags given, and returns the binary's path.
func BuildManager(ctx context.Context, repoRoot, dir string, tags ...string) string {
	binary := filepath.Join(dir, "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", strings.Join(tags, ","), "-o", binary, ".")
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build of the manager: %s", out)
	return binary
}

// SpecNamespace is the namespace of one spec: in the management cluster for
// its Cluster API objects and, under the same name, in the workload cluster
// for its pods.
type SpecNamespace struct {
	Name string
}

// CreateSpecNamespace creates a namespace named prefix-<random> in the
// management and the workload cluster of stack, and deletes it again after
// the spec.
func CreateSpecNamespace(ctx context.Context, stack *localstack.Stack, prefix string) SpecNamespace {
	name := prefix + "-" + rand.String(6)
	clients := []client.Client{stack.Management.Client}
	if stack.Workload != stack.Management {
		clients = append(clients, stack.Workload.Client)
	}
	for _, c := range clients {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(c.Create(ctx, namespace)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(c.Delete(ctx, namespace))).To(Succeed())
		})
	}
	return SpecNamespace{Name: name}
}

// FastClusterAutoscalerSpec is the spec of a ClusterAutoscaler for
// clusterName whose loops and delays are short enough for a test: a loop
// every second, nodes removed 10s after they became unneeded, no delay
// after scaling. It reaches the workload cluster as WorkloadServiceAccount.
func FastClusterAutoscalerSpec(clusterName string) autoscalingv1alpha1.ClusterAutoscalerSpec {
	return autoscalingv1alpha1.ClusterAutoscalerSpec{
		ClusterName:                 clusterName,
		WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: WorkloadKubeconfigSecretName(clusterName)},
		ScanInterval:                &metav1.Duration{Duration: time.Second},
		ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
			DelayAfterAdd:     &metav1.Duration{},
			DelayAfterDelete:  &metav1.Duration{},
			DelayAfterFailure: &metav1.Duration{Duration: 5 * time.Second},
			UnneededTime:      &metav1.Duration{Duration: 10 * time.Second},
		},
		MaxNodeProvisionTime: &metav1.Duration{Duration: 2 * time.Minute},
		Backoff: &autoscalingv1alpha1.BackoffConfig{
			Initial: &metav1.Duration{Duration: 10 * time.Second},
			Max:     &metav1.Duration{Duration: time.Minute},
		},
		LogVerbosity: ptr.To[int32](2),
	}
}

// CreateClusterAutoscalerInput is the input of CreateClusterAutoscaler.
type CreateClusterAutoscalerInput struct {
	// Client talks to the management cluster.
	Client  client.Client
	Cluster *clusterv1.Cluster
	Spec    autoscalingv1alpha1.ClusterAutoscalerSpec
}

// CreateClusterAutoscaler turns autoscaling on for a Cluster and waits
// until the autoscaler runs its loop, reporting Ready.
func CreateClusterAutoscaler(ctx context.Context, input CreateClusterAutoscalerInput) *autoscalingv1alpha1.ClusterAutoscaler {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Cluster.Namespace, Name: input.Cluster.Name},
		Spec:       input.Spec,
	}
	Expect(input.Client.Create(ctx, ca)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(input.Client.Get(ctx, client.ObjectKeyFromObject(ca), ca)).To(Succeed())
		g.Expect(ca.Status.Conditions).To(ContainElement(And(
			HaveField("Type", autoscalingv1alpha1.ReadyCondition), HaveField("Status", metav1.ConditionTrue))))
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed(), "ClusterAutoscaler %s/%s is not Ready", ca.Namespace, ca.Name)
	return ca
}

// NodeGroupID is the ID of the node group of a MachineDeployment, as the
// ClusterAutoscaler status and the expander priorities name it.
func NodeGroupID(md *clusterv1.MachineDeployment) string {
	return scalable.ID(scalable.KindMachineDeployment, md.Namespace, md.Name)
}

// NodeGroupRow returns the status row of md's node group.
func NodeGroupRow(g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, md *clusterv1.MachineDeployment) autoscalingv1alpha1.NodeGroupStatus {
	return nodeGroupRowByID(g, c, ca, NodeGroupID(md))
}

// nodeGroupRowByID returns the status row of the node group id.
func nodeGroupRowByID(g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, id string) autoscalingv1alpha1.NodeGroupStatus {
	current := GetClusterAutoscaler(g, c, ca)
	for _, row := range current.Status.NodeGroups {
		if row.ID == id {
			return row
		}
	}
	g.Expect(current.Status.NodeGroups).To(ContainElement(HaveField("ID", id)), "no status row for %s", id)
	return autoscalingv1alpha1.NodeGroupStatus{}
}

// Replicas is the replica count of md as the API server has it now.
func Replicas(g Gomega, c client.Client, md *clusterv1.MachineDeployment) int32 {
	current := &clusterv1.MachineDeployment{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(md), current)).To(Succeed())
	return ptr.Deref(current.Spec.Replicas, 0)
}

// MachinesOf lists the Machines of md.
func MachinesOf(g Gomega, c client.Client, md *clusterv1.MachineDeployment) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
	return machines.Items
}

// WaitForNodeGroupNodesInput is the input of WaitForNodeGroupNodes.
type WaitForNodeGroupNodesInput struct {
	Management client.Client
	Workload   client.Client
	Group      *clusterv1.MachineDeployment
	Count      int
}

// WaitForNodeGroupNodes waits until md has exactly Count Running Machines
// whose Nodes are Ready, and returns the names of those Nodes by Machine
// name.
func WaitForNodeGroupNodes(ctx context.Context, input WaitForNodeGroupNodesInput) map[string]string {
	var nodes map[string]string
	Eventually(func(g Gomega) {
		machines := MachinesOf(g, input.Management, input.Group)
		g.Expect(machines).To(HaveLen(input.Count))
		for _, m := range machines {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		}
		nodes = readyNodes(g, input.Workload, machines)
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed(), "node group %s does not have %d Ready Nodes", input.Group.Name, input.Count)
	return nodes
}

// readyNodes expects every Machine to have a Node that is Ready, and
// returns the names of those Nodes by Machine name.
func readyNodes(g Gomega, workload client.Client, machines []clusterv1.Machine) map[string]string {
	nodes := make(map[string]string, len(machines))
	for _, m := range machines {
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no nodeRef", m.Name)
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(nodefacts.KubeletReady(node)).To(BeTrue(), "Node %s", node.Name)
		nodes[m.Name] = node.Name
	}
	return nodes
}

// WorkloadInput describes a Deployment of pause pods.
type WorkloadInput struct {
	// Client talks to the workload cluster.
	Client    client.Client
	Namespace string
	Name      string
	Replicas  int32
	// Requests of the pod's only container.
	Requests corev1.ResourceList
	// NodeSelector of the pods; include ClusterLabel to keep them on the
	// spec's Cluster.
	NodeSelector map[string]string
	// PriorityClassName of the pods, when not empty.
	PriorityClassName string
	// Mutate, when set, changes the pod template before the Deployment is
	// created (finalizers, affinity, a grace period...), so that no pod ever
	// runs without the change.
	Mutate func(*corev1.PodTemplateSpec)
}

// CreateWorkload creates a Deployment of pause pods.
func CreateWorkload(ctx context.Context, input WorkloadInput) *appsv1.Deployment {
	labels := map[string]string{"app": input.Name}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(input.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: input.NodeSelector,
					// kwok deletes evicted pods at once; a grace period
					// would only slow the drains down.
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name:      "app",
						Image:     "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: input.Requests},
					}},
				},
			},
		},
	}
	deployment.Spec.Template.Spec.PriorityClassName = input.PriorityClassName
	if input.Mutate != nil {
		input.Mutate(&deployment.Spec.Template)
	}
	Expect(input.Client.Create(ctx, deployment)).To(Succeed())
	return deployment
}

// SpreadOverZones is a WorkloadInput.Mutate that spreads the pods over the
// zones with maxSkew 1, as a hard constraint.
func SpreadOverZones(template *corev1.PodTemplateSpec) {
	template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: template.Labels},
	}}
}

// PodsOf lists the pods of a Deployment created by CreateWorkload.
func PodsOf(g Gomega, c client.Client, deployment *appsv1.Deployment) []corev1.Pod {
	return podsSelected(g, c, deployment.Namespace, deployment.Spec.Selector)
}

// WaitForPodsRunning waits until every pod of deployment runs and returns
// the pods.
func WaitForPodsRunning(ctx context.Context, c client.Client, deployment *appsv1.Deployment, timeout time.Duration) []corev1.Pod {
	return waitForPodsRunning(ctx, c, "Deployment "+deployment.Name, deployment.Namespace, deployment.Spec.Selector,
		int(ptr.Deref(deployment.Spec.Replicas, 1)), timeout)
}

// podsSelected lists the pods of a workload by its selector's labels.
func podsSelected(g Gomega, c client.Client, namespace string, selector *metav1.LabelSelector) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(selector.MatchLabels))).To(Succeed())
	return pods.Items
}

// waitForPodsRunning waits until the workload has its replicas, all
// Running, and returns them.
func waitForPodsRunning(ctx context.Context, c client.Client, workload, namespace string, selector *metav1.LabelSelector, replicas int, timeout time.Duration) []corev1.Pod {
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		pods = podsSelected(g, c, namespace, selector)
		g.Expect(pods).To(HaveLen(replicas))
		for _, pod := range pods {
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s on %q", pod.Name, pod.Spec.NodeName)
		}
	}, timeout, AutoscalerPoll).WithContext(ctx).Should(Succeed(), "pods of %s are not all Running", workload)
	return pods
}

// PodsPerNode is how many pods requesting requests fit on a node of
// capacity, by every resource the pods request and the node's pod count.
func PodsPerNode(capacity, requests corev1.ResourceList) int {
	fit := int(capacity.Pods().Value())
	for name, request := range requests {
		available := capacity[name]
		fit = min(fit, int(available.MilliValue()/request.MilliValue()))
	}
	return fit
}

// DeleteWorkload deletes a Deployment and waits until its pods are gone.
func DeleteWorkload(ctx context.Context, c client.Client, deployment *appsv1.Deployment) {
	Expect(c.Delete(ctx, deployment, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(PodsOf(g, c, deployment)).To(BeEmpty())
		err := c.Get(ctx, client.ObjectKeyFromObject(deployment), &appsv1.Deployment{})
		g.Expect(err).To(Satisfy(apierrors.IsNotFound))
	}, DeletionTimeout, AutoscalerPoll).Should(Succeed(), "Deployment %s is not gone", deployment.Name)
}

// PodEvents lists the events with reason on pods of namespace, by pod name.
func PodEvents(g Gomega, c client.Client, namespace, reason string) map[string][]corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
	byPod := map[string][]corev1.Event{}
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == "Pod" && event.Reason == reason {
			byPod[event.InvolvedObject.Name] = append(byPod[event.InvolvedObject.Name], event)
		}
	}
	return byPod
}

// NodeNames lists the names of the Nodes of the workload cluster.
func NodeNames(c client.Client) sets.Set[string] {
	nodes := &corev1.NodeList{}
	Expect(c.List(ctx, nodes)).To(Succeed())
	names := sets.New[string]()
	for _, node := range nodes.Items {
		names.Insert(node.Name)
	}
	return names
}

// ExpectPlannedPodsScheduledInput is the input of
// ExpectPlannedPodsScheduledOnNewNodes.
type ExpectPlannedPodsScheduledInput struct {
	// Client talks to the workload cluster.
	Client client.Client
	// Workloads whose pods the autoscaler planned for.
	Workloads []*appsv1.Deployment
	// NodesBefore are the Nodes that existed before the scale-up.
	NodesBefore sets.Set[string]
}

// ExpectPlannedPodsScheduledOnNewNodes checks that the autoscaler and
// kube-scheduler agree: every pod of the workloads with a TriggeredScaleUp
// event, that is every pod the autoscaler added nodes for, runs on a Node
// that did not exist before the scale-up. It returns the pods the
// autoscaler planned for.
func ExpectPlannedPodsScheduledOnNewNodes(ctx context.Context, input ExpectPlannedPodsScheduledInput) sets.Set[string] {
	By("Checking that kube-scheduler put every pod the autoscaler planned for on the new nodes")
	planned := sets.New[string]()
	Eventually(func(g Gomega) {
		planned.Clear()
		for _, deployment := range input.Workloads {
			triggered := PodEvents(g, input.Client, deployment.Namespace, "TriggeredScaleUp")
			for _, pod := range PodsOf(g, input.Client, deployment) {
				if _, ok := triggered[pod.Name]; !ok {
					continue
				}
				planned.Insert(pod.Name)
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", pod.Name)
				g.Expect(input.NodesBefore.Has(pod.Spec.NodeName)).To(BeFalse(),
					"pod %s that triggered the scale-up runs on %s, which existed before", pod.Name, pod.Spec.NodeName)
			}
		}
		g.Expect(planned).NotTo(BeEmpty(), "no pod has a TriggeredScaleUp event")
	}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
	return planned
}

// DeleteAutoscaledClusterInput is the input of DeleteAutoscaledCluster.
type DeleteAutoscaledClusterInput struct {
	Management        client.Client
	Workload          client.Client
	ClusterAutoscaler *autoscalingv1alpha1.ClusterAutoscaler
	Cluster           *clusterv1.Cluster
}

// DeleteAutoscaledCluster turns autoscaling off, removes the workloads of
// the Cluster's namespace so that its Nodes drain at once, and deletes the
// Cluster.
func DeleteAutoscaledCluster(ctx context.Context, input DeleteAutoscaledClusterInput) {
	By("Deleting the ClusterAutoscaler")
	DeleteClusterAutoscaler(input.Management, input.ClusterAutoscaler)

	By("Deleting the workloads")
	Expect(input.Workload.DeleteAllOf(ctx, &appsv1.Deployment{}, client.InNamespace(input.Cluster.Namespace))).To(Succeed())
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(input.Workload.List(ctx, pods, client.InNamespace(input.Cluster.Namespace))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}, DeletionTimeout, AutoscalerPoll).Should(Succeed())

	deleteCluster(input.Management, input.Cluster)
}

// SimMachine is a simulated machine with cpu cores, 8Gi of memory and 110
// pods.
func SimMachine(cpu string) infrav1.SimMachineSpec {
	return infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}}
}

// CPURequest is a request of cpu cores.
func CPURequest(cpu string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
}

// SizeAnnotations are the autoscaler's min and max size annotations of a
// node group.
func SizeAnnotations(minSize, maxSize int) map[string]string {
	return map[string]string{
		clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(minSize),
		clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(maxSize),
	}
}

// ClusterNodes lists the Nodes of the workload cluster that belong to
// cluster (by ClusterLabel).
func ClusterNodes(g Gomega, workload client.Client, cluster *clusterv1.Cluster) []corev1.Node {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes, client.MatchingLabels{ClusterLabel: cluster.Name})).To(Succeed())
	return nodes.Items
}

// CountNodes counts all Nodes of the workload cluster.
func CountNodes(g Gomega, workload client.Client) int {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	return len(nodes.Items)
}

// ClusterCores sums the cpu capacity of every Node of the workload cluster,
// in whole cores (rounded up).
func ClusterCores(g Gomega, workload client.Client) int64 {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	var milli int64
	for _, node := range nodes.Items {
		milli += node.Status.Capacity.Cpu().MilliValue()
	}
	return (milli + 999) / 1000
}

// PendingPods counts the pods of namespace the scheduler could not place.
func PendingPods(g Gomega, workload client.Client, namespace string) int {
	pods := &corev1.PodList{}
	g.Expect(workload.List(ctx, pods, client.InNamespace(namespace))).To(Succeed())
	pending := 0
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			pending++
		}
	}
	return pending
}

// GetClusterAutoscaler reads the ClusterAutoscaler again.
func GetClusterAutoscaler(g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) *autoscalingv1alpha1.ClusterAutoscaler {
	current := &autoscalingv1alpha1.ClusterAutoscaler{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ca), current)).To(Succeed())
	return current
}

// PatchClusterAutoscalerSpec changes the spec of a ClusterAutoscaler.
func PatchClusterAutoscalerSpec(c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, mutate func(*autoscalingv1alpha1.ClusterAutoscalerSpec)) {
	GinkgoHelper()
	patchObject(c, ca.DeepCopy(), false, func(current *autoscalingv1alpha1.ClusterAutoscaler) { mutate(&current.Spec) })
}

// DeleteClusterAutoscaler deletes a ClusterAutoscaler and waits until the
// manager removed its finalizer and it is gone.
func DeleteClusterAutoscaler(c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(c.Delete(ctx, ca))).To(Succeed())
	Eventually(func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(ca), &autoscalingv1alpha1.ClusterAutoscaler{})
	}, DeletionTimeout, AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound), "ClusterAutoscaler %s/%s is not gone", ca.Namespace, ca.Name)
}

// ObjectEvents lists the events of namespace about the object of kind and
// name with reason, as the core API shows them.
func ObjectEvents(g Gomega, c client.Client, namespace, kind, name, reason string) []corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
	var out []corev1.Event
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == kind && event.InvolvedObject.Name == name && event.Reason == reason {
			out = append(out, event)
		}
	}
	return out
}

// EventMessages are the messages of events.
func EventMessages(events []corev1.Event) []string {
	messages := make([]string, 0, len(events))
	for _, event := range events {
		messages = append(messages, event.Message)
	}
	return messages
}

// patchObject reads obj again, changes it with mutate and patches it with an
// optimistic lock, retrying on conflicts; obj ends up as patched. With
// ignoreNotFound, an object that is gone is left alone.
func patchObject[T client.Object](c client.Client, obj T, ignoreNotFound bool, mutate func(T)) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if ignoreNotFound && apierrors.IsNotFound(err) {
			return
		}
		g.Expect(err).NotTo(HaveOccurred())
		before := obj.DeepCopyObject().(client.Object)
		mutate(obj)
		err = c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		if ignoreNotFound {
			err = client.IgnoreNotFound(err)
		}
		g.Expect(err).NotTo(HaveOccurred())
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
}

// patchPod changes a pod; a pod that is gone is left alone.
func patchPod(workload client.Client, pod *corev1.Pod, mutate func(*corev1.Pod)) {
	GinkgoHelper()
	patchObject(workload, pod.DeepCopy(), true, mutate)
}

// setNodeLabel sets a label of the Node name, or removes it when value is
// empty.
func setNodeLabel(workload client.Client, name, key, value string) {
	GinkgoHelper()
	patchObject(workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, func(node *corev1.Node) {
		setOrDelete(&node.Labels, key, value)
	})
}

// setNodeAnnotation sets an annotation of the Node name, or removes it when
// value is empty.
func setNodeAnnotation(workload client.Client, name, key, value string) {
	GinkgoHelper()
	patchObject(workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, func(node *corev1.Node) {
		setOrDelete(&node.Annotations, key, value)
	})
}

// setOrDelete sets key in *m to value, or deletes it when value is empty.
func setOrDelete(m *map[string]string, key, value string) {
	if value == "" {
		delete(*m, key)
		return
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
}
