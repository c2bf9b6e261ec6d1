//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// KubeconfigRotationSpecInput is the input of KubeconfigRotationSpec.
type KubeconfigRotationSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// rotationPickupTimeout bounds how long the manager takes to reach the
// workload cluster with the credentials of a rotated kubeconfig: a loop,
// then the ClusterCache's next look at the Cluster (10 s), then a
// connection and a first loop.
const rotationPickupTimeout = time.Minute

// KubeconfigRotationSpec rotates the credentials of the kubeconfig a
// ClusterAutoscaler names, revoking the old ones as soon as the new ones
// are written, as a rotation that answers a leak does. The manager, never
// restarted, must go on autoscaling with the new credentials: the upstream
// autoscaler's users are told to restart it instead.
func KubeconfigRotationSpec(ctx context.Context, inputGetter func() KubeconfigRotationSpecInput) {
	var input KubeconfigRotationSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "KubeconfigRotationSpec needs a stack")
	})

	It("goes on autoscaling, without a restart, when the credentials of its workload kubeconfig are rotated and the old ones revoked", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "rotation")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 3})

		By("Reaching the workload cluster with a token that lives as long as a Secret there")
		first := createTokenHolder(ctx, workload, namespace.Name+"-first")
		kubeconfigSecret := framework.WorkloadKubeconfigSecret(namespace.Name, namespace.Name+"-rotated-kubeconfig", cluster.Name, boundWorkloadKubeconfig(ctx, input.Stack, first))
		Expect(mgmt.Create(ctx, kubeconfigSecret)).To(Succeed())
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: kubeconfigSecret.Name}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		By("Scaling up with the first credentials: 2 pods of 3 cores need 1 more node")
		before := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "before", Replicas: 2,
			Requests: framework.CPURequest("3"), NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForPodsRunning(ctx, workload, before, framework.ScaleUpTimeout)
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(2))
		expectReady(ctx, mgmt, ca)

		By("Rotating: new credentials in the Secret, and the old ones revoked at once")
		second := createTokenHolder(ctx, workload, namespace.Name+"-second")
		framework.PatchObject(ctx, mgmt, kubeconfigSecret, false, func(s *corev1.Secret) {
			s.Data[secret.KubeconfigDataName] = boundWorkloadKubeconfig(ctx, input.Stack, second)
		})
		rotatedAt := time.Now()
		Expect(workload.Delete(ctx, first)).To(Succeed())

		By("Seeing the manager connect again with the new credentials")
		Eventually(func(g Gomega) {
			g.Expect(framework.ObjectEvents(ctx, g, mgmt, namespace.Name, "ClusterAutoscaler", ca.Name, controller.WorkloadKubeconfigChangedReason)).NotTo(BeEmpty())
		}, rotationPickupTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Scaling up with them: 1 more pod of 3 cores needs 1 more node")
		after := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "after", Replicas: 1,
			Requests: framework.CPURequest("3"), NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
		})
		framework.WaitForPodsRunning(ctx, workload, after, rotationPickupTimeout+framework.ScaleUpTimeout)
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(3))
		expectReady(ctx, mgmt, ca)
		invariants.ExpectNoViolations()
		AddReportEntry("kubeconfig rotation", fmt.Sprintf("rotated, and the pods after it Running, in %s", time.Since(rotatedAt).Round(time.Second)))
	})
}

// createTokenHolder creates the Secret of the workload cluster that the
// tokens of boundWorkloadKubeconfig live as long as.
func createTokenHolder(ctx context.Context, workload client.Client, name string) *corev1.Secret {
	GinkgoHelper()
	holder := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: framework.WorkloadServiceAccount.Namespace, Name: name}}
	Expect(workload.Create(ctx, holder)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(workload.Delete(context.Background(), holder))).To(Succeed()) })
	return holder
}

// boundWorkloadKubeconfig is a kubeconfig for WorkloadServiceAccount whose
// token is revoked when holder is deleted.
func boundWorkloadKubeconfig(ctx context.Context, stack *localstack.Stack, holder *corev1.Secret) []byte {
	GinkgoHelper()
	kubeconfig, err := stack.WorkloadServiceAccountKubeconfigBoundTo(ctx, framework.WorkloadServiceAccount.Namespace, framework.WorkloadServiceAccount.Name, holder)
	Expect(err).NotTo(HaveOccurred())
	return kubeconfig
}

// expectReady expects the Ready condition of ca to be True: its loops run.
func expectReady(ctx context.Context, mgmt client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		current := framework.GetClusterAutoscaler(ctx, g, mgmt, ca)
		g.Expect(current.Status.Conditions).To(ContainElement(And(
			HaveField("Type", autoscalingv1alpha1.ReadyCondition),
			HaveField("Status", metav1.ConditionTrue),
		)), "ClusterAutoscaler %s is not Ready", ca.Name)
	}, rotationPickupTimeout, framework.AutoscalerPoll).Should(Succeed())
}
