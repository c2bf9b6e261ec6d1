package controller

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var _ = Describe("ClusterAutoscaler status writes", Ordered, func() {
	var (
		fixture *testenv.Fixture
		key     types.NamespacedName
	)

	BeforeAll(func() {
		fixture = newWorkloadCluster(env.Config.Host)
		fixture.Create(ctx, fixture.MachineDeployment("md-0", 0, map[string]string{
			"cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size": "5",
		}))
		key = createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		expectRunning(key)
	})

	It("costs no write while the loops of a steady cluster change nothing a reader sees", func() {
		Eventually(func(g Gomega) {
			written := getClusterAutoscaler(g, key).ResourceVersion
			loopsFrom := time.Now()
			g.Consistently(func(g Gomega) {
				g.Expect(getClusterAutoscaler(g, key).ResourceVersion).To(Equal(written))
			}, 4*time.Second, 200*time.Millisecond).Should(Succeed())
			g.Expect(reconciler.engines.get(key).engine.Status().Time).To(BeTemporally(">", loopsFrom.Add(2*time.Second)),
				"loops of the 1s scan interval ran meanwhile")
		}, waitTimeout).Should(Succeed())
	})

	It("writes the status, with a fresh loop time, once something a reader sees changes", func() {
		written := getClusterAutoscaler(Default, key)
		changedAt := metav1.NewTime(time.Now().Truncate(time.Second))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "pending"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name:      "app",
				Image:     "registry.example.com/app:v1",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
			}}},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod))).To(Succeed()) })
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())

		Eventually(func(g Gomega) {
			ca := getClusterAutoscaler(g, key)
			g.Expect(ca.Status.UnschedulablePods).To(BeNumerically(">", written.Status.UnschedulablePods))
			g.Expect(ca.ResourceVersion).NotTo(Equal(written.ResourceVersion))
			g.Expect(ca.Status.LastLoopTime.Before(&changedAt)).To(BeFalse(), "the loop time is stamped with the change")
		}, waitTimeout).Should(Succeed())
	})
})
