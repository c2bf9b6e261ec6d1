package controller

import (
	"encoding/json"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

const (
	// unreachableServer refuses connections: nothing listens on port 1.
	unreachableServer = "https://127.0.0.1:1"
	// waitTimeout bounds every wait for the controller.
	waitTimeout = 30 * time.Second
	// keptTaint is a taint that is not the autoscaler's.
	keptTaint = "example.com/dedicated"
)

var _ = Describe("ClusterAutoscaler controller", Ordered, func() {
	var (
		// reachable is a self-hosted workload cluster: its kubeconfig
		// points at the envtest API server.
		reachable *testenv.Fixture
		// unreachable has a kubeconfig pointing at a closed port.
		unreachable   *testenv.Fixture
		reachableCA   types.NamespacedName
		unreachableCA types.NamespacedName
		deployment    *clusterv1.MachineDeployment
		machineSet    *clusterv1.MachineSet
		machines      []*clusterv1.Machine
		nodes         []*corev1.Node
	)

	BeforeAll(func() {
		reachable = newWorkloadCluster(env.Config.Host)
		deployment = reachable.MachineDeployment("md-0", 2, map[string]string{
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
		})
		reachable.Create(ctx, deployment)
		machineSet = reachable.MachineSet("md-0-a", 2, nil, deployment)
		reachable.Create(ctx, machineSet)
		for _, name := range []string{"machine-0", "machine-1"} {
			providerID := "test:///" + reachable.Namespace + "/" + name
			machine := reachable.Machine(name, machineSet)
			machine.Spec.ProviderID = providerID
			node := reachable.Node(name, providerID)
			reachable.Create(ctx, machine, node)
			machines = append(machines, machine)
			nodes = append(nodes, node)
		}
		reachableCA = createClusterAutoscaler(reachable)

		unreachable = newWorkloadCluster(unreachableServer)
		unreachableCA = createClusterAutoscaler(unreachable)
	})

	It("runs one engine per ClusterAutoscaler and reports an unreachable workload cluster on its own", func() {
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, reachableCA)
			g.Expect(ca.Finalizers).To(ContainElement(CleanupFinalizer))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
			g.Expect(ca.Status.ObservedGeneration).To(Equal(ca.Generation))
			g.Expect(ca.Status.LastLoopTime).NotTo(BeNil())
			g.Expect(ca.Status.NodeGroupCount).To(BeEquivalentTo(1))
			g.Expect(ca.Status.NodeGroups).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"ID":         Equal("MachineDeployment/" + reachable.Namespace + "/md-0"),
				"MinSize":    HaveValue(BeEquivalentTo(1)),
				"MaxSize":    HaveValue(BeEquivalentTo(5)),
				"TargetSize": BeEquivalentTo(2),
			})))
			g.Expect(ca.Status.Nodes).To(BeNumerically(">=", 2))
		}, waitTimeout).Should(Succeed())

		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, unreachableCA)
			g.Expect(ca.Finalizers).To(ContainElement(CleanupFinalizer))
			ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
			g.Expect(ready.Message).To(ContainSubstring("cannot be reached"))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(unreachableCA)).To(BeNil())

		By("looping again on the reachable cluster while the other stays unreachable")
		expectAnotherLoop(reachableCA)
		ca := getClusterAutoscaler(Default, unreachableCA)
		Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason))
	})

	It("publishes what its loops decided for each node in a ConfigMap it owns", func() {
		ca := getClusterAutoscaler(Default, reachableCA)
		Eventually(func(g Gomega) {
			configMap := &corev1.ConfigMap{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ca.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(ca.Name)}, configMap)).To(Succeed())
			g.Expect(configMap.Labels).To(HaveKeyWithValue(autoscalingv1alpha1.ExplanationLabel, ca.Name))
			g.Expect(metav1.IsControlledBy(configMap, ca)).To(BeTrue(), "deleted with the ClusterAutoscaler")
			explanation := autoscalingv1alpha1.Explanation{}
			g.Expect(json.Unmarshal([]byte(configMap.Data[autoscalingv1alpha1.ExplanationDataKey]), &explanation)).To(Succeed())
			g.Expect(explanation.LoopTime.IsZero()).To(BeFalse())
			for _, node := range nodes {
				g.Expect(explanation.Nodes).To(ContainElement(MatchFields(IgnoreExtras, Fields{
					"Name":      Equal(node.Name),
					"NodeGroup": Equal("MachineDeployment/" + reachable.Namespace + "/md-0"),
					"ScaleDown": Equal(autoscalingv1alpha1.NodeKept),
					"Reason":    Not(BeEmpty()),
				})))
			}
		}, waitTimeout).Should(Succeed())
	})

	It("never takes over a ConfigMap of its explanation's name that it did not create, which would be deleted with it", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		theirs := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName("autoscaler")},
			Data:       map[string]string{"dashboards": "theirs"},
		}
		Expect(k8sClient.Create(ctx, theirs)).To(Succeed())
		key := createClusterAutoscaler(fixture)
		expectRunning(key)
		expectAnotherLoop(key)
		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type": Equal(corev1.EventTypeWarning), "Reason": Equal(ExplanationConfigMapTakenReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Name": Equal(key.Name)}),
			})))
		}, waitTimeout).Should(Succeed())
		Expect(get(theirs).Data).To(Equal(map[string]string{"dashboards": "theirs"}), "their data stays")
		Expect(get(theirs).OwnerReferences).To(BeEmpty(), "not taken over")

		deleteClusterAutoscaler(key)
		Consistently(func() error { return k8sClient.Get(ctx, client.ObjectKeyFromObject(theirs), &corev1.ConfigMap{}) }, 2*time.Second).
			Should(Succeed(), "not deleted with the ClusterAutoscaler")
	})

	It("applies a new configuration to the running engine", func() {
		engine := reconciler.engines.get(reachableCA)
		Expect(engine).NotTo(BeNil())

		ca := getClusterAutoscaler(Default, reachableCA)
		original := ca.DeepCopy()
		// From now on only triggers run loops.
		ca.Spec.ScanInterval = &metav1.Duration{Duration: time.Hour}
		ca.Spec.LogVerbosity = ptr.To[int32](4)
		Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())

		Eventually(func(g Gomega) {
			updated := getClusterAutoscaler(g, reachableCA)
			g.Expect(updated.Status.ObservedGeneration).To(Equal(ca.Generation))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(reachableCA)).To(BeIdenticalTo(engine))
		Expect(engine.verbosity.Load()).To(BeEquivalentTo(4))
		expectLoopsOnlyOnTriggers(reachableCA)
	})

	It("runs a loop as soon as a pod becomes unschedulable", func() {
		pod := pendingPod(reachable.Namespace, nil)

		// The scan interval is an hour: only the trigger explains a loop.
		Eventually(func(g Gomega) {
			g.Expect(getClusterAutoscaler(g, reachableCA).Status.UnschedulablePods).To(BeEquivalentTo(1))
		}, waitTimeout).Should(Succeed())
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
	})

	It("reads the workload cluster's pods from its cache, trimmed and without copies", func() {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: reachable.Namespace, Name: "cached"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:      "app",
				Image:     "registry.example.com/app:v1",
				Env:       []corev1.EnvVar{{Name: "MODE", Value: "production"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}}},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod))).To(Succeed()) })
		workload := reconciler.engines.get(reachableCA).workload

		listed := func(g Gomega) *snapshot.Pod {
			pods, err := workload.ListPods(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			for _, listed := range pods {
				if listed.Namespace == pod.Namespace && listed.Name == pod.Name {
					return listed
				}
			}
			g.Expect(pods).To(ContainElement(HaveField("Name", pod.Name)))
			return nil
		}
		var cached *snapshot.Pod
		Eventually(func(g Gomega) {
			cached = listed(g)
			g.Expect(listed(g)).To(BeIdenticalTo(cached), "every loop reads the cached pod itself, not a copy")
		}, waitTimeout).Should(Succeed())
		Expect(cached.Spec.Containers[0].Resources.Requests).To(HaveKey(corev1.ResourceCPU))
		Expect(cached.Spec.Containers[0].Image).To(BeEmpty(), "the cache keeps only what the engine reads")
		Expect(cached.Spec.Containers[0].Env).To(BeNil())

		By("leaving out pods that have finished, which hold no resources")
		finished := pod.DeepCopy()
		finished.ObjectMeta = metav1.ObjectMeta{Namespace: pod.Namespace, Name: "finished"}
		Expect(k8sClient.Create(ctx, finished)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, finished))).To(Succeed()) })
		Eventually(func(g Gomega) {
			pods, err := workload.ListPods(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(ContainElement(HaveField("Name", finished.Name)))
		}, waitTimeout).Should(Succeed())
		finished.Status.Phase = corev1.PodSucceeded
		Expect(k8sClient.Status().Update(ctx, finished)).To(Succeed())
		Eventually(func(g Gomega) {
			pods, err := workload.ListPods(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).NotTo(ContainElement(HaveField("Name", finished.Name)))
			g.Expect(pods).To(ContainElement(HaveField("Name", pod.Name)))
		}, waitTimeout).Should(Succeed())
	})

	It("reads the workload cluster's controllers as metadata, trimmed to their names", func() {
		labels := map[string]string{"app": "cached-controller"}
		replicaSet := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: reachable.Namespace, Name: "cached", Labels: labels,
				Annotations: map[string]string{"deployment.kubernetes.io/revision": "1"}},
			Spec: appsv1.ReplicaSetSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v1"}}},
				},
			},
		}
		Expect(k8sClient.Create(ctx, replicaSet)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, replicaSet))).To(Succeed()) })

		Eventually(func(g Gomega) {
			engine := reconciler.engines.get(reachableCA)
			g.Expect(engine).NotTo(BeNil())
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("ReplicaSetList"))
			g.Expect(engine.workload.List(ctx, list, client.InNamespace(reachable.Namespace))).To(Succeed())
			g.Expect(list.Items).To(ConsistOf(HaveField("ObjectMeta", Equal(metav1.ObjectMeta{
				Namespace: replicaSet.Namespace, Name: replicaSet.Name, UID: replicaSet.UID, ResourceVersion: replicaSet.ResourceVersion,
			}))), "the cache keeps what names the ReplicaSet, not its labels or annotations")
		}, waitTimeout).Should(Succeed())
	})

	It("stops the engine while the Cluster is paused and resumes it afterwards", func() {
		setPaused(reachable.Cluster, true)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, reachableCA)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterPausedReason))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterPausedReason))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(reachableCA)).To(BeNil())

		setPaused(reachable.Cluster, false)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, reachableCA)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
		}, waitTimeout).Should(Succeed())
		resumed := reconciler.engines.get(reachableCA)
		Expect(resumed).NotTo(BeNil())

		By("reading pods from the cache without copies again, on the same connection")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: reachable.Namespace, Name: "after-resume"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example.com/app:v1"}}},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod))).To(Succeed()) })
		Eventually(func(g Gomega) {
			first, err := resumed.workload.ListPods(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			second, err := resumed.workload.ListPods(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(first).To(ContainElement(HaveField("Name", pod.Name)))
			g.Expect(second[0]).To(BeIdenticalTo(first[0]))
		}, waitTimeout).Should(Succeed())
	})

	It("removes its taints and delete-machine annotations when deleted, and leaves replicas alone", func() {
		By("leaving marks as an interrupted scale-down would")
		taintNode(nodes[0], nodefacts.ToBeDeletedTaint, keptTaint)
		annotate(nodes[0], scaledown.TaintedAnnotation, "1767268800")
		// Another cluster autoscaler's taints, and an operator's mark, are theirs.
		taintNode(nodes[1], nodefacts.ToBeDeletedTaint, nodefacts.DeletionCandidateTaint)
		// Every cluster of these tests sees the node: left there, its taint
		// would keep the autoscalers of later tests from scaling.
		DeferCleanup(untaintNode, nodes[1], nodefacts.ToBeDeletedTaint, nodefacts.DeletionCandidateTaint)
		markForDeletion(machines[0])
		annotate(machines[1], clusterv1.DeleteMachineAnnotation, "operator")
		// A standalone MachineSet whose scale-down is under way: it wants
		// one Machine and has two, the marked one is going.
		shrinking := reachable.MachineSet("shrinking", 1, nil, nil)
		reachable.Create(ctx, shrinking)
		going := reachable.Machine("going", shrinking)
		staying := reachable.Machine("staying", shrinking)
		reachable.Create(ctx, going, staying)
		markForDeletion(going)
		// The same for MachinePools: one wants one Machine fewer than it
		// has, the other had its scale-down interrupted.
		shrinkingPool := reachable.MachinePool("shrinking-pool", 1, nil)
		steadyPool := reachable.MachinePool("steady-pool", 1, nil)
		reachable.Create(ctx, shrinkingPool, steadyPool)
		goingFromPool := reachable.PoolMachine("going-from-pool", shrinkingPool)
		leftInPool := reachable.PoolMachine("left-in-pool", steadyPool)
		reachable.Create(ctx, goingFromPool, reachable.PoolMachine("staying-in-pool", shrinkingPool), leftInPool)
		markForDeletion(goingFromPool)
		markForDeletion(leftInPool)
		By("and what the engine of another ClusterAutoscaler that exists placed")
		another := anotherClusterAutoscaler(reachable)
		anothers := reachable.Node("anothers", "test:///"+reachable.Namespace+"/anothers")
		reachable.Create(ctx, anothers)
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, anothers))).To(Succeed()) })
		taintNode(anothers, nodefacts.ToBeDeletedTaint)
		annotate(anothers, scaledown.TaintedAnnotation, ownership.Stamp(another, "1767268800"))
		anothersSet := reachable.MachineSet("anothers", 1, nil, nil)
		reachable.Create(ctx, anothersSet)
		anothersMachine := reachable.Machine("anothers", anothersSet)
		reachable.Create(ctx, anothersMachine)
		markedBy(anothersMachine, another)

		deleteClusterAutoscaler(reachableCA)
		Expect(reconciler.engines.get(reachableCA)).To(BeNil())

		autoscalerTaint := HaveField("Key", BeElementOf(nodefacts.ToBeDeletedTaint, nodefacts.DeletionCandidateTaint))
		Expect(get(nodes[0]).Spec.Taints).To(And(ContainElement(HaveField("Key", keptTaint)), Not(ContainElement(autoscalerTaint))))
		Expect(get(nodes[0]).Annotations).NotTo(HaveKey(scaledown.TaintedAnnotation))
		Expect(get(nodes[1]).Spec.Taints).To(ContainElements(HaveField("Key", nodefacts.ToBeDeletedTaint), HaveField("Key", nodefacts.DeletionCandidateTaint)), "another autoscaler's taints stay")
		Expect(get(machines[0]).Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(get(machines[1]).Annotations).To(HaveKeyWithValue(clusterv1.DeleteMachineAnnotation, "operator"), "an operator's mark stays")
		Expect(get(going).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(get(goingFromPool).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(get(leftInPool).Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
		Expect(get(anothers).Spec.Taints).To(ContainElement(HaveField("Key", nodefacts.ToBeDeletedTaint)), "another ClusterAutoscaler's taint stays")
		Expect(get(anothersMachine).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation), "and so does its mark")
		Expect(get(deployment).Spec.Replicas).To(Equal(deployment.Spec.Replicas))
		Expect(get(machineSet).Spec.Replicas).To(Equal(machineSet.Spec.Replicas))
	})

	It("does not block its deletion for long on an unreachable workload cluster", func() {
		deleteClusterAutoscaler(unreachableCA)

		// Events are sent in the background: the deletion may be done
		// before its warning is written.
		Eventually(func(g Gomega) {
			warnings := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, warnings, client.InNamespace(unreachableCA.Namespace))).To(Succeed())
			g.Expect(warnings.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":   Equal(corev1.EventTypeWarning),
				"Reason": Equal(autoscalingv1alpha1.WorkloadClusterUnreachableReason),
			})))
		}).Should(Succeed())
	})

	It("removes the delete-machine annotations a crash left before starting its engine, and keeps those of scale-downs under way", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		By("leaving a mark as a manager killed between marking a Machine and lowering the replicas would")
		md := fixture.MachineDeployment("md-0", 2, map[string]string{
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3",
		})
		fixture.Create(ctx, md)
		ms := fixture.MachineSet("md-0-a", 2, nil, md)
		fixture.Create(ctx, ms)
		marked, unmarked := fixture.Machine("machine-0", ms), fixture.Machine("machine-1", ms)
		fixture.Create(ctx, marked, unmarked)
		markForDeletion(marked)
		By("and a mark whose scale-down went through: the MachineSet wants one Machine fewer than it has")
		shrinking := fixture.MachineSet("shrinking", 1, nil, nil)
		fixture.Create(ctx, shrinking)
		going := fixture.Machine("going", shrinking)
		fixture.Create(ctx, going, fixture.Machine("staying", shrinking))
		markForDeletion(going)
		By("and the marks of a ClusterAutoscaler deleted before this one was created, and of another that exists")
		steady := fixture.MachineSet("steady", 2, nil, nil)
		fixture.Create(ctx, steady)
		orphaned, anothers := fixture.Machine("orphaned", steady), fixture.Machine("anothers", steady)
		fixture.Create(ctx, orphaned, anothers)
		markedBy(orphaned, "0d1e7e00-0000-4000-8000-00000000dead")
		markedBy(anothers, anotherClusterAutoscaler(fixture))

		key := createClusterAutoscaler(fixture)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
		}, waitTimeout).Should(Succeed())
		Expect(get(marked).Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "the crashed scale-down is released")
		Expect(get(orphaned).Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "what nobody else will release is adopted")
		Expect(get(anothers).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation), "another ClusterAutoscaler's mark is its own")
		Expect(get(going).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation), "Cluster API is removing this Machine")
		Expect(get(md).Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		Expect(get(shrinking).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))

		Expect(k8sClient.Delete(ctx, &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
		expectGone(key)
	})

	It("leaves every delete-machine annotation alone when it starts in DryRun mode: another autoscaler may be between marking and lowering replicas", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		md := fixture.MachineDeployment("md-0", 2, map[string]string{
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size": "1",
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "3",
		})
		fixture.Create(ctx, md)
		ms := fixture.MachineSet("md-0-a", 2, nil, md)
		fixture.Create(ctx, ms)
		marked := fixture.Machine("machine-0", ms)
		fixture.Create(ctx, marked, fixture.Machine("machine-1", ms))
		markForDeletion(marked)

		shadow := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "shadow"},
			Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				ClusterName: fixture.Cluster.Name, Mode: autoscalingv1alpha1.DryRunMode,
				ScanInterval: &metav1.Duration{Duration: time.Second},
			},
		}
		Expect(k8sClient.Create(ctx, shadow)).To(Succeed())
		key := client.ObjectKeyFromObject(shadow)
		DeferCleanup(deleteClusterAutoscaler, key)
		expectRunning(key)
		expectAnotherLoop(key)
		Expect(get(marked).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation), "the mark stays")
		Expect(get(md).Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
	})

	It("leaves what it placed to the target's copy when clusterctl move deletes it", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		ms := fixture.MachineSet("ms-0", 1, nil, nil)
		fixture.Create(ctx, ms)
		machine := fixture.Machine("machine-0", ms)
		fixture.Create(ctx, machine)
		key := createClusterAutoscaler(fixture)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
		}, waitTimeout).Should(Succeed())
		markForDeletion(machine)

		annotate(&autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			clusterctlv1.DeleteForMoveAnnotation, "")
		deleteClusterAutoscaler(key)

		Expect(get(machine).Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation))
	})

	It("stops the engine when the Cluster goes away", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		key := createClusterAutoscaler(fixture)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
		}, waitTimeout).Should(Succeed())

		Expect(k8sClient.Delete(ctx, fixture.Cluster)).To(Succeed())
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterNotFoundReason))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.engines.get(key)).To(BeNil())

		deleteClusterAutoscaler(key)
	})
})

