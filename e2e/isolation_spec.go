//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faults"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// IsolationSpecInput is the input of IsolationSpec.
type IsolationSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// RepoRoot is the repository the spec builds its manager from.
	RepoRoot string

	// Manager is the running autoscaler manager; the spec stops it for the
	// time of the spec and starts its binary again with ManagerArgs.
	Manager     *localstack.Process
	ManagerArgs []string

	// Restarted is told about the manager the spec starts again.
	Restarted func(*localstack.Process)
}

const (
	// faultsManager is the process name, and log, of the manager built with
	// node groups that panic on request.
	faultsManager = "capi-autoscaler-faults"
	// engineRecoveryTimeout is the longest delay before a new engine
	// starts after a panic, and a loop.
	engineRecoveryTimeout = 6 * time.Minute
)

// IsolationSpec runs the manager of framework.PanickingManager, whose node
// groups panic while their MachineDeployment carries
// faults.PanicAnnotation, with two workload clusters that need a node
// each, and makes the node group of one of them panic in every loop. The
// other cluster must be scaled up as if nothing happened; the one that
// panics must say so on its ClusterAutoscaler (Ready=False,
// EnginePanicked, and an event), not scale, and be scaled up once the
// panics stop and a new engine has started; the manager must stay up,
// live and ready throughout.
//
// It stops and starts the suite's manager: run it serially.
func IsolationSpec(ctx context.Context, inputGetter func() IsolationSpecInput) {
	var input IsolationSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "IsolationSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "IsolationSpec needs the running manager")
		Expect(input.Restarted).NotTo(BeNil(), "IsolationSpec needs to tell about the restarted manager")
	})

	It("keeps autoscaling one cluster while the engine of another panics, and restarts that engine", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client

		By("Building the manager with node groups that panic on request")
		binary := framework.BuildManager(ctx, input.RepoRoot, GinkgoT().TempDir(), framework.PanickingManager)

		By("Running it in place of the suite's manager")
		Expect(input.Manager.Stop()).To(Succeed())
		DeferCleanup(func() {
			By("Starting the suite's manager again")
			p, err := input.Stack.StartProcess(ctx, "capi-autoscaler-after-isolation", input.Manager.Binary(), input.ManagerArgs...)
			Expect(err).NotTo(HaveOccurred())
			input.Restarted(p)
		})
		healthPort, err := localstack.FreePort()
		Expect(err).NotTo(HaveOccurred())
		manager, err := input.Stack.StartProcess(ctx, faultsManager, binary,
			append(input.ManagerArgs, fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", healthPort))...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(manager.Stop()).To(Succeed()) })
		probes := http.Client{Timeout: 5 * time.Second}
		probe := func(g Gomega, path string) {
			resp, err := probes.Get(fmt.Sprintf("http://127.0.0.1:%d%s", healthPort, path))
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s", path)
		}
		Eventually(func(g Gomega) { probe(g, "/readyz") }, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "isolation")
		type member struct {
			cluster *clusterv1.Cluster
			md      *clusterv1.MachineDeployment
			ca      *autoscalingv1alpha1.ClusterAutoscaler
			app     *appsv1.Deployment
		}
		healthy, panicking := &member{}, &member{}
		for i, m := range []*member{healthy, panicking} {
			name := namespace.Name + []string{"-healthy", "-panicking"}[i]
			m.cluster = framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: name, WorkloadKubeconfig: input.WorkloadKubeconfig})
			DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, m.cluster) })
			m.md = framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: m.cluster, Name: name + "-workers",
				Replicas:    ptr.To[int32](1),
				Annotations: framework.SizeAnnotations(1, 3),
				Machine:     framework.SimMachine("2"),
				Labels:      map[string]string{framework.ClusterLabel: m.cluster.Name},
			})
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: m.md, Count: 1})
			m.ca = framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: m.cluster, Spec: framework.FastClusterAutoscalerSpec(m.cluster.Name)})
			DeferCleanup(func() { framework.DeleteClusterAutoscaler(ctx, mgmt, m.ca) })
		}

		By("Making the node group of one cluster panic in every loop")
		framework.PatchObject(ctx, mgmt, panicking.md, false, func(md *clusterv1.MachineDeployment) {
			annotations := maps.Clone(md.Annotations)
			annotations[faults.PanicAnnotation] = "a bug in node group " + md.Name
			md.Annotations = annotations
		})
		Eventually(func(g Gomega) {
			ready := conditions.Get(framework.GetClusterAutoscaler(ctx, g, mgmt, panicking.ca), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready.Reason).To(Equal(autoscalingv1alpha1.EnginePanickedReason))
			g.Expect(ready.Message).To(ContainSubstring("a bug in node group " + panicking.md.Name))
			g.Expect(framework.ObjectEvents(ctx, g, mgmt, namespace.Name, "ClusterAutoscaler", panicking.ca.Name, autoscalingv1alpha1.EnginePanickedReason)).NotTo(BeEmpty())
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		log, err := os.ReadFile(manager.LogPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).To(And(ContainSubstring("Observed a panic"), ContainSubstring("stacktrace")), "the panic is logged with its stack")

		By("Creating pods that need one more node in each cluster")
		for _, m := range []*member{healthy, panicking} {
			m.app = framework.CreateWorkload(ctx, framework.WorkloadInput{
				Client: workload, Namespace: namespace.Name, Name: m.cluster.Name + "-app", Replicas: 2,
				Requests:     framework.CPURequest("1500m"),
				NodeSelector: map[string]string{framework.ClusterLabel: m.cluster.Name},
			})
			DeferCleanup(func() { framework.DeleteWorkload(ctx, workload, m.app) })
		}

		By("Seeing the healthy cluster scaled up, the panicking one not, and the manager live and ready")
		Eventually(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, healthy.md)).To(BeEquivalentTo(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForPodsRunning(ctx, workload, healthy.app, framework.ScaleUpTimeout)
		Consistently(func(g Gomega) {
			g.Expect(conditions.IsTrue(framework.GetClusterAutoscaler(ctx, g, mgmt, healthy.ca), autoscalingv1alpha1.ReadyCondition)).To(BeTrue())
			g.Expect(conditions.GetReason(framework.GetClusterAutoscaler(ctx, g, mgmt, panicking.ca), autoscalingv1alpha1.ReadyCondition)).To(Equal(autoscalingv1alpha1.EnginePanickedReason))
			g.Expect(framework.Replicas(ctx, g, mgmt, panicking.md)).To(BeEquivalentTo(1))
			probe(g, "/healthz")
			probe(g, "/readyz")
		}, 30*time.Second, framework.AutoscalerPoll).Should(Succeed())

		By("Letting the node group stop panicking: a new engine starts and scales the cluster up")
		framework.PatchObject(ctx, mgmt, panicking.md, false, func(md *clusterv1.MachineDeployment) {
			annotations := maps.Clone(md.Annotations)
			delete(annotations, faults.PanicAnnotation)
			md.Annotations = annotations
		})
		Eventually(func(g Gomega) {
			g.Expect(conditions.IsTrue(framework.GetClusterAutoscaler(ctx, g, mgmt, panicking.ca), autoscalingv1alpha1.ReadyCondition)).To(BeTrue())
			g.Expect(framework.Replicas(ctx, g, mgmt, panicking.md)).To(BeEquivalentTo(2))
		}, engineRecoveryTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.WaitForPodsRunning(ctx, workload, panicking.app, framework.ScaleUpTimeout)
		Expect(manager.Exited()).NotTo(BeClosed(), "the manager %s exited: %v", manager.Name(), manager.Err())
	})
}
