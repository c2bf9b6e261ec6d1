package framework

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// Intervals of the autoscaling specs. The machine the suite runs on may be
// small and busy: the timeouts are generous, the polling is not aggressive.
var (
	ScaleUpTimeout   = 3 * time.Minute
	ScaleDownTimeout = 3 * time.Minute
	AutoscalerPoll   = 1 * time.Second
	// ReleaseTimeout bounds how long the autoscaler may take to give a
	// node back once its removal no longer holds: a few loops of a second.
	ReleaseTimeout = 30 * time.Second
)

// Main packages of managers, relative to the repository's root.
const (
	// ProductManager is capi-autoscaler's manager (main.go).
	ProductManager = "."
	// PanickingManager is the manager whose node groups panic on request
	// (faults.PanicAnnotation).
	PanickingManager = "./e2e/framework/faults/manager"
)

// BuildManager builds the manager whose main package is mainPackage
// (ProductManager, PanickingManager) in the repository at repoRoot into
// dir, and returns the binary's path.
func BuildManager(ctx context.Context, repoRoot, dir, mainPackage string) string {
	binary := filepath.Join(dir, "manager")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", binary, mainPackage)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build of the manager: %s", out)
	return binary
}

// FastClusterAutoscalerSpec is the spec of a ClusterAutoscaler for
// clusterName whose loops and delays are short enough for a test: a loop
// every second, nodes removed 10s after they became unneeded, no delay
// after scaling. It reaches the workload cluster as WorkloadServiceAccount.
func FastClusterAutoscalerSpec(clusterName string) autoscalingv1alpha1.ClusterAutoscalerSpec {
	return autoscalingv1alpha1.ClusterAutoscalerSpec{
		ClusterName:                 clusterName,
		WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: WorkloadKubeconfigSecretName(clusterName)},
		ScanInterval:                &metav1.Duration{Duration: time.Second},
		ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
			DelayAfterAdd:     &metav1.Duration{},
			DelayAfterDelete:  &metav1.Duration{},
			DelayAfterFailure: &metav1.Duration{Duration: 5 * time.Second},
			UnneededTime:      &metav1.Duration{Duration: 10 * time.Second},
		},
		MaxNodeProvisionTime: &metav1.Duration{Duration: 2 * time.Minute},
		Backoff: &autoscalingv1alpha1.BackoffConfig{
			Initial: &metav1.Duration{Duration: 10 * time.Second},
			Max:     &metav1.Duration{Duration: time.Minute},
		},
		LogVerbosity: ptr.To[int32](2),
	}
}

// CreateClusterAutoscalerInput is the input of CreateClusterAutoscaler.
type CreateClusterAutoscalerInput struct {
	// Client talks to the management cluster.
	Client  client.Client
	Cluster *clusterv1.Cluster
	Spec    autoscalingv1alpha1.ClusterAutoscalerSpec
	// Labels of the ClusterAutoscaler, e.g. cluster.x-k8s.io/watch-filter.
	Labels map[string]string
}

// CreateClusterAutoscaler turns autoscaling on for a Cluster and waits
// until the autoscaler runs its loop, reporting Ready.
func CreateClusterAutoscaler(ctx context.Context, input CreateClusterAutoscalerInput) *autoscalingv1alpha1.ClusterAutoscaler {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Cluster.Namespace, Name: input.Cluster.Name, Labels: input.Labels},
		Spec:       input.Spec,
	}
	Expect(input.Client.Create(ctx, ca)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(input.Client.Get(ctx, client.ObjectKeyFromObject(ca), ca)).To(Succeed())
		g.Expect(ca.Status.Conditions).To(ContainElement(And(
			HaveField("Type", autoscalingv1alpha1.ReadyCondition), HaveField("Status", metav1.ConditionTrue))))
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed(), "ClusterAutoscaler %s/%s is not Ready", ca.Namespace, ca.Name)
	return ca
}

// ExpectPlannedPodsScheduledInput is the input of
// ExpectPlannedPodsScheduledOnNewNodes.
type ExpectPlannedPodsScheduledInput struct {
	// Client talks to the workload cluster.
	Client client.Client
	// Workloads whose pods the autoscaler planned for.
	Workloads []*appsv1.Deployment
	// NodesBefore are the Nodes that existed before the scale-up.
	NodesBefore sets.Set[string]
}

