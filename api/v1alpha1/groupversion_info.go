// Package v1alpha1 contains the ClusterAutoscaler API.
// +kubebuilder:object:generate=true
// +groupName=autoscaling.cluster.x-k8s.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// EventSource is the reporting controller of the events the manager
// records, on ClusterAutoscalers and node groups, so that readers tell
// them from those of Cluster API's controllers on the same objects.
const EventSource = "capi-autoscaler"

var (
	// GroupVersion is the group and version of the ClusterAutoscaler API.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.cluster.x-k8s.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes adds the API types to a scheme, with the meta types of
// GroupVersion (e.g. ListOptions) that clients use with them.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ClusterAutoscaler{}, &ClusterAutoscalerList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
