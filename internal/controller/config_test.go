package controller

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
)

var _ = Describe("ClusterAutoscaler defaults", func() {
	// The engine owns the defaults (autoscaler.DefaultConfig), the
	// controller those of its own settings; the CRD schema repeats them so
	// that users see them on their objects. A spec with nothing but the
	// cluster name, defaulted by the API server, must give those defaults.
	It("are the engine's", func() {
		ca := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "defaults-", Namespace: "default"},
			Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload"},
		}
		Expect(k8sClient.Create(ctx, ca, client.DryRunAll)).To(Succeed())

		config, err := engineconfig.FromSpec(ca.Spec)
		Expect(err).NotTo(HaveOccurred())
		Expect(config).To(Equal(autoscaler.DefaultConfig()))
		Expect(engineconfig.LogVerbosity(ca.Spec)).To(BeEquivalentTo(autoscalingv1alpha1.DefaultLogVerbosity))
	})
})
