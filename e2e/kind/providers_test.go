//go:build kind

package kind

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("The management cluster", Label("kind"), func() {
	It("runs every provider's manager and capi-autoscaler's, Available and Ready", func() {
		expectProvidersRunning()
	})
})

// expectProvidersRunning waits until every provider's Deployment is
// Available and capi-autoscaler's manager is Ready: the webhooks answer and
// the controllers reconcile.
func expectProvidersRunning() {
	GinkgoHelper()
	for _, p := range append(clusterAPIProviders, autoscalerProvider) {
		By("Waiting for " + p.namespace + "/" + p.deployment)
		Eventually(func(g Gomega) {
			deployment := &appsv1.Deployment{}
			g.Expect(management.Get(ctx, ctrlclient.ObjectKey{Namespace: p.namespace, Name: p.deployment}, deployment)).To(Succeed())
			g.Expect(deployment.Status.Conditions).To(ContainElement(And(
				HaveField("Type", appsv1.DeploymentAvailable),
				HaveField("Status", corev1.ConditionTrue),
			)))
			g.Expect(deployment.Status.AvailableReplicas).To(Equal(*deployment.Spec.Replicas))
		}).WithTimeout(5*time.Minute).WithPolling(2*time.Second).Should(Succeed(), "%s/%s", p.namespace, p.deployment)
	}

	By("Checking that capi-autoscaler's manager is Ready")
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(management.List(ctx, pods, ctrlclient.InNamespace(autoscalerProvider.namespace))).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
		for _, pod := range pods.Items {
			g.Expect(pod.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.PodReady),
				HaveField("Status", corev1.ConditionTrue),
			)), pod.Name)
		}
	}).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
}
