package framework

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/test/framework/localstack"
)

// KubernetesVersion is the version of the simulated Nodes.
const KubernetesVersion = "v1.36.3"

// Intervals used with Eventually.
var (
	ClusterReadyTimeout = 1 * time.Minute
	NodesReadyTimeout   = 2 * time.Minute
	DeletionTimeout     = 2 * time.Minute
	PollInterval        = 250 * time.Millisecond
)

// CreateSimulatedClusterInput describes a Cluster of the simulated provider.
type CreateSimulatedClusterInput struct {
	// Client talks to the management cluster.
	Client    client.Client
	Namespace string
	Name      string

	// FailureDomains of the SimCluster; Machines placed in one get it as
	// their Node's zone.
	FailureDomains []string

	// WorkloadKubeconfig reaches the workload cluster as the autoscaler
	// does there (WorkloadServiceAccount); it goes to the Secret that
	// FastClusterAutoscalerSpec names.
	WorkloadKubeconfig []byte
}

// CreateSimulatedCluster creates a Cluster with a SimCluster and a
// SimControlPlane, the bootstrap data Secret its Machines boot from and the
// Secret of the autoscaler's workload kubeconfig, and waits until Cluster
// API reports it provisioned and initialized.
func CreateSimulatedCluster(ctx context.Context, input CreateSimulatedClusterInput) *clusterv1.Cluster {
	Expect(input.WorkloadKubeconfig).NotTo(BeEmpty(), "CreateSimulatedCluster needs the autoscaler's workload kubeconfig")
	c := input.Client
	Expect(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: BootstrapSecretName(input.Name)},
		Type:       clusterv1.ClusterSecretType,
		Data:       map[string][]byte{"value": []byte("#!/bin/true\n"), "format": []byte("cloud-config")},
	})).To(Succeed())
	Expect(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: WorkloadKubeconfigSecretName(input.Name)},
		Data:       map[string][]byte{secret.KubeconfigDataName: input.WorkloadKubeconfig},
	})).To(Succeed())
	Expect(c.Create(ctx, &infrav1.SimCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec:       infrav1.SimClusterSpec{FailureDomains: input.FailureDomains},
	})).To(Succeed())
	Expect(c.Create(ctx, &infrav1.SimControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
	})).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec: clusterv1.ClusterSpec{
			InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimCluster", Name: input.Name},
			ControlPlaneRef:   clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimControlPlane", Name: input.Name},
		},
	}
	Expect(c.Create(ctx, cluster)).To(Succeed())

	Eventually(func(g Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(cluster), cluster)).To(Succeed())
		g.Expect(cluster.Status.Initialization.InfrastructureProvisioned).To(HaveValue(BeTrue()))
		g.Expect(cluster.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
	}, ClusterReadyTimeout, PollInterval).Should(Succeed(), "Cluster %s/%s is not provisioned", input.Namespace, input.Name)
	return cluster
}

// BootstrapSecretName is the bootstrap data Secret of a simulated Cluster's
// Machines.
func BootstrapSecretName(clusterName string) string {
	return clusterName + "-bootstrap"
}

// WorkloadKubeconfigSecretName is the Secret of a simulated Cluster that
// holds the autoscaler's workload kubeconfig, for WorkloadServiceAccount.
func WorkloadKubeconfigSecretName(clusterName string) string {
	return clusterName + "-autoscaler-kubeconfig"
}

// CreateNodeGroupInput describes a MachineDeployment of simulated machines.
type CreateNodeGroupInput struct {
	// Client talks to the management cluster.
	Client  client.Client
	Cluster *clusterv1.Cluster
	Name    string

	// Replicas of the MachineDeployment; left for Cluster API to default
	// when nil.
	Replicas *int32

	// Annotations of the MachineDeployment, e.g. the autoscaler's min and
	// max size.
	Annotations map[string]string

	// Machine is the spec of the SimMachineTemplate: capacity, provisioning
	// behaviour.
	Machine infrav1.SimMachineSpec

	// FailureDomain places the Machines.
	FailureDomain string

	// Labels of the Machines; Cluster API propagates node-role.kubernetes.io/*,
	// node-restriction.kubernetes.io/* and *.node.cluster.x-k8s.io/* ones to
	// their Nodes.
	Labels map[string]string
}

// CreateNodeGroup creates a SimMachineTemplate and a MachineDeployment using
// it, and returns the MachineDeployment as the API server stored it.
func CreateNodeGroup(ctx context.Context, input CreateNodeGroupInput) *clusterv1.MachineDeployment {
	c := input.Client
	cluster := input.Cluster
	Expect(c.Create(ctx, &infrav1.SimMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: input.Name},
		Spec:       infrav1.SimMachineTemplateSpec{Template: infrav1.SimMachineTemplateResource{Spec: input.Machine}},
	})).To(Succeed())
	md := &clusterv1.MachineDeployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: input.Name, Annotations: input.Annotations},
		Spec: clusterv1.MachineDeploymentSpec{
			ClusterName: cluster.Name,
			Replicas:    input.Replicas,
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: input.Labels},
				Spec: clusterv1.MachineSpec{
					ClusterName:       cluster.Name,
					Version:           KubernetesVersion,
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(BootstrapSecretName(cluster.Name))},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachineTemplate", Name: input.Name},
					FailureDomain:     input.FailureDomain,
				},
			},
		},
	}
	Expect(c.Create(ctx, md)).To(Succeed())
	return md
}

