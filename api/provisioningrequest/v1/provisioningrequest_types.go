package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provisioning classes: values of spec.provisioningClassName that the
// upstream autoscaler serves. Other classes belong to other provisioners
// and are left alone.
const (
	// CheckCapacityProvisioningClass checks whether the pods of all podSets
	// fit in the cluster as it is, without adding nodes: Provisioned=True
	// with reason CapacityIsFound books that capacity (10 minutes upstream,
	// then BookingExpired=True); otherwise Provisioned=False with reason
	// CapacityIsNotFound, checked again later (or Failed=True, with
	// NoRetryParameter "true"), until Failed=True with reason Expired
	// (7 days after its creation upstream).
	CheckCapacityProvisioningClass = "check-capacity.autoscaling.x-k8s.io"
	// BestEffortAtomicScaleUpProvisioningClass adds the nodes for the pods
	// of all podSets in one scale-up, or none: upstream sets
	// Provisioned=True with reason CapacityIsProvisioned once the scale-up
	// is requested (CapacityIsFound when the pods already fit), without
	// waiting for the nodes to start. capi-autoscaler sets it once the
	// nodes are up, and removes them all when one fails (ScaleUpFailedReason).
	BestEffortAtomicScaleUpProvisioningClass = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
)

// Pod annotations through which pods consume a ProvisioningRequest: the
// capacity booked for it is kept for pods in its namespace that name it.
const (
	// ConsumeProvisioningRequestAnnotation names, on a pod, the
	// ProvisioningRequest, in the pod's namespace, whose capacity the pod
	// consumes.
	ConsumeProvisioningRequestAnnotation = "autoscaling.x-k8s.io/consume-provisioning-request"
	// ProvisioningClassNameAnnotation is, on a pod, the provisioningClassName
	// of the ProvisioningRequest it consumes.
	ProvisioningClassNameAnnotation = "autoscaling.x-k8s.io/provisioning-class-name"
	// DeprecatedConsumeProvisioningRequestAnnotation is the former name of
	// ConsumeProvisioningRequestAnnotation, still honoured upstream.
	DeprecatedConsumeProvisioningRequestAnnotation = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
	// DeprecatedProvisioningClassNameAnnotation is the former name of
	// ProvisioningClassNameAnnotation, still honoured upstream.
	DeprecatedProvisioningClassNameAnnotation = "cluster-autoscaler.kubernetes.io/provisioning-class-name"
)

// Keys of spec.parameters that the upstream autoscaler reads.
const (
	// ValidUntilSecondsParameter is, for best-effort-atomic-scale-up, how
	// many seconds after its creation the request is retried.
	ValidUntilSecondsParameter = "ValidUntilSeconds"
	// NoRetryParameter "true" makes check-capacity answer a request once:
	// capacity not found is Failed=True rather than Provisioned=False.
	// "false", the default, retries.
	NoRetryParameter = "noRetry"
	// PartialCapacityCheckParameter makes check-capacity check each podSet
	// in spec order, rather than all pods at once, and report those that
	// fit: with PartialCapacityBookPartial or PartialCapacityCheckOnly.
	PartialCapacityCheckParameter = "partialCapacityCheck"
	// ProcessorInstanceParameter names the autoscaler instance that serves
	// a check-capacity request, where several share a cluster; a request
	// without it is served by the instance without a name.
	ProcessorInstanceParameter = "processorInstance"
)

// Values of PartialCapacityCheckParameter.
const (
	// PartialCapacityBookPartial: when some podSets fit, Provisioned=True
	// with reason PartialCapacityIsFound, and their capacity is booked.
	PartialCapacityBookPartial = "bookPartial"
	// PartialCapacityCheckOnly: when some podSets fit, Provisioned=False
	// with reason PartialCapacityIsFound, and nothing is booked.
	PartialCapacityCheckOnly = "checkOnly"
)

// Condition types of a ProvisioningRequest's status.
const (
	// AcceptedCondition is True once an autoscaler serving the request's
	// class has taken it up.
	AcceptedCondition = "Accepted"
	// ProvisionedCondition is True when the capacity was found or
	// requested, and False, with the reason, while it was not.
	ProvisionedCondition = "Provisioned"
	// FailedCondition is True when the request will not be provisioned:
	// its pods cannot be built, its capacity cannot be booked, or it
	// expired.
	FailedCondition = "Failed"
	// BookingExpiredCondition is True when the capacity booked for a
	// provisioned request is no longer kept for it.
	BookingExpiredCondition = "BookingExpired"
	// CapacityRevokedCondition is True when capacity provisioned for the
	// request is no longer valid.
	CapacityRevokedCondition = "CapacityRevoked"
)