// newWorkloadCluster creates a Cluster whose kubeconfig Secret points at
// server with the envtest credentials, and whose infrastructure is
// provisioned, so that the ClusterCache connects to it.
func newWorkloadCluster(server string) *testenv.Fixture {
	GinkgoHelper()
	fixture := testenv.NewFixture(ctx, k8sClient)
	config := rest.CopyConfig(env.Config)
	config.Host = server
	provisionWorkloadCluster(fixture, kubeconfig.FromEnvTestConfig(config, fixture.Cluster))
	return fixture
}

// provisionWorkloadCluster gives the fixture's Cluster a kubeconfig Secret
// with data, and reports its infrastructure provisioned, which is when the
// ClusterCache connects.
func provisionWorkloadCluster(fixture *testenv.Fixture, data []byte) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, kubeconfig.GenerateSecret(fixture.Cluster, data))).To(Succeed())
	fixture.Cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	Expect(k8sClient.Status().Update(ctx, fixture.Cluster)).To(Succeed())
}

// createClusterAutoscaler creates a ClusterAutoscaler called autoscaler for
// the fixture's Cluster that loops every second.
func createClusterAutoscaler(fixture *testenv.Fixture) types.NamespacedName {
	GinkgoHelper()
	return createNamedClusterAutoscaler(fixture, "autoscaler")
}

