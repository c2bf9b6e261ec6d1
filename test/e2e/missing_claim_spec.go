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
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// MissingClaimSpecInput is the input of MissingClaimSpec.
type MissingClaimSpecInput struct {
	Stack *localstack.Stack
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
		namespace := CreateSpecNamespace(ctx, input.Stack, "missing-claim")
		cluster := CreateSimulatedCluster(ctx, CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name})
		DeferCleanup(func() { deleteCluster(mgmt, cluster) })

		By("Creating a node group of 2-core machines at 0, 0 to 2")
		md := CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "workers", Replicas: ptr.To[int32](0),
			Annotations: SizeAnnotations(0, 2), Machine: SimMachine("2"),
			Labels: map[string]string{ClusterLabel: cluster.Name},
		})
		Eventually(func(g Gomega) {
			template := &infrav1.SimMachineTemplate{}
			g.Expect(mgmt.Get(ctx, client.ObjectKeyFromObject(md), template)).To(Succeed())
			g.Expect(template.Status.Capacity).NotTo(BeEmpty())
		}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed(), "the template does not publish its capacity")
		invariants := WatchInvariants(ctx, WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("Turning autoscaling on")
		ca := CreateClusterAutoscaler(ctx, CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: FastClusterAutoscalerSpec(cluster.Name)})

		By(`Running a pod of 500m whose claim "missing" does not exist: a new Node would fit its cpu`)
		app := CreateWorkload(ctx, WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 1,
			Requests:     CPURequest("500m"),
			NodeSelector: map[string]string{ClusterLabel: cluster.Name},
			Mutate: func(template *corev1.PodTemplateSpec) {
				template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"},
				}}}
			},
		})

		By("Seeing its NotTriggerScaleUp event name the missing claim, and no Node added")
		Eventually(func(g Gomega) {
			if size := Replicas(g, mgmt, md); size != 0 {
				StopTrying(fmt.Sprintf("the group grew to %d for a pod whose claim does not exist", size)).Now()
			}
			pods := PodsOf(g, workload, app)
			g.Expect(pods).To(HaveLen(1))
			events := PodEvents(g, workload, namespace.Name, "NotTriggerScaleUp")[pods[0].Name]
			g.Expect(EventMessages(events)).To(ContainElement(ContainSubstring(`persistentvolumeclaim "missing" not found`)))
		}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
		expectNotTriggerReason(mgmt, ca, `persistentvolumeclaim "missing" not found`)
		// A few more loops: the pod stays pending and the group at 0.
		Consistently(func(g Gomega) {
			g.Expect(Replicas(g, mgmt, md)).To(BeZero())
			g.Expect(PendingPods(g, workload, namespace.Name)).To(Equal(1))
		}, 5*time.Second, AutoscalerPoll).Should(Succeed())
		ExpectReplicasTrajectory(invariants.Replicas(md), 0)
		invariants.ExpectNoViolations()
		Expect(GetClusterAutoscaler(Default, mgmt, ca).Status.LastScaleUpTime).To(BeNil())

		DeleteClusterAutoscaler(mgmt, ca)
	})
}
