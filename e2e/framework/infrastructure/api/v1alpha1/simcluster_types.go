package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// SimClusterSpec is the desired state of a SimCluster.
type SimClusterSpec struct {
	// controlPlaneEndpoint is set by the SimControlPlane of the Cluster.
	// +optional
	ControlPlaneEndpoint clusterv1.APIEndpoint `json:"controlPlaneEndpoint,omitempty,omitzero"`

	// failureDomains are published in status for Machines to spread over;
	// a Node gets its Machine's failure domain as topology.kubernetes.io/zone.
	// +optional
	// +listType=set
	FailureDomains []string `json:"failureDomains,omitempty"`
}

// SimClusterInitializationStatus follows the InfraCluster contract.
type SimClusterInitializationStatus struct {
	// provisioned is true when the infrastructure is ready for Machines.
	// +optional
	Provisioned *bool `json:"provisioned,omitempty"`
}

// SimClusterStatus is the observed state of a SimCluster.
type SimClusterStatus struct {
	// +optional
	Initialization SimClusterInitializationStatus `json:"initialization,omitempty,omitzero"`

	// +optional
	// +listType=map
	// +listMapKey=name
	FailureDomains []clusterv1.FailureDomain `json:"failureDomains,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// SimCluster is the simulated infrastructure of a Cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=cluster-api
// +kubebuilder:metadata:labels="cluster.x-k8s.io/v1beta2=v1alpha1"
type SimCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SimClusterSpec   `json:"spec,omitempty"`
	Status SimClusterStatus `json:"status,omitempty"`
}

// SimClusterList is a list of SimClusters.
//
// +kubebuilder:object:root=true
type SimClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimCluster `json:"items"`
}
