package controller

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("The condition metrics of a ClusterAutoscaler", func() {
	It("are its conditions as written, replaced when they change, and go with it", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		cluster := client.ObjectKeyFromObject(fixture.Cluster).String()

		Eventually(func(g Gomega) {
			g.Expect(exportedConditions(g, key)).To(ConsistOf(
				`cluster="`+cluster+`" type="Ready" status="True" reason="Running"`,
				`cluster="`+cluster+`" type="ScalingActive" status="False" reason="NoNodeGroups"`,
				// Other specs' nodes of the same API server may be unready.
				MatchRegexp(`^cluster="`+cluster+`" type="ClusterHealthy" status="(True|False)" reason="(Healthy|ClusterUnhealthy)"$`),
				`cluster="`+cluster+`" type="ConfigurationApplied" status="True" reason="Applied"`,
			))
		}, waitTimeout).Should(Succeed())

		By("replacing the series of a condition whose status and reason change")
		setPaused(fixture.Cluster, true)
		Eventually(func(g Gomega) {
			g.Expect(exportedConditions(g, key)).To(ConsistOf(
				`cluster="`+cluster+`" type="Ready" status="False" reason="ClusterPaused"`,
				`cluster="`+cluster+`" type="ScalingActive" status="False" reason="ClusterPaused"`,
				`cluster="`+cluster+`" type="ClusterHealthy" status="Unknown" reason="ClusterPaused"`,
				`cluster="`+cluster+`" type="ConfigurationApplied" status="True" reason="Applied"`,
			))
		}, waitTimeout).Should(Succeed())

		By("removing them with the ClusterAutoscaler")
		deleteClusterAutoscaler(key)
		Eventually(func(g Gomega) {
			g.Expect(exportedConditions(g, key)).To(BeEmpty())
		}, waitTimeout).Should(Succeed())
	})
})

// exportedConditions are the series of capi_autoscaler_clusterautoscaler_condition
// that the metrics endpoint serves for a ClusterAutoscaler, as their labels
// but the namespace and name, and checks that each is 1.
func exportedConditions(g Gomega, key types.NamespacedName) []string {
	families, err := metrics.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	var series []string
	for _, family := range families {
		if family.GetName() != "capi_autoscaler_clusterautoscaler_condition" {
			continue
		}
		for _, metric := range family.GetMetric() {
			labels := map[string]string{}
			for _, label := range metric.GetLabel() {
				labels[label.GetName()] = label.GetValue()
			}
			if labels["namespace"] != key.Namespace || labels["name"] != key.Name {
				continue
			}
			g.Expect(metric.GetGauge().GetValue()).To(Equal(1.0))
			series = append(series, fmt.Sprintf("cluster=%q type=%q status=%q reason=%q", labels["cluster"], labels["type"], labels["status"], labels["reason"]))
		}
	}
	return series
}
