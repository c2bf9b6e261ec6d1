//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// LocalStackSmokeSpecInput is the input of LocalStackSmokeSpec.
type LocalStackSmokeSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// LocalStackSmokeSpec shows that the local stack behaves as a real management
// cluster: a MachineDeployment whose replicas Cluster API defaults from the
// autoscaler's min size produces Machines with Ready kwok Nodes that run
// pods, and deleting the Cluster removes them again.
func LocalStackSmokeSpec(ctx context.Context, inputGetter func() LocalStackSmokeSpecInput) {
	var (
		input     LocalStackSmokeSpecInput
		mgmt      client.Client
		workload  client.Client
		namespace *corev1.Namespace
	)

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "LocalStackSmokeSpec needs a stack")
		mgmt = input.Stack.Management.Client
		workload = input.Stack.Workload.Client
		namespace = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "smoke-" + rand.String(6)}}
		Expect(mgmt.Create(ctx, namespace)).To(Succeed())
	})

	It("runs a MachineDeployment of simulated machines", func() {
		By("Creating a Cluster of the simulated provider")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "smoke", WorkloadKubeconfig: input.WorkloadKubeconfig})

		By("Creating a MachineDeployment with the autoscaler's min and max size and no replicas")
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("4"),
			corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client:  mgmt,
			Cluster: cluster,
			Name:    "workers",
			Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "2",
				clusterv1.AutoscalerMaxSizeAnnotation: "5",
			},
			Machine: infrav1.SimMachineSpec{Capacity: capacity},
		})
		Expect(md.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)), "the Cluster API webhook defaults replicas to the min size")

		By("Publishing the template's capacity for scale from zero")
		template := &infrav1.SimMachineTemplate{}
		Eventually(func(g Gomega) {
			g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: namespace.Name, Name: "workers"}, template)).To(Succeed())
			g.Expect(template.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, capacity[corev1.ResourceCPU]))
			g.Expect(template.Status.NodeInfo).To(HaveValue(Equal(infrav1.NodeInfo{Architecture: "amd64", OperatingSystem: "linux"})))
		}, framework.ClusterReadyTimeout, framework.PollInterval).Should(Succeed())

		By("Waiting for 2 Running Machines with a nodeRef")
		machines := &clusterv1.MachineList{}
		Eventually(func(g Gomega) {
			g.Expect(mgmt.List(ctx, machines, client.InNamespace(namespace.Name), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
			g.Expect(machines.Items).To(HaveLen(2))
			for _, m := range machines.Items {
				g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
				g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no nodeRef", m.Name)
				g.Expect(m.Spec.ProviderID).To(HavePrefix(infrav1.ProviderIDPrefix))
			}
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())

		By("Seeing the Machines' Nodes Ready and schedulable in the workload cluster")
		for _, m := range machines.Items {
			node := &corev1.Node{}
			Eventually(func(g Gomega) {
				g.Expect(workload.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
				g.Expect(node.Spec.ProviderID).To(Equal(m.Spec.ProviderID))
				g.Expect(node.Status.Capacity.Cpu().Equal(capacity[corev1.ResourceCPU])).To(BeTrue())
				g.Expect(node.Status.Conditions).To(ContainElement(And(
					HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
				g.Expect(node.Spec.Taints).To(BeEmpty(), "the node lifecycle controller removes the not-ready taint")
			}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed(), "Node of Machine %s", m.Name)
		}

		By("Running a pod on them")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "smoke-" + rand.String(6)},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelArchStable: "amd64"},
				Containers: []corev1.Container{{
					Name:      "app",
					Image:     "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
				}},
			},
		}
		Eventually(func() error {
			// The default ServiceAccount appears shortly after the API server.
			return workload.Create(ctx, pod)
		}, framework.ClusterReadyTimeout, framework.PollInterval).Should(Succeed())
		nodeNames := make([]string, 0, len(machines.Items))
		for _, m := range machines.Items {
			nodeNames = append(nodeNames, m.Status.NodeRef.Name)
		}
		Eventually(func(g Gomega) {
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Spec.NodeName).To(BeElementOf(nodeNames))
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())

		By("Making a Node NotReady and Ready again with kwok's chaos stage")
		node := &corev1.Node{}
		Expect(workload.Get(ctx, client.ObjectKey{Name: nodeNames[0]}, node)).To(Succeed())
		framework.SetNodeLabel(ctx, workload, node.Name, localstack.NodeNotReadyLabel, "true")
		Eventually(func(g Gomega) {
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(nodefacts.KubeletReady(node)).To(BeFalse())
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())
		framework.SetNodeLabel(ctx, workload, node.Name, localstack.NodeNotReadyLabel, "")
		Eventually(func(g Gomega) {
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(nodefacts.KubeletReady(node)).To(BeTrue())
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())

		By("Scaling the MachineDeployment to zero, which drains the Nodes and deletes them")
		before := md.DeepCopy()
		md.Spec.Replicas = ptr.To[int32](0)
		Expect(mgmt.Patch(ctx, md, client.MergeFrom(before))).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(mgmt.List(ctx, machines, client.InNamespace(namespace.Name))).To(Succeed())
			g.Expect(machines.Items).To(BeEmpty())
			for _, name := range nodeNames {
				err := workload.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{})
				g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s", name)
			}
			// kwok deletes the evicted pod at once.
			err := workload.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "pod %s", pod.Name)
		}, framework.DeletionTimeout, framework.PollInterval).Should(Succeed())

		framework.DeleteCluster(ctx, mgmt, cluster)
	})

	It("shows provisioning failures and hangs on the Machines", func() {
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: "broken", WorkloadKubeconfig: input.WorkloadKubeconfig})
		failing := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "failing", Replicas: ptr.To[int32](1),
			Machine: infrav1.SimMachineSpec{Provisioning: infrav1.ProvisioningFail},
		})
		hanging := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: "hanging", Replicas: ptr.To[int32](1),
			Machine: infrav1.SimMachineSpec{Provisioning: infrav1.ProvisioningHang},
		})

		By("Seeing Cluster API report the failed Machine")
		Eventually(func(g Gomega) {
			machine := onlyMachine(ctx, g, mgmt, failing)
			// The deprecated failureReason is still how Cluster API v1beta2
			// reports a terminal failure of the infrastructure.
			g.Expect(machine.Status.Deprecated).NotTo(BeNil())
			g.Expect(machine.Status.Deprecated.V1Beta1).NotTo(BeNil())                                             //nolint:staticcheck // see above
			g.Expect(machine.Status.Deprecated.V1Beta1.FailureReason).To(HaveValue(BeEquivalentTo("CreateError"))) //nolint:staticcheck // see above
			g.Expect(conditions.IsFalse(&machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())

		By("Seeing the hanging Machine never provisioned")
		Eventually(func(g Gomega) {
			machine := onlyMachine(ctx, g, mgmt, hanging)
			g.Expect(conditions.IsFalse(&machine, clusterv1.MachineInfrastructureReadyCondition)).To(BeTrue())
		}, framework.NodesReadyTimeout, framework.PollInterval).Should(Succeed())
		Consistently(func(g Gomega) {
			machine := onlyMachine(ctx, g, mgmt, hanging)
			g.Expect(machine.Spec.ProviderID).To(BeEmpty())
			g.Expect(ptr.Deref(machine.Status.Initialization.InfrastructureProvisioned, false)).To(BeFalse())
		}, 3*time.Second, framework.PollInterval).Should(Succeed())

		framework.DeleteCluster(ctx, mgmt, cluster)
	})

	AfterEach(func() {
		Expect(mgmt.Delete(ctx, namespace)).To(Succeed())
	})
}

// onlyMachine returns the single Machine of md.
func onlyMachine(ctx context.Context, g Gomega, c client.Client, md *clusterv1.MachineDeployment) clusterv1.Machine {
	machines := framework.MachinesOf(ctx, g, c, md)
	g.Expect(machines).To(HaveLen(1))
	return machines[0]
}
