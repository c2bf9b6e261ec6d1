package controller

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faults"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

var _ = Describe("A panic in the engine of one cluster", func() {
	It("is reported on its ClusterAutoscaler, and its engine restarts with backoff while another cluster goes on scaling", func() {
		By("autoscaling a cluster whose group can scale from zero")
		healthy := newWorkloadCluster(env.Config.Host)
		group, nodeSelector := createGroupAtZero(healthy, "isolation.example.com/cluster")
		healthyCA := createClusterAutoscaler(healthy)
		DeferCleanup(deleteClusterAutoscaler, healthyCA)
		expectReady(healthyCA)
		healthyEngine := reconciler.engines.get(healthyCA)

		By("and another whose node group panics in every loop")
		faulty := newWorkloadCluster(env.Config.Host)
		faultyGroup := faulty.MachineDeployment("md-0", 0, map[string]string{
			scalable.MinSizeAnnotation: "0",
			scalable.MaxSizeAnnotation: "3",
			faults.PanicAnnotation:     "a bug in node group md-0",
		})
		faulty.Create(ctx, faultyGroup)
		faultyCA := createClusterAutoscaler(faulty)
		DeferCleanup(deleteClusterAutoscaler, faultyCA)

		Eventually(func(g Gomega) {
			ready := conditions.Get(getClusterAutoscaler(g, faultyCA), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.EnginePanickedReason))
			g.Expect(ready.Message).To(ContainSubstring("a bug in node group md-0"))
		}, waitTimeout).Should(Succeed())
		expectEvent(faulty.Namespace, faultyCA, corev1.EventTypeWarning, autoscalingv1alpha1.EnginePanickedReason, ContainSubstring("panicked: a bug in node group"))

		By("restarting the engine after a delay that doubles with each panic in a row, up to the maximum")
		delays := map[string]bool{}
		Eventually(func(g Gomega) {
			ready := conditions.Get(getClusterAutoscaler(g, faultyCA), autoscalingv1alpha1.ReadyCondition)
			if ready.Reason == autoscalingv1alpha1.EnginePanickedReason {
				for _, delay := range []string{"1s", "2s", "4s"} {
					if strings.Contains(ready.Message, "starts "+delay+" after the panic") {
						delays[delay] = true
					}
				}
			}
			g.Expect(delays).To(HaveLen(3), "restart delays seen")
		}, waitTimeout, pollInterval).Should(Succeed())
		Expect(panics(faulty)).To(BeNumerically("<=", 4),
			"one panic per restart: three panics gave the delays 1s, 2s and 4s")

		By("autoscaling the other cluster all along, with the same engine")
		pod := pendingPod(healthy.Namespace, nodeSelector)
		Eventually(func(g Gomega) {
			g.Expect(get(group).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
		}, waitTimeout).Should(Succeed())
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		expectAnotherLoop(healthyCA)
		expectReady(healthyCA)
		Expect(reconciler.engines.get(healthyCA)).To(BeIdenticalTo(healthyEngine))
		Expect(panics(healthy)).To(BeZero())

		By("running again once the node group stops panicking")
		removeAnnotation(faultyGroup, faults.PanicAnnotation)
		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, faultyCA)
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
			g.Expect(ca.Status.NodeGroupCount).To(BeEquivalentTo(1))
		}, waitTimeout).Should(Succeed())
		Expect(reconciler.CheckEnginesProgress(nil)).To(Succeed())
	})
})

