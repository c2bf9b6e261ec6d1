package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// SimControlPlaneSpec is the desired state of a SimControlPlane. The control
// plane is the workload API server of the local stack: the provider points
// the Cluster at it and writes the Cluster's kubeconfig Secret.
type SimControlPlaneSpec struct {
	// controlPlaneEndpoint is set by the provider from the workload API server.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`
}

// SimControlPlaneInitializationStatus follows the ControlPlane contract.
type SimControlPlaneInitializationStatus struct {
	// controlPlaneInitialized is true when the API server accepts requests.
	// +optional
	ControlPlaneInitialized *bool `json:"controlPlaneInitialized,omitempty"`
}

// SimControlPlaneStatus is the observed state of a SimControlPlane.
type SimControlPlaneStatus struct {
	// +optional
	Initialization SimControlPlaneInitializationStatus `json:"initialization,omitempty,omitzero"`

	// externalManagedControlPlane is true: the control plane has no Machines,
	// as with a managed Kubernetes service, so Cluster API drains and deletes
	// the Nodes of worker Machines on its own.
	// +optional
	ExternalManagedControlPlane *bool `json:"externalManagedControlPlane,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SimControlPlane is a control plane that already runs: the local stack's
// workload API server.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type SimControlPlane struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SimControlPlaneSpec   `json:"spec,omitempty"`
	Status SimControlPlaneStatus `json:"status,omitempty"`
}

// SimControlPlaneList is a list of SimControlPlanes.
//
// +kubebuilder:object:root=true
type SimControlPlaneList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimControlPlane `json:"items"`
}
