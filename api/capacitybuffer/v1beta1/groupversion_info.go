// Package v1beta1 contains the CapacityBuffer API of the Kubernetes
// autoscaling community, served by the upstream cluster-autoscaler: spare
// capacity that the autoscaler keeps in a cluster, as a number of chunks
// shaped like a PodTemplate or like the pods of a scalable workload. Field
// names, defaults and validation are the upstream ones, so that buffers
// written for the upstream autoscaler work unchanged. The CRD is installed
// in workload clusters, next to the pods (config/workload-crd).
//
// v1beta1 is the only version served, and the storage version:
//   - v1alpha1, which upstream still serves, is not: upstream has marked it
//     deprecated since v1beta1 came (cluster-autoscaler 1.35). Its fields
//     are those of v1beta1, so a v1alpha1 buffer becomes a v1beta1 one by
//     changing its apiVersion.
//   - upstream has no v1 API: its v1 directory holds an early draft
//     (cluster-scoped, with no status.provisioningStrategy) that its CRD
//     does not serve.
//
// +kubebuilder:object:generate=true
// +groupName=autoscaling.x-k8s.io
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the CapacityBuffer API.
	GroupVersion = schema.GroupVersion{Group: "autoscaling.x-k8s.io", Version: "v1beta1"}

	// SchemeBuilder registers the API types with a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the API types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes adds the API types to a scheme, with the meta types of
// GroupVersion (e.g. ListOptions) that clients use with them.
func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(GroupVersion, &CapacityBuffer{}, &CapacityBufferList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
	return nil
}
