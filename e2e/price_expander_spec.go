//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// PriceExpanderSpecInput is the input of PriceExpanderSpec.
type PriceExpanderSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// PriceExpanderSpec shows the price expander on Cluster API, where
// upstream's cannot run: of node groups at zero nodes that all fit the
// pending pods, the one whose new nodes cost least for them grows, where
// least-waste alone would pick another; the status rows show each group's
// price and where it comes from, a bad price annotation among them.
func PriceExpanderSpec(ctx context.Context, inputGetter func() PriceExpanderSpecInput) {
	var input PriceExpanderSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "PriceExpanderSpec needs a stack")
	})

	It("grows the group whose new nodes cost least for the pending pods", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "price")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig,
		})

		By("Creating four MachineDeployments at 0 replicas that all fit 1500m pods")
		group := func(name, cpu, price string) *clusterv1.MachineDeployment {
			annotations := map[string]string{clusterv1.AutoscalerMinSizeAnnotation: "0", clusterv1.AutoscalerMaxSizeAnnotation: "3"}
			if price != "" {
				annotations[template.PriceAnnotation] = price
			}
			return framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: name, Replicas: ptr.To[int32](0), Annotations: annotations,
				Labels: map[string]string{framework.ClusterLabel: namespace.Name},
				Machine: infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("110"),
				}},
			})
		}
		// Two 1500m pods: 2 small nodes cost 0.10, 1 large node 0.15, 2
		// nodes of bad-price 2 × 0.084132 at the default rates (its
		// annotation is not a price), 1 of unpriced 8 × 0.033174 + 4 ×
		// 0.004446. least-waste would tie bad-price, large and small and
		// take bad-price, the first by ID.
		large := group("large", "4", "0.15")
		small := group("small", "2", "0.05")
		badPrice := group("bad-price", "2", "-1")
		unpriced := group("unpriced", "8", "")
		for _, md := range []*clusterv1.MachineDeployment{large, small, badPrice, unpriced} {
			framework.WaitForTemplateCapacity(ctx, mgmt, md)
		}

		By("Turning autoscaling on with the price expander")
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriceExpander, autoscalingv1alpha1.LeastWasteExpander}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Seeing the bad price annotation on its group's status row")
		Eventually(func(g Gomega) {
			g.Expect(framework.NodeGroupRow(ctx, g, mgmt, ca, badPrice).Problem).To(And(ContainSubstring(template.PriceAnnotation), ContainSubstring("not a decimal price")))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Running 2 pods of 1500m cpu")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2,
			Requests:     framework.CPURequest("1500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})

		By("Seeing the small group grow by 2, and no other")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, small)).To(BeEquivalentTo(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)
		Consistently(func(g Gomega) {
			for _, md := range []*clusterv1.MachineDeployment{large, badPrice, unpriced} {
				g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeZero(), "replicas of %s", md.Name)
			}
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Seeing every group's price on its status row")
		Eventually(func(g Gomega) {
			price := func(md *clusterv1.MachineDeployment) []string {
				row := framework.NodeGroupRow(ctx, g, mgmt, ca, md)
				return []string{row.Price, string(row.PriceSource)}
			}
			g.Expect(price(small)).To(Equal([]string{"0.05", string(autoscalingv1alpha1.NodeGroupPriceSource)}))
			g.Expect(price(large)).To(Equal([]string{"0.15", string(autoscalingv1alpha1.NodeGroupPriceSource)}))
			g.Expect(price(badPrice)).To(Equal([]string{"0.084132", string(autoscalingv1alpha1.DefaultPriceSource)}))
			g.Expect(price(unpriced)).To(Equal([]string{"0.283176", string(autoscalingv1alpha1.DefaultPriceSource)}))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	})
}
