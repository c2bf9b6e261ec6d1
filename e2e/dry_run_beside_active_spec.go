//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// DryRunBesideActiveSpecInput is the input of DryRunBesideActiveSpec.
type DryRunBesideActiveSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the Active ClusterAutoscaler reaches the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
	// Manager returns the running autoscaler manager, whose log tells when
	// it started an engine; it must not exit or panic.
	Manager func() *localstack.Process
}

// besideActiveUnneededTime is the Active ClusterAutoscaler's unneededTime:
// long enough that engines started again every ClusterCache resync (about
// 10 s, what a DryRun ClusterAutoscaler with other credentials caused)
// never let a node stay unneeded for that long.
const besideActiveUnneededTime = 20 * time.Second

// DryRunBesideActiveSpec tries a scale-down configuration as
// docs/howto/workload-identity.md tells users to: an Active ClusterAutoscaler that reaches the workload
// cluster with the narrow workload kubeconfig Secret, and a DryRun one for
// the same Cluster, created later to trial a shorter unneededTime, that
// names no Secret (so that alone it would use the Cluster's admin
// kubeconfig). The Active one owns the Cluster whatever their ages; the
// DryRun one shares its connection. Over several unneeded periods the
// nodes of a group are emptied one by one: each must go within a few
// unneeded periods, neither engine may start again, the DryRun one must
// publish a scale-down it would make, and no invariant may break.
func DryRunBesideActiveSpec(ctx context.Context, inputGetter func() DryRunBesideActiveSpecInput) {
	var input DryRunBesideActiveSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DryRunBesideActiveSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "DryRunBesideActiveSpec needs the manager")
	})

	It("removes unneeded nodes one by one, without restarting its engine, while a DryRun ClusterAutoscaler without a Secret runs beside it", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "dry-run-beside")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})
		const batchPods = 3
		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1 + batchPods, MaxSize: 5, Machine: framework.SimMachine("2")})

		By("Filling every node with one pod of 1500m cpu: 1 that stays, 3 of a batch job")
		// Above the 0.5 utilization threshold, and no two fit on a node:
		// a node is unneeded only once its pod is gone.
		selector := map[string]string{framework.ClusterLabel: cluster.Name}
		steady := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "steady", Replicas: 1, Requests: framework.CPURequest("1500m"), NodeSelector: selector})
		framework.WaitForPodsRunning(ctx, workload, steady, framework.NodesReadyTimeout)
		batch := framework.CreateWorkload(ctx, framework.WorkloadInput{Client: workload, Namespace: namespace.Name, Name: "batch", Replicas: batchPods, Requests: framework.CPURequest("1500m"), NodeSelector: selector})
		framework.WaitForPodsRunning(ctx, workload, batch, framework.NodesReadyTimeout)

		By("Autoscaling with an Active ClusterAutoscaler that names the narrow workload kubeconfig Secret")
		activeSpec := framework.FastClusterAutoscalerSpec(cluster.Name)
		activeSpec.ScaleDown.UnneededTime = &metav1.Duration{Duration: besideActiveUnneededTime}
		active := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: activeSpec})

		By("Trialling a shorter unneededTime with a DryRun ClusterAutoscaler that names no Secret")
		trialSpec := framework.FastClusterAutoscalerSpec(cluster.Name)
		trialSpec.Mode = autoscalingv1alpha1.DryRunMode
		trialSpec.WorkloadKubeconfigSecretRef = nil
		// Shorter than the Active one's, so that the trial decides each
		// scale-down before the Active one makes it.
		trialSpec.ScaleDown.UnneededTime = &metav1.Duration{Duration: besideActiveUnneededTime / 2}
		trial := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace.Name, Name: cluster.Name + "-trial"},
			Spec:       trialSpec,
		}
		Expect(mgmt.Create(ctx, trial)).To(Succeed())
		DeferCleanup(func() { framework.DeleteClusterAutoscaler(ctx, mgmt, trial) })
		expectReady(ctx, mgmt, trial)

		bound := 3 * besideActiveUnneededTime
		for remaining := int32(batchPods - 1); remaining >= 0; remaining-- {
			nodes := remaining + 1
			By(fmt.Sprintf("Emptying one more node: the group goes to %d nodes within %s", nodes, bound))
			scaleDeployment(ctx, workload, batch, remaining)
			emptiedAt := time.Now()
			Eventually(func(g Gomega) int32 {
				return framework.Replicas(ctx, g, mgmt, md)
			}, bound, framework.AutoscalerPoll).Should(Equal(nodes), func() string {
				return fmt.Sprintf("the emptied node was not removed within %s: engines started %d times for %s, %d times for %s",
					bound, engineStarts(input.Manager(), active), active.Name, engineStarts(input.Manager(), trial), trial.Name)
			})
			took := time.Since(emptiedAt)
			Expect(took).To(BeNumerically(">=", besideActiveUnneededTime), "a node was removed before it was unneeded for %s", besideActiveUnneededTime)
			AddReportEntry("dry run beside active", fmt.Sprintf("%s: group at %d nodes %s after a node was emptied", input.Stack.Topology(), nodes, took.Round(time.Second)))
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: int(nodes)})
		}

		By("Seeing that neither engine started again, and that the DryRun one published a scale-down")
		Expect(engineStarts(input.Manager(), active)).To(Equal(1), "the Active engine started again: its drains and unneeded timers were forgotten")
		Expect(engineStarts(input.Manager(), trial)).To(Equal(1), "the DryRun engine started again")
		decisions := framework.GetClusterAutoscaler(ctx, Default, mgmt, trial).Status.DryRunDecisions
		Expect(firstDecision(decisions, autoscalingv1alpha1.ScaleDownDecision)).NotTo(BeNil(), "the DryRun ClusterAutoscaler decided no scale-down: %v", decisions)
		expectReady(ctx, mgmt, active)
		expectReady(ctx, mgmt, trial)

		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(input.Manager())
		framework.DeleteClusterAutoscaler(ctx, mgmt, active)
	})
}