// ExpectPlannedPodsScheduledOnNewNodes checks that the autoscaler and
// kube-scheduler agree: every pod of the workloads with a TriggeredScaleUp
// event, that is every pod the autoscaler added nodes for, runs on a Node
// that did not exist before the scale-up. It returns the pods the
// autoscaler planned for.
func ExpectPlannedPodsScheduledOnNewNodes(ctx context.Context, input ExpectPlannedPodsScheduledInput) sets.Set[string] {
	By("Checking that kube-scheduler put every pod the autoscaler planned for on the new nodes")
	planned := sets.New[string]()
	Eventually(func(g Gomega) {
		planned.Clear()
		for _, deployment := range input.Workloads {
			triggered := PodEvents(ctx, g, input.Client, deployment.Namespace, "TriggeredScaleUp")
			for _, pod := range PodsOf(ctx, g, input.Client, deployment) {
				if _, ok := triggered[pod.Name]; !ok {
					continue
				}
				planned.Insert(pod.Name)
				g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s", pod.Name)
				g.Expect(input.NodesBefore.Has(pod.Spec.NodeName)).To(BeFalse(),
					"pod %s that triggered the scale-up runs on %s, which existed before", pod.Name, pod.Spec.NodeName)
			}
		}
		g.Expect(planned).NotTo(BeEmpty(), "no pod has a TriggeredScaleUp event")
	}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
	return planned
}

// DeleteAutoscaledClusterInput is the input of DeleteAutoscaledCluster.
type DeleteAutoscaledClusterInput struct {
	Management        client.Client
	Workload          client.Client
	ClusterAutoscaler *autoscalingv1alpha1.ClusterAutoscaler
	Cluster           *clusterv1.Cluster
}

// DeleteAutoscaledCluster turns autoscaling off, removes the workloads of
// the Cluster's namespace so that its Nodes drain at once, and deletes the
// Cluster.
func DeleteAutoscaledCluster(ctx context.Context, input DeleteAutoscaledClusterInput) {
	By("Deleting the ClusterAutoscaler")
	DeleteClusterAutoscaler(ctx, input.Management, input.ClusterAutoscaler)

	By("Deleting the workloads")
	Expect(input.Workload.DeleteAllOf(ctx, &appsv1.Deployment{}, client.InNamespace(input.Cluster.Namespace))).To(Succeed())
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(input.Workload.List(ctx, pods, client.InNamespace(input.Cluster.Namespace))).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
	}, DeletionTimeout, AutoscalerPoll).Should(Succeed())

	DeleteCluster(ctx, input.Management, input.Cluster)
}

// GetClusterAutoscaler reads the ClusterAutoscaler again.
func GetClusterAutoscaler(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) *autoscalingv1alpha1.ClusterAutoscaler {
	current := &autoscalingv1alpha1.ClusterAutoscaler{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ca), current)).To(Succeed())
	return current
}

// PatchClusterAutoscalerSpec changes the spec of a ClusterAutoscaler.
func PatchClusterAutoscalerSpec(ctx context.Context, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, mutate func(*autoscalingv1alpha1.ClusterAutoscalerSpec)) {
	GinkgoHelper()
	PatchObject(ctx, c, ca.DeepCopy(), false, func(current *autoscalingv1alpha1.ClusterAutoscaler) { mutate(&current.Spec) })
}

// DeleteClusterAutoscaler deletes a ClusterAutoscaler and waits until the
// manager removed its finalizer and it is gone.
func DeleteClusterAutoscaler(ctx context.Context, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) {
	GinkgoHelper()
	Expect(client.IgnoreNotFound(c.Delete(ctx, ca))).To(Succeed())
	Eventually(func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(ca), &autoscalingv1alpha1.ClusterAutoscaler{})
	}, DeletionTimeout, AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound), "ClusterAutoscaler %s/%s is not gone", ca.Namespace, ca.Name)
}

// ExpectProvisioned waits for a request's Provisioned condition.
func ExpectProvisioned(ctx context.Context, c client.Client, request *provisioningv1.ProvisioningRequest, status metav1.ConditionStatus, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		current := &provisioningv1.ProvisioningRequest{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(request), current)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(current.Status.Conditions, provisioningv1.AcceptedCondition)).To(BeTrue())
		g.Expect(meta.FindStatusCondition(current.Status.Conditions, provisioningv1.ProvisionedCondition)).To(HaveValue(SatisfyAll(
			HaveField("Status", status), HaveField("Reason", reason))))
	}, ScaleUpTimeout, AutoscalerPoll).Should(Succeed())
}

// ExpectNotTriggerReason waits until the ClusterAutoscaler status says
// that pods did not trigger a scale-up for reason.
func ExpectNotTriggerReason(ctx context.Context, mgmt client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, reason string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(GetClusterAutoscaler(ctx, g, mgmt, ca).Status.NotTriggerScaleUpReasons).To(ContainElement(HaveField("Reason", ContainSubstring(reason))))
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
}

// ExplainedNode is what the last published explanation of ca says of a
// Node; it fails g when the explanation is not published or does not
// list the Node.
func ExplainedNode(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, node string) autoscalingv1alpha1.NodeExplanation {
	configMap := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ca.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(ca.Name)}, configMap)).To(Succeed())
	explanation := &autoscalingv1alpha1.Explanation{}
	g.Expect(json.Unmarshal([]byte(configMap.Data[autoscalingv1alpha1.ExplanationDataKey]), explanation)).To(Succeed())
	i := slices.IndexFunc(explanation.Nodes, func(n autoscalingv1alpha1.NodeExplanation) bool { return n.Name == node })
	g.Expect(i).NotTo(BeNumerically("<", 0), "the explanation of %s lists no Node %s", explanation.LoopTime, node)
	return explanation.Nodes[i]
}
