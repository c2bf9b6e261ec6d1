package framework

import (
	"context"
	"strconv"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
)

// NodeGroupID is the ID of the node group of a MachineDeployment, as the
// ClusterAutoscaler status and the expander priorities name it.
func NodeGroupID(md *clusterv1.MachineDeployment) string {
	return scalable.ID(scalable.KindMachineDeployment, md.Namespace, md.Name)
}

// NodeGroupRow returns the status row of md's node group.
func NodeGroupRow(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, md *clusterv1.MachineDeployment) autoscalingv1alpha1.NodeGroupStatus {
	return nodeGroupRowByID(ctx, g, c, ca, NodeGroupID(md))
}

// nodeGroupRowByID returns the status row of the node group id.
func nodeGroupRowByID(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, id string) autoscalingv1alpha1.NodeGroupStatus {
	current := GetClusterAutoscaler(ctx, g, c, ca)
	for _, row := range current.Status.NodeGroups {
		if row.ID == id {
			return row
		}
	}
	g.Expect(current.Status.NodeGroups).To(ContainElement(HaveField("ID", id)), "no status row for %s", id)
	return autoscalingv1alpha1.NodeGroupStatus{}
}

// Replicas is the replica count of md as the API server has it now.
func Replicas(ctx context.Context, g Gomega, c client.Client, md *clusterv1.MachineDeployment) int32 {
	current := &clusterv1.MachineDeployment{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(md), current)).To(Succeed())
	return ptr.Deref(current.Spec.Replicas, 0)
}

// MachinesOf lists the Machines of md.
func MachinesOf(ctx context.Context, g Gomega, c client.Client, md *clusterv1.MachineDeployment) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(md.Namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: md.Name})).To(Succeed())
	return machines.Items
}

// WaitForNodeGroupNodesInput is the input of WaitForNodeGroupNodes.
type WaitForNodeGroupNodesInput struct {
	Management client.Client
	Workload   client.Client
	Group      *clusterv1.MachineDeployment
	Count      int
}

// WaitForNodeGroupNodes waits until md has exactly Count Running Machines
// whose Nodes are Ready, and returns the names of those Nodes by Machine
// name.
func WaitForNodeGroupNodes(ctx context.Context, input WaitForNodeGroupNodesInput) map[string]string {
	var nodes map[string]string
	Eventually(func(g Gomega) {
		machines := MachinesOf(ctx, g, input.Management, input.Group)
		g.Expect(machines).To(HaveLen(input.Count))
		for _, m := range machines {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		}
		nodes = readyNodes(ctx, g, input.Workload, machines)
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed(), "node group %s does not have %d Ready Nodes", input.Group.Name, input.Count)
	return nodes
}

// readyNodes expects every Machine to have a Node that is Ready, and
// returns the names of those Nodes by Machine name.
func readyNodes(ctx context.Context, g Gomega, workload client.Client, machines []clusterv1.Machine) map[string]string {
	nodes := make(map[string]string, len(machines))
	for _, m := range machines {
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no nodeRef", m.Name)
		node := &corev1.Node{}
		g.Expect(workload.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(nodefacts.KubeletReady(node)).To(BeTrue(), "Node %s", node.Name)
		nodes[m.Name] = node.Name
	}
	return nodes
}

// SimMachine is a simulated machine with cpu cores, 8Gi of memory and 110
// pods.
func SimMachine(cpu string) infrav1.SimMachineSpec {
	return infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}}
}

// SizeAnnotations are the autoscaler's min and max size annotations of a
// node group.
func SizeAnnotations(minSize, maxSize int) map[string]string {
	return map[string]string{
		clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(minSize),
		clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(maxSize),
	}
}
