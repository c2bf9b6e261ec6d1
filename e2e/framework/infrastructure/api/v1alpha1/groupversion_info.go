// Package v1alpha1 contains the API of the simulated infrastructure provider
// used by the end-to-end tests: clusters, control planes, machines, machine
// templates and machine pools that follow the Cluster API v1beta2 contract
// and turn Machines into kwok Nodes.
//
// +kubebuilder:object:generate=true
// +groupName=infrastructure.e2e.capi-autoscaler.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the simulated provider's API.
	GroupVersion = schema.GroupVersion{Group: "infrastructure.e2e.capi-autoscaler.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes adds the API types to a scheme, with the meta types of
// GroupVersion that clients use with them.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion,
		&SimCluster{}, &SimClusterList{},
		&SimControlPlane{}, &SimControlPlaneList{},
		&SimMachine{}, &SimMachineList{},
		&SimMachineTemplate{}, &SimMachineTemplateList{},
		&SimMachinePool{}, &SimMachinePoolList{},
	)
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
