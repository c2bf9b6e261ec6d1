// Package v1 contains the ProvisioningRequest API of the Kubernetes
// autoscaling community, served by the upstream cluster-autoscaler and
// written by Kueue's ProvisioningRequest admission check: capacity asked
// for a group of pods at once, either checked (check-capacity) or created
// in one scale-up (best-effort-atomic-scale-up). Field names and
// validation are the upstream ones, so that requests written for the
// upstream autoscaler work unchanged. The CRD is installed in workload
// clusters, next to the pods (config/workload-crd).
//
// v1 is the only version served, and the storage version; upstream still
// serves v1beta1, deprecated, with the same fields.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the ProvisioningRequest API.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes adds the API types to a scheme, with the meta types of
// GroupVersion (e.g. ListOptions) that clients use with them.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &ProvisioningRequest{}, &ProvisioningRequestList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
