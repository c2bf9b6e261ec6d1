package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// ProvisioningBehavior tells the provider how a simulated machine provisions.
// +kubebuilder:validation:Enum=Succeed;Fail;Hang;NeverRegister
type ProvisioningBehavior string

const (
	// ProvisioningSucceed provisions the machine and registers its Node.
	ProvisioningSucceed ProvisioningBehavior = "Succeed"

	// ProvisioningFail reports a terminal provisioning failure.
	ProvisioningFail ProvisioningBehavior = "Fail"

	// ProvisioningHang never finishes provisioning.
	ProvisioningHang ProvisioningBehavior = "Hang"

	// ProvisioningNeverRegister provisions the machine (it gets a provider ID)
	// but its Node never registers.
	ProvisioningNeverRegister ProvisioningBehavior = "NeverRegister"
)

// SimMachineSpec is the desired state of a SimMachine.
type SimMachineSpec struct {
	// providerID is set by the provider when the machine is provisioned; the
	// Node of the machine carries the same value.
	// +optional
	ProviderID string `json:"providerID,omitempty"`

	// capacity of the machine's Node (cpu, memory, pods, ephemeral-storage,
	// extended resources such as nvidia.com/gpu). Allocatable is the same.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// architecture of the Node, amd64 when empty.
	// +optional
	Architecture string `json:"architecture,omitempty"`

	// operatingSystem of the Node, linux when empty.
	// +optional
	OperatingSystem string `json:"operatingSystem,omitempty"`

	// nodeLabels are added to the machine's Node.
	// +optional
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`

	// nodeTaints are the taints the machine's Node registers with, as a
	// kubelet's --register-with-taints, e.g. startup taints that something
	// on the node removes later.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	NodeTaints []corev1.Taint `json:"nodeTaints,omitempty"`

	// provisioning tells how the machine provisions; Succeed when empty.
	// +optional
	Provisioning ProvisioningBehavior `json:"provisioning,omitempty"`

	// provisioningDelay is how long provisioning takes.
	// +optional
	ProvisioningDelay metav1.Duration `json:"provisioningDelay,omitempty,omitzero"`
}

// SimMachineInitializationStatus follows the InfraMachine contract.
type SimMachineInitializationStatus struct {
	// provisioned is true when the machine has its provider ID.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// SimMachineStatus is the observed state of a SimMachine.
type SimMachineStatus struct {
	// +optional
	Initialization SimMachineInitializationStatus `json:"initialization,omitempty,omitzero"`

	// +optional
	// +listType=atomic
	Addresses []clusterv1.MachineAddress `json:"addresses,omitempty"`

	// failureReason is the deprecated (v1beta1) terminal failure that Cluster
	// API still copies to the Machine.
	// +optional
	FailureReason *string `json:"failureReason,omitempty"`

	// failureMessage explains failureReason.
	// +optional
	FailureMessage *string `json:"failureMessage,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SimMachine is a simulated machine: its Node is a kwok Node.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="ProviderID",type="string",JSONPath=".spec.providerID"
// +kubebuilder:printcolumn:name="Provisioned",type="boolean",JSONPath=".status.initialization.provisioned"
type SimMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SimMachineSpec   `json:"spec,omitempty"`
	Status SimMachineStatus `json:"status,omitempty"`
}

// SimMachineList is a list of SimMachines.
//
// +kubebuilder:object:root=true
type SimMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimMachine `json:"items"`
}
