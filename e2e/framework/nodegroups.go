package framework

import (
	"context"
	"fmt"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

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

// The helpers below take any kind of node group alike: a MachineDeployment,
// a MachineSet or a MachinePool, as CreateNodeGroup and CreateMachinePool
// return them or read from the API server.

// NodeGroupID is the ID of a node group, as the ClusterAutoscaler status and
// the expander priorities name it.
func NodeGroupID(group client.Object) string {
	return scalable.ID(nodeGroupKind(group), group.GetNamespace(), group.GetName())
}

// nodeGroupKind is the kind of a node group object.
func nodeGroupKind(group client.Object) string {
	switch group.(type) {
	case *clusterv1.MachineDeployment:
		return scalable.KindMachineDeployment
	case *clusterv1.MachineSet:
		return scalable.KindMachineSet
	case *clusterv1.MachinePool:
		return scalable.KindMachinePool
	}
	Fail(fmt.Sprintf("%T %s is not a MachineDeployment, a MachineSet or a MachinePool", group, klog.KObj(group)))
	return ""
}

// machineGroupLabels are the labels Cluster API sets on the Machines of a
// node group, by the group's kind, to its name.
var machineGroupLabels = map[string]string{
	scalable.KindMachineDeployment: clusterv1.MachineDeploymentNameLabel,
	scalable.KindMachineSet:        clusterv1.MachineSetNameLabel,
	scalable.KindMachinePool:       clusterv1.MachinePoolNameLabel,
}

// NodeGroupRow returns the status row of a node group.
func NodeGroupRow(ctx context.Context, g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, group client.Object) autoscalingv1alpha1.NodeGroupStatus {
	id := NodeGroupID(group)
	current := GetClusterAutoscaler(ctx, g, c, ca)
	for _, row := range current.Status.NodeGroups {
		if row.ID == id {
			return row
		}
	}
	g.Expect(current.Status.NodeGroups).To(ContainElement(HaveField("ID", id)), "no status row for %s", id)
	return autoscalingv1alpha1.NodeGroupStatus{}
}

// Replicas is the replica count of a node group as the API server has it
// now.
func Replicas(ctx context.Context, g Gomega, c client.Client, group client.Object) int32 {
	current := scalable.EmptyObject(NodeGroupID(group))
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(current), current)).To(Succeed())
	replicas, _ := scalable.SpecReplicas(current)
	return int32(replicas)
}

// MachinesOf lists the Machines of a node group.
func MachinesOf(ctx context.Context, g Gomega, c client.Client, group client.Object) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(c.List(ctx, machines, client.InNamespace(group.GetNamespace()),
		client.MatchingLabels{machineGroupLabels[nodeGroupKind(group)]: group.GetName()})).To(Succeed())
	return machines.Items
}

// WaitForNodeGroupNodesInput is the input of WaitForNodeGroupNodes.
type WaitForNodeGroupNodesInput struct {
	Management client.Client
	Workload   client.Client
	// Group is a MachineDeployment, a MachineSet or a MachinePool.
	Group client.Object
	Count int
}

// WaitForNodeGroupNodes waits until a node group has exactly Count
// Machines, each with a Ready Node, and returns the names of those Nodes by
// Machine name. The Machines of a MachineDeployment or a MachineSet must be
// Running; those of a MachinePool must be the instances its
// spec.providerIDList lists, Count of them.
func WaitForNodeGroupNodes(ctx context.Context, input WaitForNodeGroupNodesInput) map[string]string {
	var nodes map[string]string
	Eventually(func(g Gomega) {
		machines := MachinesOf(ctx, g, input.Management, input.Group)
		g.Expect(machines).To(HaveLen(input.Count))
		if _, ok := input.Group.(*clusterv1.MachinePool); ok {
			pool := &clusterv1.MachinePool{}
			g.Expect(input.Management.Get(ctx, client.ObjectKeyFromObject(input.Group), pool)).To(Succeed())
			g.Expect(pool.Spec.ProviderIDList).To(HaveLen(input.Count))
			for _, m := range machines {
				g.Expect(m.Spec.ProviderID).To(BeElementOf(pool.Spec.ProviderIDList), "Machine %s", m.Name)
			}
		} else {
			for _, m := range machines {
				g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
			}
		}
		nodes = readyNodes(ctx, g, input.Workload, machines)
	}, NodesReadyTimeout, AutoscalerPoll).Should(Succeed(), "node group %s does not have %d Ready Nodes", NodeGroupID(input.Group), input.Count)
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

// WaitForTemplateCapacity waits until the SimMachineTemplate of a group
// made by CreateNodeGroup publishes its capacity, which a group at zero
// scales up from.
func WaitForTemplateCapacity(ctx context.Context, c client.Client, md *clusterv1.MachineDeployment) {
	Eventually(func(g Gomega) {
		template := &infrav1.SimMachineTemplate{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(md), template)).To(Succeed())
		g.Expect(template.Status.Capacity).NotTo(BeEmpty())
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed(), "the template of %s does not publish its capacity", md.Name)
}
