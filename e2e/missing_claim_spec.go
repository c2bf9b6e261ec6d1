//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// MissingClaimSpecInput is the input of MissingClaimSpec.
type MissingClaimSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// MissingClaimSpec shows a pod whose claim does not exist: no new Node
// would let it run, so no group grows for it, and its NotTriggerScaleUp
// event says which claim is missing.
func MissingClaimSpec(ctx context.Context, inputGetter func() MissingClaimSpecInput) {
	var input MissingClaimSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "MissingClaimSpec needs a stack")
	})

	It("does not scale up for a pod whose claim does not exist, and says so", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "missing-claim")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating a node group of 2-core machines at 0, 0 to 2")
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](0),
			Annotations: framework.SizeAnnotations(0, 2), Machine: framework.SimMachine("2"),
			Labels: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForTemplateCapacity(ctx, mgmt, md)
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("Turning autoscaling on")
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})

		By(`Running a pod of 500m whose claim "missing" does not exist: a new Node would fit its cpu`)
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 1,
			Requests:     framework.CPURequest("500m"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate: func(template *corev1.PodTemplateSpec) {
				template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"},
				}}}
			},
		})

		By("Seeing its NotTriggerScaleUp event name the missing claim, and no Node added")
		Eventually(func(g Gomega) {
			if size := framework.Replicas(ctx, g, mgmt, md); size != 0 {
				StopTrying(fmt.Sprintf("the group grew to %d for a pod whose claim does not exist", size)).Now()
			}
			pods := framework.PodsOf(ctx, g, workload, app)
			g.Expect(pods).To(HaveLen(1))
			events := framework.PodEvents(ctx, g, workload, namespace.Name, "NotTriggerScaleUp")[pods[0].Name]
			g.Expect(framework.EventMessages(events)).To(ContainElement(ContainSubstring(`persistentvolumeclaim "missing" not found`)))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.ExpectNotTriggerReason(ctx, mgmt, ca, `persistentvolumeclaim "missing" not found`)
		// A few more loops: the pod stays pending and the group at 0.
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeZero())
			g.Expect(framework.PendingPods(ctx, g, workload, namespace.Name)).To(Equal(1))
		}, 5*time.Second, framework.AutoscalerPoll).Should(Succeed())
		framework.ExpectReplicasTrajectory(invariants.Replicas(md), 0)
		invariants.ExpectNoViolations()
		Expect(framework.GetClusterAutoscaler(ctx, Default, mgmt, ca).Status.LastScaleUpTime).To(BeNil())

		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}
