//go:build kind

package kind

import (
	"maps"
	"slices"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// bigCPU is more than half a worker's 2 cores: one such pod per node, and
// a node running one is not underutilized.
const bigCPU = "1200m"

// The specs share one workload cluster and run in order: each leaves it at
// its groups' min sizes. Those labelled kind-smoke are the ones `make test`
// runs.
var _ = Describe("capi-autoscaler on a workload cluster from Cluster API's ClusterClass for CAPD", Ordered, Label("kind"), func() {
	var (
		cluster  *clusterv1.Cluster
		workload ctrlclient.Client
	)

	BeforeAll(func() {
		expectProvidersRunning()
		objs, err := workloadClusterObjects(ctx, clusterctl)
		Expect(err).NotTo(HaveOccurred())
		start := time.Now()
		for _, obj := range objs {
			obj.SetNamespace(workloadClusterNamespace)
			Expect(apply(ctx, management, &obj)).To(Succeed())
		}
		cluster = &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: workloadClusterNamespace, Name: workloadClusterName}}
		DeferCleanup(func() {
			By("Deleting the ClusterAutoscaler, then the workload cluster")
			ca := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: cluster.Name}}
			Expect(ctrlclient.IgnoreNotFound(management.Delete(ctx, ca))).To(Succeed())
			Expect(ctrlclient.IgnoreNotFound(management.Delete(ctx, cluster))).To(Succeed())
			Eventually(func() error {
				return management.Get(ctx, ctrlclient.ObjectKeyFromObject(cluster), cluster)
			}).WithTimeout(5 * time.Minute).WithPolling(5 * time.Second).Should(Satisfy(apierrors.IsNotFound))
		})

		By("Waiting for the Cluster to be Available")
		Eventually(func(g Gomega) {
			g.Expect(management.Get(ctx, ctrlclient.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
			g.Expect(cluster.Status.Conditions).To(ContainElement(And(
				HaveField("Type", clusterv1.AvailableCondition),
				HaveField("Status", metav1.ConditionTrue),
			)))
		}).WithTimeout(10 * time.Minute).WithPolling(5 * time.Second).Should(Succeed())
		AddReportEntry("workload cluster Available", time.Since(start).Round(time.Second).String())
		workload = workloadClient(ctx, cluster)

		By("Turning autoscaling on for the workload cluster")
		fastClusterAutoscaler(ctx, cluster)
	})

	It("starts each MachineDeployment at its min size, with the topology's bounds, Machines Running on CAPD containers", Label("kind-smoke"), func() {
		for _, group := range []workerGroup{workers, fromZero} {
			md := machineDeployment(Default, group)
			Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMinSizeAnnotation, strconv.Itoa(group.minSize)))
			Expect(md.Annotations).To(HaveKeyWithValue(clusterv1.AutoscalerMaxSizeAnnotation, strconv.Itoa(group.maxSize)))
			expectGroupSize(workload, group, group.minSize)
		}
		Expect(capdContainers(Default)).To(ContainElement(workloadClusterName+"-lb"), "CAPD's load balancer")
	})

	It("adds a node when a pod fits on none, and the pod runs on it", Label("kind-smoke"), func() {
		before := expectGroupSize(workload, workers, 1)
		// The next spec removes both workloads.
		first := pauseWorkload{name: "first", replicas: 1, cpu: bigCPU, group: workers}.create(ctx, workload)
		Expect(podsRunning(workload, first)[0].Spec.NodeName).To(BeElementOf(mapValues(before)))

		By("Creating a second pod that fits on no node")
		second := pauseWorkload{name: "second", replicas: 1, cpu: bigCPU, group: workers}.create(ctx, workload)
		after := expectGroupSize(workload, workers, 2)
		added := sets.List(sets.New(mapValues(after)...).Difference(sets.New(mapValues(before)...)))
		Expect(added).To(HaveLen(1))
		pod := podsRunning(workload, second)[0]
		Expect(pod.Spec.NodeName).To(Equal(added[0]), "the pod runs on the added node")
		Expect(podEventReasons(workload, pod)).To(ContainElement("TriggeredScaleUp"))
	})

	It("removes an emptied node after the unneeded time, down to the min size: the Machine it marked goes, with its container", Label("kind-smoke"), func() {
		before := expectGroupSize(workload, workers, 2)
		By("Emptying both workers")
		deleteWorkload(workload, "first")
		deleteWorkload(workload, "second")

		By("Waiting for the group to shrink to its min size, noting the Machines the autoscaler marks")
		marked := sets.New[string]()
		Eventually(func(g Gomega) {
			machines := groupMachines(g, workers)
			marked.Insert(markedMachines(machines)...)
			g.Expect(machineDeployment(g, workers).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
			g.Expect(machines).To(HaveLen(1))
		}).WithTimeout(machineTimeout).WithPolling(time.Second).Should(Succeed())
		after := expectGroupSize(workload, workers, 1)

		var removed []string
		for machine := range before {
			if _, ok := after[machine]; !ok {
				removed = append(removed, machine)
			}
		}
		Expect(removed).To(HaveLen(1))
		Expect(marked.UnsortedList()).To(ConsistOf(removed[0]), "the autoscaler marked the Machine that went, and no other")
		Expect(capdContainers(Default)).NotTo(ContainElement(removed[0]), "the removed Machine's container is gone")
		err := workload.Get(ctx, ctrlclient.ObjectKey{Name: before[removed[0]]}, &corev1.Node{})
		Expect(err).To(Satisfy(apierrors.IsNotFound), "the removed Machine's Node is gone")
		Expect(taintedNodes(Default, workload)).To(BeEmpty())
	})

	It("grows a group from zero for a pod only its nodes take, and shrinks it to zero when the pod goes", func() {
		expectGroupSize(workload, fromZero, 0)
		app := pauseWorkload{name: "needs-from-zero", replicas: 1, cpu: "500m", group: fromZero}.create(ctx, workload)
		nodes := expectGroupSize(workload, fromZero, 1)
		Expect(podsRunning(workload, app)[0].Spec.NodeName).To(BeElementOf(mapValues(nodes)))

		By("Removing the pod: the group goes back to zero")
		deleteWorkload(workload, app.Name)
		expectGroupSize(workload, fromZero, 0)
	})

	It("gives a node back when the manager is killed while draining it, and removes it cleanly later", func() {
		drain := startHeldDrain(workload)

		By("Killing the manager in the middle of the drain")
		// The pod cannot go, and the node must not either: the restarted
		// manager has no reason of its own to drain it again.
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: drain.drained}}
		patchObject(workload, node, func(node *corev1.Node) {
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, scaledown.ScaleDownDisabledAnnotation, "true")
		})
		killManager()

		By("Seeing the restarted manager give the node back: no taint, no mark, no replica lost")
		Eventually(func(g Gomega) {
			g.Expect(taintedNodes(g, workload)).To(BeEmpty())
		}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(taintedNodes(g, workload)).To(BeEmpty())
			g.Expect(machineDeployment(g, workers).Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
			machines := groupMachines(g, workers)
			g.Expect(machines).To(HaveLen(2))
			g.Expect(markedMachines(machines)).To(BeEmpty())
		}).WithTimeout(20 * time.Second).WithPolling(2 * time.Second).Should(Succeed())

		By("Letting the held pod go and allowing scale-down again: " + drain.drained + " is removed cleanly")
		forceDelete(workload, &drain.held)
		patchObject(workload, node, func(node *corev1.Node) { delete(node.Annotations, scaledown.ScaleDownDisabledAnnotation) })
		nodes := expectGroupSize(workload, workers, 1)
		Expect(mapValues(nodes)).To(ConsistOf(drain.kept))
		Expect(taintedNodes(Default, workload)).To(BeEmpty())
		Expect(markedMachines(groupMachines(Default, workers))).To(BeEmpty())
		Expect(podsRunning(workload, drain.small)[0].Spec.NodeName).To(Equal(drain.kept))
	})

	// kubernetes/autoscaler #8494, #5465: a drain that ends during a
	// rollout and lowers the MachineDeployment's replicas lets Cluster
	// API's rolling-update planner remove a Machine nobody chose.
	It("gives a node back when its MachineDeployment starts rolling out during the drain, and lowers no replicas during the rollout", func() {
		// The rollout replaces every Machine: the last spec of the container.
		drain := startHeldDrain(workload)

		By("Rolling the MachineDeployment out through the Cluster's topology in the middle of the drain")
		patchObject(management, cluster, func(cluster *clusterv1.Cluster) {
			for i := range cluster.Spec.Topology.Workers.MachineDeployments {
				if topology := &cluster.Spec.Topology.Workers.MachineDeployments[i]; topology.Name == workers.name {
					topology.Rollout.After = metav1.Now()
				}
			}
		})

		By("Seeing the drain given back at once, while the held pod still terminates")
		Eventually(func(g Gomega) {
			g.Expect(taintedNodes(g, workload)).To(BeEmpty())
		}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		forceDelete(workload, &drain.held)

		By("Watching the rollout, the held pod gone: the autoscaler lowers no replicas and marks no Machine")
		// The drain would have ended here and lowered the replicas. Once
		// every Machine is up to date, removing an emptied node is right.
		Consistently(func(g Gomega) {
			md := machineDeployment(g, workers)
			if ptr.Deref(md.Status.UpToDateReplicas, 0) >= ptr.Deref(md.Spec.Replicas, 0) {
				return
			}
			g.Expect(md.Spec.Replicas).To(HaveValue(BeNumerically(">=", 2)))
			g.Expect(markedMachines(groupMachines(g, workers))).To(BeEmpty())
		}).WithTimeout(90 * time.Second).WithPolling(time.Second).Should(Succeed())
	})
})

