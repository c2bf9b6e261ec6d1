package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// SimMachineTemplateResource is the template of a SimMachine.
type SimMachineTemplateResource struct {
	// +optional
	ObjectMeta clusterv1.ObjectMeta `json:"metadata,omitempty,omitzero"`

	Spec SimMachineSpec `json:"spec"`
}

// SimMachineTemplateSpec is the desired state of a SimMachineTemplate.
type SimMachineTemplateSpec struct {
	Template SimMachineTemplateResource `json:"template"`
}

// NodeInfo describes the Nodes a template produces, as read by autoscalers
// scaling from zero.
type NodeInfo struct {
	// +optional
	Architecture string `json:"architecture,omitempty"`

	// +optional
	OperatingSystem string `json:"operatingSystem,omitempty"`
}

// SimMachineTemplateStatus publishes what a machine of the template offers
// (the InfraMachineTemplate contract's scale-from-zero fields).
type SimMachineTemplateStatus struct {
	// capacity of a Node of this template.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`

	// +optional
	NodeInfo *NodeInfo `json:"nodeInfo,omitempty"`
}

// SimMachineTemplate is the template MachineDeployments and MachineSets
// create SimMachines from.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type SimMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SimMachineTemplateSpec   `json:"spec,omitempty"`
	Status SimMachineTemplateStatus `json:"status,omitempty"`
}

// SimMachineTemplateList is a list of SimMachineTemplates.
//
// +kubebuilder:object:root=true
type SimMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimMachineTemplate `json:"items"`
}