// createNamedClusterAutoscaler creates a ClusterAutoscaler called name for
// the fixture's Cluster that loops every second.
func createNamedClusterAutoscaler(fixture *testenv.Fixture, name string) types.NamespacedName {
	GinkgoHelper()
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: name},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:  fixture.Cluster.Name,
			ScanInterval: &metav1.Duration{Duration: time.Second},
		},
	}
	Expect(k8sClient.Create(ctx, ca)).To(Succeed())
	return client.ObjectKeyFromObject(ca)
}

// anotherClusterAutoscaler creates, in the fixture's namespace, a
// ClusterAutoscaler of a Cluster that does not exist, and returns its UID:
// one that exists, whose engine never runs.
func anotherClusterAutoscaler(fixture *testenv.Fixture) types.UID {
	GinkgoHelper()
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "another"},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "elsewhere"},
	}
	Expect(k8sClient.Create(ctx, ca)).To(Succeed())
	DeferCleanup(deleteClusterAutoscaler, client.ObjectKeyFromObject(ca))
	return ca.UID
}

func getClusterAutoscaler(g Gomega, key types.NamespacedName) *autoscalingv1alpha1.ClusterAutoscaler {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	g.ExpectWithOffset(1, k8sClient.Get(ctx, key, ca)).To(Succeed())
	return ca
}