var _ = Describe("A panic in an event handler of one cluster's informers", func() {
	It("is recovered and reported on its ClusterAutoscaler, whose engine goes on, while another cluster goes on scaling", func() {
		healthy := newWorkloadCluster(env.Config.Host)
		group, nodeSelector := createGroupAtZero(healthy, "handler-isolation.example.com/cluster")
		healthyCA := createClusterAutoscaler(healthy)
		DeferCleanup(deleteClusterAutoscaler, healthyCA)
		expectReady(healthyCA)
		faulty := newWorkloadCluster(env.Config.Host)
		faultyCA := createClusterAutoscaler(faulty)
		DeferCleanup(deleteClusterAutoscaler, faultyCA)
		expectReady(faultyCA)
		faultyEngine := reconciler.engines.get(faultyCA)

		By("adding to the pod informer of one cluster a handler that panics on the pods of its namespace")
		Expect(reconciler.watchPods(ctx, client.ObjectKeyFromObject(faulty.Cluster), "isolation-panicking-handler", toolscache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				if pod, ok := obj.(*snapshot.Pod); ok && pod.Namespace == faulty.Namespace {
					panic("a bug in an event handler")
				}
			},
		})).To(Succeed())
		// That no node group can serve: the other specs' clusters see it too.
		unservable := pendingPod(faulty.Namespace, map[string]string{"handler-isolation.example.com/none": faulty.Namespace})
		DeferCleanup(k8sClient.Delete, ctx, unservable)
		expectEvent(faulty.Namespace, faultyCA, corev1.EventTypeWarning, autoscalingv1alpha1.InformerPanickedReason, ContainSubstring("panicked: a bug in an event handler; the panic was recovered"))
		Expect(counter(faulty, "cluster_autoscaler_errors_total", "type", "informerPanic")).To(BeNumerically(">=", 1))

		By("autoscaling the other cluster all along, and the faulty one with the same engine")
		pod := pendingPod(healthy.Namespace, nodeSelector)
		Eventually(func(g Gomega) {
			g.Expect(get(group).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)))
		}, waitTimeout).Should(Succeed())
		Expect(k8sClient.Delete(ctx, pod)).To(Succeed())
		expectAnotherLoop(faultyCA)
		expectReady(faultyCA)
		Expect(reconciler.engines.get(faultyCA)).To(BeIdenticalTo(faultyEngine))
		Expect(panics(faulty)).To(BeZero(), "no loop panicked")
		Expect(counter(healthy, "cluster_autoscaler_errors_total", "type", "informerPanic")).To(BeZero())
	})
})

// pollInterval is short enough to see each restart delay of the tests on
// the Ready condition: the shortest lasts a second.
const pollInterval = 100 * time.Millisecond

func expectReady(key types.NamespacedName) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		ca := getClusterAutoscaler(g, key)
		g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
	}, waitTimeout).Should(Succeed())
}

// pendingPod creates a pod in namespace that the scheduler found no node
// for.
func pendingPod(namespace string, nodeSelector map[string]string) *corev1.Pod {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pending"},
		Spec: corev1.PodSpec{
			NodeSelector: nodeSelector,
			Containers: []corev1.Container{{
				Name:      "app",
				Image:     "registry.example.com/app:v1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
			}},
		},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// createGroupAtZero creates a MachineDeployment md-0 at zero that can
// scale from zero to 3 two-cpu nodes, whose nodes alone carry the label
// key with the fixture's namespace as value, and returns it with the node
// selector of that label for the pods that only it may serve.
func createGroupAtZero(fixture *testenv.Fixture, key string) (*clusterv1.MachineDeployment, map[string]string) {
	GinkgoHelper()
	group := fixture.MachineDeployment("md-0", 0, map[string]string{
		scalable.MinSizeAnnotation: "0",
		scalable.MaxSizeAnnotation: "3",
		template.CPUAnnotation:     "2",
		template.MemoryAnnotation:  "4Gi",
		template.LabelsAnnotation:  key + "=" + fixture.Namespace,
	})
	fixture.Create(ctx, group)
	return group, map[string]string{key: fixture.Namespace}
}

func removeAnnotation(obj client.Object, key string) {
	GinkgoHelper()
	original := get(obj).DeepCopyObject().(client.Object)
	annotations := obj.GetAnnotations()
	delete(annotations, key)
	obj.SetAnnotations(annotations)
	Expect(k8sClient.Patch(ctx, obj, client.MergeFrom(original))).To(Succeed())
}

// panics is the cluster_autoscaler_engine_panics_total of the fixture's
// Cluster.
func panics(fixture *testenv.Fixture) float64 {
	GinkgoHelper()
	return counter(fixture, "cluster_autoscaler_engine_panics_total")
}

// counter is the value of the counter name of the fixture's Cluster, with
// the labels given as name, value pairs.
func counter(fixture *testenv.Fixture, name string, labels ...string) float64 {
	GinkgoHelper()
	families, err := metrics.Gather()
	Expect(err).NotTo(HaveOccurred())
	want := map[string]string{"cluster": client.ObjectKeyFromObject(fixture.Cluster).String()}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, family := range families {
		if family.GetName() != name {
			continue
		}
		for _, metric := range family.GetMetric() {
			matched := 0
			for _, label := range metric.GetLabel() {
				if value, ok := want[label.GetName()]; ok && label.GetValue() == value {
					matched++
				}
			}
			if matched == len(want) {
				return metric.GetCounter().GetValue()
			}
		}
	}
	return 0
}
