// Package v1alpha1 contains the ClusterAutoscaler API.
// +kubebuilder:object:generate=true
// +groupName=autoscaling.cluster.x-k8s.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the ClusterAutoscaler API.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.cluster.x-k8s.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