// get reads obj afresh.
func get[T client.Object](obj T) T {
	GinkgoHelper()
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// expectAnotherLoop waits for a loop of the ClusterAutoscaler's engine
// that starts after this call. The status need not change with it.
func expectAnotherLoop(key types.NamespacedName) {
	GinkgoHelper()
	before := time.Now()
	Eventually(func(g Gomega) {
		running := reconciler.engines.get(key)
		g.Expect(running).NotTo(BeNil())
		g.Expect(running.engine.Status().Time).To(BeTemporally(">", before))
	}, waitTimeout).Should(Succeed())
}

// expectLoopsOnlyOnTriggers waits, after the scan interval of the
// ClusterAutoscaler was set to an hour, for the loop that was scheduled
// with the former interval: once a loop ends under the new one, the next
// is an hour away. (Waiting for a loop after the patch would miss one that
// ended just before the wait, and then wait an hour.)
func expectLoopsOnlyOnTriggers(key types.NamespacedName) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		running := reconciler.engines.get(key)
		g.Expect(running).NotTo(BeNil())
		g.Expect(running.engine.LoopDeadline()).To(BeTemporally(">", time.Now().Add(30*time.Minute)))
	}, waitTimeout).Should(Succeed())
}

func expectGone(key types.NamespacedName) {
	GinkgoHelper()
	Eventually(func() error {
		return k8sClient.Get(ctx, key, &autoscalingv1alpha1.ClusterAutoscaler{})
	}, waitTimeout).Should(Satisfy(apierrors.IsNotFound))
}

