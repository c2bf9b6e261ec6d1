package clusterapi

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// pendingInstancePrefix marks the IDs of Machines that have no provider ID yet.
const pendingInstancePrefix = "clusterapi://"

// nodeIndex finds the Node of a Machine in the workload cluster.
type nodeIndex struct {
	byProviderID map[string]*corev1.Node
	byName       map[string]*corev1.Node
	byMachine    map[types.NamespacedName]*corev1.Node
}

func newNodeIndex(nodes []corev1.Node) *nodeIndex {
	index := &nodeIndex{
		byProviderID: map[string]*corev1.Node{},
		byName:       map[string]*corev1.Node{},
		byMachine:    map[types.NamespacedName]*corev1.Node{},
	}
	for i := range nodes {
		node := &nodes[i]
		index.byName[node.Name] = node
		if node.Spec.ProviderID != "" {
			index.byProviderID[normalizeProviderID(node.Spec.ProviderID)] = node
		}
		// Cluster API annotates the Nodes it has linked to a Machine.
		machine, namespace := node.Annotations[clusterv1.MachineAnnotation], node.Annotations[clusterv1.ClusterNamespaceAnnotation]
		if machine != "" && namespace != "" {
			index.byMachine[types.NamespacedName{Namespace: namespace, Name: machine}] = node
		}
	}
	return index
}

// nodeFor returns the Node of the Machine, or nil when it has none yet: by
// provider ID first, then by what Cluster API recorded on either side. A Node
// whose provider ID contradicts the Machine's is never taken.
func (index *nodeIndex) nodeFor(machine *clusterv1.Machine) *corev1.Node {
	if machine.Spec.ProviderID != "" {
		if node := index.byProviderID[normalizeProviderID(machine.Spec.ProviderID)]; node != nil {
			return node
		}
	}
	candidates := []*corev1.Node{
		index.byName[machine.Status.NodeRef.Name],
		index.byMachine[types.NamespacedName{Namespace: machine.Namespace, Name: machine.Name}],
	}
	for _, node := range candidates {
		if node != nil && compatibleProviderIDs(machine.Spec.ProviderID, node.Spec.ProviderID) {
			return node
		}
	}
	return nil
}

func compatibleProviderIDs(machineProviderID, nodeProviderID string) bool {
	return machineProviderID == "" || nodeProviderID == "" || normalizeProviderID(machineProviderID) == normalizeProviderID(nodeProviderID)
}

// instanceID is the provider ID once known, else a name made from the Machine.
func instanceID(machine *clusterv1.Machine, node *corev1.Node) string {
	switch {
	case machine.Spec.ProviderID != "":
		return machine.Spec.ProviderID
	case node != nil && node.Spec.ProviderID != "":
		return node.Spec.ProviderID
	default:
		return fmt.Sprintf("%s%s/%s", pendingInstancePrefix, machine.Namespace, machine.Name)
	}
}

// machinelessMembers are the instances in a MachinePool's
// spec.providerIDList that none of the members with a Machine stands for:
// all of them when its infrastructure provider does not support MachinePool
// Machines, else those whose Machine is not created yet.
func machinelessMembers(providerIDs []string, withMachines []member, nodes *nodeIndex) []member {
	known := sets.New[string]()
	for _, m := range withMachines {
		if m.machine.Spec.ProviderID != "" {
			known.Insert(normalizeProviderID(m.machine.Spec.ProviderID))
		}
		if m.node != nil && m.node.Spec.ProviderID != "" {
			known.Insert(normalizeProviderID(m.node.Spec.ProviderID))
		}
	}
	var members []member
	for _, providerID := range providerIDs {
		normalized := normalizeProviderID(providerID)
		if providerID == "" || known.Has(normalized) {
			continue
		}
		known.Insert(normalized)
		node := nodes.byProviderID[normalized]
		members = append(members, member{node: node, instance: machinelessInstance(providerID, node)})
	}
	return members
}

// machinelessInstance is an instance of a MachinePool known only by its
// provider ID. There is no Machine to delete, so it is never given up when
// it does not register in time; nor can it be reported as failed.
func machinelessInstance(providerID string, node *corev1.Node) nodegroups.Instance {
	instance := nodegroups.Instance{ID: providerID, State: nodegroups.InstanceCreating}
	if node != nil {
		instance.NodeName = node.Name
		instance.State = nodegroups.InstanceRunning
	}
	return instance
}

func instanceFor(machine *clusterv1.Machine, node *corev1.Node) nodegroups.Instance {
	instance := nodegroups.Instance{
		ID:        instanceID(machine, node),
		Name:      machine.Name,
		State:     nodegroups.InstanceCreating,
		Removable: true,
		Created:   machine.CreationTimestamp.Time,
	}
	if owner := metav1.GetControllerOf(machine); owner != nil {
		instance.Owner = owner.Kind + "/" + owner.Name
	}
	if node != nil {
		instance.NodeName = node.Name
		instance.State = nodegroups.InstanceRunning
	}
	if !machine.DeletionTimestamp.IsZero() || machine.Status.Phase == string(clusterv1.MachinePhaseDeleting) {
		instance.State = nodegroups.InstanceDeleting
		return instance
	}
	if node == nil {
		instance.Error = provisioningFailure(machine)
	}
	return instance
}

// provisioningFailure returns why the Machine will never get a Node, or nil
// while it may still get one. Only the signals Cluster API defines as
// terminal count: since the v1beta2 contract, providers report errors they
// retry in conditions whose reasons Cluster API gives no meaning to (a
// passing cloud hiccup often reads "...Failed"), so those are slow
// provisioning, which maxNodeProvisionTime bounds.
func provisioningFailure(machine *clusterv1.Machine) *nodegroups.InstanceError {
	// Providers that still implement the deprecated v1beta1 contract report
	// terminal failures in failureReason and failureMessage, which Cluster
	// API copies to the Machine.
	//nolint:staticcheck // SA1019: read on purpose, to detect failed Machines of providers that still set them.
	if deprecated := machine.Status.Deprecated; deprecated != nil && deprecated.V1Beta1 != nil {
		if reason, message := deprecated.V1Beta1.FailureReason, deprecated.V1Beta1.FailureMessage; reason != nil || message != nil {
			failure := &nodegroups.InstanceError{Reason: "MachineFailed"}
			if reason != nil {
				failure.Reason = string(*reason)
			}
			if message != nil {
				failure.Message = *message
			}
			return failure
		}
	}
	// A MachineHealthCheck whose nodeStartupTimeout passed has the Machine
	// replaced: Cluster API itself gave up on it booting. Its other verdicts
	// (a deleted or unhealthy Node, an operator's request) say nothing about
	// provisioning.
	if condition := conditions.Get(machine, clusterv1.MachineHealthCheckSucceededCondition); condition != nil &&
		condition.Status == metav1.ConditionFalse && condition.Reason == clusterv1.MachineHealthCheckNodeStartupTimeoutReason {
		return &nodegroups.InstanceError{Reason: condition.Reason, Message: fmt.Sprintf("%s: %s", condition.Type, condition.Message)}
	}
	// Cluster API no longer sets this phase, but a Machine stored by an
	// earlier release keeps it until it leaves it.
	if machine.Status.Phase == string(clusterv1.MachinePhaseFailed) { //nolint:staticcheck // SA1019: read on purpose, see above.
		return &nodegroups.InstanceError{Reason: "MachineFailed", Message: "Machine phase is Failed"}
	}
	return nil
}