// heldDrain is a drain of a node of the workers group that cannot finish
// yet: the pod it evicted takes minutes to terminate.
type heldDrain struct {
	// drained is the node being drained; kept holds a big pod and stays.
	drained, kept string
	// small is the Deployment of the evicted pod, held.
	small *appsv1.Deployment
	held  corev1.Pod
}

// startHeldDrain grows the workers group from its one node to two, one
// big pod on each, puts a small pod slow to terminate on the second and
// removes that node's big pod: it returns once the autoscaler drains the
// node, tainted and its small pod evicted but still Terminating.
func startHeldDrain(workload ctrlclient.Client) heldDrain {
	GinkgoHelper()
	expectGroupSize(workload, workers, 1)
	first := pauseWorkload{name: "first", replicas: 1, cpu: bigCPU, group: workers}.create(ctx, workload)
	DeferCleanup(deleteWorkload, workload, first.Name)
	d := heldDrain{kept: podsRunning(workload, first)[0].Spec.NodeName}
	second := pauseWorkload{name: "second", replicas: 1, cpu: bigCPU, group: workers}.create(ctx, workload)
	expectGroupSize(workload, workers, 2)
	d.drained = podsRunning(workload, second)[0].Spec.NodeName

	By("Putting on " + d.drained + " a small pod that takes minutes to terminate, and emptying the node of the rest")
	d.small = pauseWorkload{name: "small", replicas: 1, cpu: "300m", group: workers, mutate: func(template *corev1.PodTemplateSpec) {
		slowToTerminate(template)
		template.Spec.Affinity = preferNode(d.drained)
	}}.create(ctx, workload)
	DeferCleanup(deleteWorkload, workload, d.small.Name)
	d.held = podsRunning(workload, d.small)[0]
	Expect(d.held.Spec.NodeName).To(Equal(d.drained))
	DeferCleanup(forceDelete, workload, &d.held)
	deleteWorkload(workload, second.Name)

	By("Waiting until the autoscaler drains " + d.drained + ": tainted, the small pod evicted and still Terminating")
	Eventually(func(g Gomega) {
		g.Expect(taintedNodes(g, workload)).To(ConsistOf(d.drained))
		pod := &corev1.Pod{}
		g.Expect(workload.Get(ctx, ctrlclient.ObjectKeyFromObject(&d.held), pod)).To(Succeed())
		g.Expect(pod.DeletionTimestamp).NotTo(BeNil(), "pod %s is not evicted", pod.Name)
	}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return d
}

// podEventReasons lists the reasons of pod's events.
func podEventReasons(workload ctrlclient.Client, pod corev1.Pod) []string {
	GinkgoHelper()
	events := &corev1.EventList{}
	Expect(workload.List(ctx, events, ctrlclient.InNamespace(pod.Namespace), ctrlclient.MatchingFields{"involvedObject.name": pod.Name})).To(Succeed())
	reasons := make([]string, 0, len(events.Items))
	for _, event := range events.Items {
		reasons = append(reasons, event.Reason)
	}
	return reasons
}

// preferNode makes a pod prefer the named node.
func preferNode(name string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{name},
			}}},
		}},
	}}
}

func mapValues(m map[string]string) []string {
	return slices.Collect(maps.Values(m))
}