func haveStatusAndReason(status metav1.ConditionStatus, reason string) OmegaMatcher {
	return PointTo(MatchFields(IgnoreExtras, Fields{"Status": Equal(status), "Reason": Equal(reason)}))
}

func setPaused(cluster *clusterv1.Cluster, paused bool) {
	GinkgoHelper()
	original := get(cluster).DeepCopy()
	cluster.Spec.Paused = ptr.To(paused)
	Expect(k8sClient.Patch(ctx, cluster, client.MergeFrom(original))).To(Succeed())
}

func taintNode(node *corev1.Node, keys ...string) {
	GinkgoHelper()
	original := get(node).DeepCopy()
	for _, key := range keys {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	}
	Expect(k8sClient.Patch(ctx, node, client.MergeFrom(original))).To(Succeed())
}

func untaintNode(node *corev1.Node, keys ...string) {
	GinkgoHelper()
	original := get(node).DeepCopy()
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(taint corev1.Taint) bool { return slices.Contains(keys, taint.Key) })
	Expect(k8sClient.Patch(ctx, node, client.MergeFrom(original))).To(Succeed())
}

// markForDeletion marks the Machine as the autoscaler does.
func markForDeletion(machine *clusterv1.Machine) {
	GinkgoHelper()
	now := time.Now().UTC().Format(time.RFC3339)
	annotate(machine, clusterv1.DeleteMachineAnnotation, now, scalable.MarkedAnnotation, now)
}

// markedBy marks the Machine as the engine of the ClusterAutoscaler of uid does.
func markedBy(machine *clusterv1.Machine, uid types.UID) {
	GinkgoHelper()
	now := time.Now().UTC().Format(time.RFC3339)
	annotate(machine, clusterv1.DeleteMachineAnnotation, now, scalable.MarkedAnnotation, ownership.Stamp(uid, now))
}

// annotate sets key, value pairs of annotations on the object.
func annotate(obj client.Object, keysAndValues ...string) {
	GinkgoHelper()
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	original := obj.DeepCopyObject().(client.Object)
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	for i := 0; i+1 < len(keysAndValues); i += 2 {
		annotations[keysAndValues[i]] = keysAndValues[i+1]
	}
	obj.SetAnnotations(annotations)
	Expect(k8sClient.Patch(ctx, obj, client.MergeFrom(original))).To(Succeed())
}
