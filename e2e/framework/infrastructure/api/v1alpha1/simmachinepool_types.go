package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SimMachinePoolSpec is the desired state of a SimMachinePool: how many
// instances it runs is the replicas of the MachinePool that owns it.
type SimMachinePoolSpec struct {
	// providerIDList lists the provider IDs of the pool's provisioned
	// instances; the provider sets it and Cluster API copies it to the
	// MachinePool.
	// +optional
	// +listType=atomic
	ProviderIDList []string `json:"providerIDList,omitempty"`

	// template is what every instance of the pool is made of, failure modes
	// included; its providerID is ignored.
	Template SimMachineSpec `json:"template"`
}

// SimMachinePoolStatus is the observed state of a SimMachinePool, as the
// InfraMachinePool contract asks.
type SimMachinePoolStatus struct {
	// ready is true once the pool exists; its instances come on their own.
	// +optional
	Ready bool `json:"ready,omitempty"`

	// replicas is the number of provisioned instances.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// infrastructureMachineKind is SimMachine: every instance is a
	// SimMachine, for which Cluster API creates a MachinePool Machine.
	// +optional
	InfrastructureMachineKind string `json:"infrastructureMachineKind,omitempty"`

	// capacity of an instance's Node, for autoscalers that scale the pool
	// up from zero.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SimMachinePool is a simulated machine pool, like a cloud's instance
// group: it creates and removes its instances, SimMachines, to match the
// replicas of its MachinePool, removing first those whose Machine carries
// the delete-machine annotation.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas"
// +kubebuilder:printcolumn:name="Ready",type="boolean",JSONPath=".status.ready"
type SimMachinePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SimMachinePoolSpec   `json:"spec,omitempty"`
	Status SimMachinePoolStatus `json:"status,omitempty"`
}

// SimMachinePoolList is a list of SimMachinePools.
//
// +kubebuilder:object:root=true
type SimMachinePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimMachinePool `json:"items"`
}