// CreateZonalNodeGroupsInput is the input of CreateZonalNodeGroups.
type CreateZonalNodeGroupsInput struct {
	Management, Workload client.Client
	Cluster              *clusterv1.Cluster
	// Zones are failure domains of the Cluster; each gets a node group
	// named workers-<zone>.
	Zones []string
	// Replicas of each node group, waited for as Ready Nodes.
	Replicas    int32
	Annotations map[string]string
	Machine     infrav1.SimMachineSpec
}

// CreateZonalNodeGroups creates one node group of the same machines per
// failure domain, the way users lay out zonal MachineDeployments, and waits
// for their Nodes.
func CreateZonalNodeGroups(ctx context.Context, input CreateZonalNodeGroupsInput) []*clusterv1.MachineDeployment {
	groups := make([]*clusterv1.MachineDeployment, 0, len(input.Zones))
	for _, zone := range input.Zones {
		groups = append(groups, CreateNodeGroup(ctx, CreateNodeGroupInput{
			Client: input.Management, Cluster: input.Cluster, Name: "workers-" + zone,
			Replicas:      ptr.To(input.Replicas),
			Annotations:   input.Annotations,
			Machine:       input.Machine,
			FailureDomain: zone,
			Labels:        map[string]string{ClusterLabel: input.Cluster.Name},
		}))
	}
	for _, md := range groups {
		WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: input.Management, Workload: input.Workload, Group: md, Count: int(input.Replicas)})
	}
	return groups
}

// OnlyNode is the name of the only Node of nodes, the names of Nodes by
// Machine name that CreateWorkerGroup returns.
func OnlyNode(nodes map[string]string) string {
	GinkgoHelper()
	Expect(nodes).To(HaveLen(1))
	for _, node := range nodes {
		return node
	}
	return ""
}

// CreateWorkerGroupInput is the input of CreateWorkerGroup.
type CreateWorkerGroupInput struct {
	Stack   *localstack.Stack
	Cluster *clusterv1.Cluster
	// Nodes the group starts with; its min size is 1.
	Nodes int
	// MaxSize the group may grow to.
	MaxSize int
	// Machine is the spec of its machines; 4-core nodes when zero.
	Machine infrav1.SimMachineSpec
}

// CreateWorkerGroup creates the node group "workers" of the reliability
// specs, labelled with ClusterLabel, waits until its Nodes are Ready, and
// returns it with the names of its Nodes by Machine name.
func CreateWorkerGroup(ctx context.Context, input CreateWorkerGroupInput) (*clusterv1.MachineDeployment, map[string]string) {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	machine := input.Machine
	if machine.Capacity == nil {
		machine = SimMachine("4")
	}
	By(fmt.Sprintf("Creating a group of %d %s-core nodes, 1 to %d", input.Nodes, machine.Capacity.Cpu(), input.MaxSize))
	md := CreateNodeGroup(ctx, CreateNodeGroupInput{
		Client: mgmt, Cluster: input.Cluster, Name: "workers",
		Replicas:    ptr.To(int32(input.Nodes)),
		Annotations: SizeAnnotations(1, input.MaxSize),
		Machine:     machine,
		Labels:      map[string]string{ClusterLabel: input.Cluster.Name},
	})
	nodes := WaitForNodeGroupNodes(ctx, WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: input.Nodes})
	return md, nodes
}

// DeleteCluster deletes cluster and waits until Cluster API deleted it.
func DeleteCluster(ctx context.Context, c client.Client, cluster *clusterv1.Cluster) {
	By("Deleting the Cluster")
	Expect(c.Delete(ctx, cluster)).To(Succeed())
	Eventually(func() error {
		return c.Get(ctx, client.ObjectKeyFromObject(cluster), &clusterv1.Cluster{})
	}, DeletionTimeout, PollInterval).Should(Satisfy(apierrors.IsNotFound))
}

// ClusterLabel, set on the Machines of a spec's node groups, is propagated
// by Cluster API to their Nodes. The spec's pods select it: in the
// self-hosted topology every Cluster's Nodes share one API server and one
// scheduler.
const ClusterLabel = "e2e.node.cluster.x-k8s.io/cluster"

// SpecNamespace is the namespace of one spec: in the management cluster for
// its Cluster API objects and, under the same name, in the workload cluster
// for its pods.
type SpecNamespace struct {
	Name string
}

// CreateSpecNamespace creates a namespace named prefix-<random> in the
// management and the workload cluster of stack, and deletes it again after
// the spec.
func CreateSpecNamespace(ctx context.Context, stack *localstack.Stack, prefix string) SpecNamespace {
	name := prefix + "-" + rand.String(6)
	clients := []client.Client{stack.Management.Client}
	if stack.Workload != stack.Management {
		clients = append(clients, stack.Workload.Client)
	}
	for _, c := range clients {
		namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		Expect(c.Create(ctx, namespace)).To(Succeed())
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(c.Delete(ctx, namespace))).To(Succeed())
		})
	}
	return SpecNamespace{Name: name}
}