// Reasons of the ProvisioningRequest conditions.
const (
	// AcceptedReason goes with Accepted=True.
	AcceptedReason = "Accepted"
	// CapacityIsFoundReason goes with Provisioned=True: the pods fit in
	// the cluster as it is.
	CapacityIsFoundReason = "CapacityIsFound"
	// PartialCapacityIsFoundReason goes with Provisioned, True or False
	// after PartialCapacityCheckParameter: some podSets fit, not all.
	PartialCapacityIsFoundReason = "PartialCapacityIsFound"
	// CapacityIsNotFoundReason goes with Provisioned=False, or Failed=True
	// with NoRetryParameter "true": the pods do not fit.
	CapacityIsNotFoundReason = "CapacityIsNotFound"
	// CapacityIsProvisionedReason goes with Provisioned=True: the scale-up
	// for the pods was requested.
	CapacityIsProvisionedReason = "CapacityIsProvisioned"
	// FailedToCheckCapacityReason goes with Provisioned=False when the
	// simulation failed.
	FailedToCheckCapacityReason = "FailedToCheckCapacity"
	// FailedToCreatePodsReason goes with Failed=True when the pods cannot
	// be built from the podSets, e.g. a PodTemplate is missing.
	FailedToCreatePodsReason = "FailedToCreatePods"
	// FailedToBookCapacityReason goes with Failed=True when the capacity
	// found for a check-capacity request cannot be booked.
	FailedToBookCapacityReason = "FailedToBookCapacity"
	// CapacityReservationTimeExpiredReason goes with BookingExpired=True
	// when the booking lasted its time.
	CapacityReservationTimeExpiredReason = "CapacityReservationTimeExpired"
	// CapacityBookingConsumedReason goes with BookingExpired=True when
	// every pod of the request was scheduled before the booking's time
	// ran out: the room is theirs, nothing is held for them any more.
	CapacityBookingConsumedReason = "CapacityBookingConsumed"
	// ExpiredReason goes with Failed=True when a check-capacity request
	// was not provisioned in time (7 days after its creation upstream).
	ExpiredReason = "Expired"

	// ScaleUpInProgressReason, capi-autoscaler's, goes with
	// Provisioned=False while the nodes of an atomic scale-up come: the
	// request is provisioned once they are all up.
	ScaleUpInProgressReason = "ScaleUpInProgress"
	// ScaleUpFailedReason, capi-autoscaler's, goes with Failed=True when a
	// node of an atomic scale-up failed or did not come in time, and the
	// nodes it added were removed.
	ScaleUpFailedReason = "ScaleUpFailed"
)

// ScaleUpDetail, capi-autoscaler's key of provisioningClassDetails, holds
// the atomic scale-up in progress for a best-effort-atomic-scale-up request
// (JSON: when it started, the nodes it added to each group, the instances
// that appeared for them), so that a restarted manager follows it.
const ScaleUpDetail = "autoscaling.cluster.x-k8s.io/scale-up"

// ProvisioningRequest asks for capacity for a group of pods at once, named
// by the PodTemplates of its podSets. The pods that use it name it in
// ConsumeProvisioningRequestAnnotation.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:path=provisioningrequests,scope=Namespaced,shortName=provreq;provreqs
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ProvisioningRequest struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the capacity asked for. Its fields cannot change: to ask for
	// something else, delete the request and create another.
	// +required
	Spec ProvisioningRequestSpec `json:"spec"`

	// status is the autoscaler's answer.
	// +optional
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestSpec is the capacity asked for: the pods, and the
// class that says how to provision them.
type ProvisioningRequestSpec struct {
	// podSets are the groups of pods to provision capacity for.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="podSets are immutable: create a new ProvisioningRequest instead"
	PodSets []PodSet `json:"podSets"`

	// provisioningClassName says how the capacity is provisioned:
	// check-capacity.autoscaling.x-k8s.io checks that the pods fit in the
	// cluster as it is and books that capacity for a while;
	// best-effort-atomic-scale-up.autoscaling.x-k8s.io adds the nodes for
	// all pods in one scale-up, or none. Other classes belong to other
	// provisioners; the kubernetes.io and x-k8s.io suffixes are reserved
	// for Kubernetes projects.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="provisioningClassName is immutable: create a new ProvisioningRequest instead"
	ProvisioningClassName string `json:"provisioningClassName"`

	// parameters tune the class, e.g. ValidUntilSeconds for
	// best-effort-atomic-scale-up, noRetry and partialCapacityCheck for
	// check-capacity.
	// +optional
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="parameters are immutable: create a new ProvisioningRequest instead"
	Parameters map[string]Parameter `json:"parameters,omitempty"`
}

// Parameter is the value of one parameter of a provisioning class.
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet is a group of identical pods.
type PodSet struct {
	// podTemplateRef names the PodTemplate, in the namespace of the
	// request, of the pods: its scheduling fields (requests, node
	// selector, affinity, tolerations) must be those of the pods that
	// will consume the request.
	// +required
	PodTemplateRef Reference `json:"podTemplateRef"`

	// count is the number of pods.
	// +required
	// +kubebuilder:validation:Minimum=1
	Count int32 `json:"count"`
}

// Reference names an object in the namespace of the ProvisioningRequest.
type Reference struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// ProvisioningRequestStatus is the autoscaler's answer to a request.
type ProvisioningRequestStatus struct {
	// conditions are Accepted, Provisioned, Failed, BookingExpired and
	// CapacityRevoked; other classes may set others.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// provisioningClassDetails are further facts a class reports, such as
	// the podSets that fit under partialCapacityCheck.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails,omitempty"`
}

// Detail is the value of one entry of provisioningClassDetails.
// +kubebuilder:validation:MaxLength=32768
type Detail string

// ProvisioningRequestList is a list of ProvisioningRequests.
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequest `json:"items"`
}
