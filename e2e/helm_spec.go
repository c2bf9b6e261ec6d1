//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/helmchart"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// HelmChartSpecInput is the input of HelmChartSpec.
type HelmChartSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// RepoRoot holds the chart.
	RepoRoot string

	// Manager is the running autoscaler manager; the spec stops it for the
	// time of the spec, runs its binary as the chart installs it, and
	// starts it again with ManagerArgs.
	Manager     *localstack.Process
	ManagerArgs []string

	// Restarted is told about the manager the spec starts again.
	Restarted func(*localstack.Process)
}

// HelmChartSpec runs the manager as the Helm chart installs it in
// namespace-scoped mode with a watch filter: it renders the chart (with
// the Helm library), creates the ServiceAccount and RBAC it grants and
// nothing more (the simulated provider's templates are read through
// rbac.extraRules), and runs the manager's binary with the arguments and
// environment of the container of the rendered Deployment, as that
// ServiceAccount. The manager must become ready, hold its Lease, and
// scale a node group of a Cluster of the watched namespace up from zero,
// with no request refused.
//
// It stops and starts the suite's manager: run it serially.
func HelmChartSpec(ctx context.Context, inputGetter func() HelmChartSpecInput) {
	var input HelmChartSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "HelmChartSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "HelmChartSpec needs the running manager")
		Expect(input.Restarted).NotTo(BeNil(), "HelmChartSpec needs to tell about the restarted manager")
	})

	It("runs the manager with the chart's RBAC and arguments in namespace-scoped mode, and it autoscales", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "helm")
		release := helmchart.Release{Name: namespace.Name, Namespace: namespace.Name + "-system"}

		By("Rendering the chart for namespace " + namespace.Name + " and watch filter " + namespace.Name)
		values, err := helmchart.ParseValues(fmt.Sprintf(`
watchNamespace: %[1]s
watchFilter: %[1]s
logVerbosity: 2
crds: {install: false}
rbac:
  extraRules:
  - apiGroups: [%[2]s]
    resources: ["*"]
    verbs: [get, list, watch]
`, namespace.Name, infrav1.GroupVersion.Group))
		Expect(err).NotTo(HaveOccurred())
		rendered, err := helmchart.Render(filepath.Join(input.RepoRoot, helmchart.Dir), release, helmchart.Options{Values: values})
		Expect(err).NotTo(HaveOccurred())
		kinds := sets.New[string]()
		var deployment *appsv1.Deployment
		for _, obj := range rendered.Objects {
			kinds.Insert(obj.GetKind())
			if obj.GetKind() == "Deployment" {
				deployment = &appsv1.Deployment{}
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment)).To(Succeed())
			}
		}
		Expect(sets.List(kinds)).To(ConsistOf("ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "Deployment"),
			"the chart installs nothing else with these values, so the spec runs all of it")
		Expect(deployment).NotTo(BeNil())

		By("Creating the chart's ServiceAccount and RBAC in namespace " + release.Namespace)
		Expect(mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release.Namespace}})).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			for _, obj := range rendered.Objects {
				Expect(client.IgnoreNotFound(mgmt.Delete(ctx, obj))).To(Succeed())
			}
			Expect(client.IgnoreNotFound(mgmt.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release.Namespace}}))).To(Succeed())
		})
		serviceAccount := framework.InstallRBAC(ctx, mgmt, rendered.Objects)
		kubeconfig, err := input.Stack.ServiceAccountKubeconfig(ctx, serviceAccount.Namespace, serviceAccount.Name)
		Expect(err).NotTo(HaveOccurred())

		By("Running the chart's manager in place of the suite's")
		Expect(input.Manager.Stop()).To(Succeed())
		DeferCleanup(func() {
			By("Starting the suite's manager again")
			p, err := input.Stack.StartProcess(ctx, "capi-autoscaler-after-helm", input.Manager.Binary(), input.ManagerArgs...)
			Expect(err).NotTo(HaveOccurred())
			input.Restarted(p)
		})
		forbiddenBefore := forbiddenRequests(input.Stack)
		healthPort, err := localstack.FreePort()
		Expect(err).NotTo(HaveOccurred())
		manager := framework.StartDeployment(ctx, framework.StartDeploymentInput{
			Stack: input.Stack, Name: "capi-autoscaler-helm", Binary: input.Manager.Binary(),
			Deployment: deployment, Container: "manager",
			Flags: []string{
				"--kubeconfig=" + kubeconfig,
				// Ports of this machine: other stacks may run on it.
				"--diagnostics-address=0",
				fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", healthPort),
			},
		})
		DeferCleanup(func() { Expect(manager.Stop()).To(Succeed()) })
		Expect(manager.Args()).To(ContainElements(
			"--namespace="+namespace.Name, "--watch-filter="+namespace.Name, "--leader-elect",
			"--leader-election-namespace="+release.Namespace, "--v=2"))

		By("Seeing it ready and holding its Lease")
		probes := http.Client{Timeout: 5 * time.Second}
		Eventually(func(g Gomega) {
			resp, err := probes.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort))
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())
		Eventually(func(g Gomega) {
			lease := &coordinationv1.Lease{}
			g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: release.Namespace, Name: release.Name + "-capi-autoscaler-leader"}, lease)).To(Succeed())
			g.Expect(lease.Spec.HolderIdentity).To(HaveValue(Not(BeEmpty())))
		}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By("Creating a Cluster of the watched namespace, labelled for the watch filter, with a node group of 2-cpu nodes at 0 replicas")
		watched := map[string]string{clusterv1.WatchLabel: namespace.Name}
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig, Labels: watched,
		})
		// From zero, the manager reads the simulated provider's template
		// (rbac.extraRules) and the CRDs that give its version (the
		// chart's ClusterRole).
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: namespace.Name + "-workers",
			Replicas:    ptr.To[int32](0),
			Annotations: framework.SizeAnnotations(0, 3),
			Machine:     framework.SimMachine("2"),
			Labels:      map[string]string{framework.ClusterLabel: namespace.Name},
		})
		framework.WaitForTemplateCapacity(ctx, mgmt, md)
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{
			Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name), Labels: watched,
		})

		By("Creating 2 pods of 1.5 cpu: each needs a node of its own")
		app := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "app", Replicas: 2,
			Requests:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			NodeSelector: map[string]string{framework.ClusterLabel: namespace.Name},
		})
		Eventually(func(g Gomega) int32 {
			return framework.Replicas(ctx, g, mgmt, md)
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(BeEquivalentTo(2))
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 2})
		framework.WaitForPodsRunning(ctx, workload, app, framework.ScaleUpTimeout)

		framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
		framework.ExpectManagerHealthy(manager)

		By("Checking that the chart's RBAC refused the manager nothing")
		Expect(forbiddenRequests(input.Stack).Difference(forbiddenBefore).UnsortedList()).To(BeEmpty())
	})
}

// forbiddenRequests are the rules of the autoscaler's requests the stack's
// API servers refused so far.
func forbiddenRequests(stack *localstack.Stack) sets.Set[string] {
	forbidden := sets.New[string]()
	for _, cluster := range slices.Compact([]*localstack.Cluster{stack.Management, stack.Workload}) {
		for rule := range cluster.Proxy.Stats().Forbidden {
			forbidden.Insert(cluster.Name + ": " + rule)
		}
	}
	return forbidden
}
