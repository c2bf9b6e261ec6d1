package framework

import (
	"context"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
)

// CreateMachinePoolInput describes a MachinePool of simulated instances.
type CreateMachinePoolInput struct {
	// Client talks to the management cluster.
	Client  client.Client
	Cluster *clusterv1.Cluster
	Name    string

	// Replicas of the MachinePool.
	Replicas int32

	// Annotations of the MachinePool, e.g. the autoscaler's min and max
	// size.
	Annotations map[string]string

	// Machine is the template of the SimMachinePool's instances: capacity,
	// provisioning behaviour.
	Machine infrav1.SimMachineSpec

	// Labels of the MachinePool Machines, which Cluster API propagates to
	// their Nodes as for CreateNodeGroupInput.Labels.
	Labels map[string]string
}

// CreateMachinePool creates a SimMachinePool and a MachinePool using it,
// and returns the MachinePool as the API server stored it.
func CreateMachinePool(ctx context.Context, input CreateMachinePoolInput) *clusterv1.MachinePool {
	c := input.Client
	cluster := input.Cluster
	Expect(c.Create(ctx, &infrav1.SimMachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: input.Name},
		Spec:       infrav1.SimMachinePoolSpec{Template: input.Machine},
	})).To(Succeed())
	mp := &clusterv1.MachinePool{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: input.Name, Annotations: input.Annotations},
		Spec: clusterv1.MachinePoolSpec{
			ClusterName: cluster.Name,
			Replicas:    ptr.To(input.Replicas),
			Template: clusterv1.MachineTemplateSpec{
				ObjectMeta: clusterv1.ObjectMeta{Labels: input.Labels},
				Spec: clusterv1.MachineSpec{
					ClusterName:       cluster.Name,
					Version:           KubernetesVersion,
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(BootstrapSecretName(cluster.Name))},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachinePool", Name: input.Name},
				},
			},
		},
	}
	Expect(c.Create(ctx, mp)).To(Succeed())
	return mp
}

// MachinePoolID is the ID of the node group of a MachinePool.
func MachinePoolID(mp *clusterv1.MachinePool) string {
	return scalable.ID(scalable.KindMachinePool, mp.Namespace, mp.Name)
}

// MachinePoolRow returns the status row of mp's node group.
func MachinePoolRow(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, mp *clusterv1.MachinePool) autoscalingv1alpha1.NodeGroupStatus {
	return nodeGroupRowByID(ctx, g, c, ca, MachinePoolID(mp))
}

// PoolReplicas is the replica count of mp as the API server has it now.
func PoolReplicas(ctx context.Context, g Gomega, c client.Client, mp *clusterv1.MachinePool) int32 {
	current := &clusterv1.MachinePool{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(mp), current)).To(Succeed())
	return ptr.Deref(current.Spec.Replicas, 0)
}

// PoolMachines lists the MachinePool Machines of mp.
func PoolMachines(ctx context.Context, g Gomega, c client.Client, mp *clusterv1.MachinePool) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(mp.Namespace), client.MatchingLabels{clusterv1.MachinePoolNameLabel: mp.Name})).To(Succeed())
	return machines.Items
}

// WaitForMachinePoolNodesInput is the input of WaitForMachinePoolNodes.
type WaitForMachinePoolNodesInput struct {
	Management client.Client
	Workload   client.Client
	Pool       *clusterv1.MachinePool
	Count      int
}

// WaitForMachinePoolNodes waits until mp lists exactly Count instances in
// spec.providerIDList, each with a MachinePool Machine whose Node is Ready,
// and returns the names of those Nodes by Machine name.
func WaitForMachinePoolNodes(ctx context.Context, input WaitForMachinePoolNodesInput) map[string]string {
	var nodes map[string]string
	Eventually(func(g Gomega) {
		current := &clusterv1.MachinePool{}
		g.Expect(input.Management.Get(ctx, client.ObjectKeyFromObject(input.Pool), current)).To(Succeed())
		g.Expect(current.Spec.ProviderIDList).To(HaveLen(input.Count))
		machines := PoolMachines(ctx, g, input.Management, input.Pool)
		g.Expect(machines).To(HaveLen(input.Count))
		for _, m := range machines {
			g.Expect(m.Spec.ProviderID).To(BeElementOf(current.Spec.ProviderIDList), "Machine %s", m.Name)
		}
		nodes = readyNodes(ctx, g, input.Workload, machines)
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed(), "MachinePool %s does not have %d Ready Nodes", input.Pool.Name, input.Count)
	return nodes
}