// What the manager logs (internal/controller) when it starts an engine, and
// when a running engine goes on with the credentials of a new connection.
const (
	engineStartedLog      = `"Started the autoscaling engine"`
	credentialsSwappedLog = `"The engine goes on with the new credentials of the workload cluster connection"`
)

// engineStarts counts the engines that the manager's log says it started
// for ca.
func engineStarts(manager *localstack.Process, ca *autoscalingv1alpha1.ClusterAutoscaler) int {
	GinkgoHelper()
	return loggedFor(manager, ca, engineStartedLog)
}

// credentialSwaps counts the new connections whose credentials the
// manager's log says the engine of ca went on with.
func credentialSwaps(manager *localstack.Process, ca *autoscalingv1alpha1.ClusterAutoscaler) int {
	GinkgoHelper()
	return loggedFor(manager, ca, credentialsSwappedLog)
}

// loggedFor counts the lines of the manager's log with message that its
// reconciles of ca wrote.
func loggedFor(manager *localstack.Process, ca *autoscalingv1alpha1.ClusterAutoscaler, message string) int {
	GinkgoHelper()
	log, err := os.ReadFile(manager.LogPath())
	Expect(err).NotTo(HaveOccurred())
	of := fmt.Sprintf("ClusterAutoscaler=%q", ca.Namespace+"/"+ca.Name)
	count := 0
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, message) && strings.Contains(line, of) {
			count++
		}
	}
	return count
}

// scaleDeployment sets the replicas of a Deployment of the workload
// cluster.
func scaleDeployment(ctx context.Context, workload client.Client, deployment *appsv1.Deployment, replicas int32) {
	GinkgoHelper()
	framework.PatchObject(ctx, workload, deployment, false, func(d *appsv1.Deployment) {
		d.Spec.Replicas = ptr.To(replicas)
	})
}
