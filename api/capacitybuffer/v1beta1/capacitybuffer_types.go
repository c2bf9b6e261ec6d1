package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ActiveCapacityProvisioningStrategy is the default provisioningStrategy:
// the autoscaler keeps room for the buffer's chunks by simulating them as
// pending pods, adding nodes when they do not fit. Buffers with another
// strategy are left to whoever implements it.
const ActiveCapacityProvisioningStrategy = "buffer.x-k8s.io/active-capacity"

// Condition types of a CapacityBuffer's status, as the upstream autoscaler
// sets them.
const (
	// ReadyForProvisioningCondition is True once the buffer's spec has been
	// resolved into status.podTemplateRef and status.replicas, and False,
	// with the error as message, when it cannot be (a missing PodTemplate
	// or workload, limits naming no resource the pods request).
	ReadyForProvisioningCondition = "ReadyForProvisioning"
	// ProvisioningCondition is True while the autoscaler keeps room for the
	// buffer's chunks, and False, with one of the Provisioning reasons,
	// when it does not.
	ProvisioningCondition = "Provisioning"
	// LimitedByQuotasCondition is True when the namespace's ResourceQuotas
	// cut status.replicas below what the spec asks for.
	LimitedByQuotasCondition = "LimitedByQuotas"
)

// Reasons of the CapacityBuffer conditions.
const (
	// AttributesSetSuccessfullyReason goes with ReadyForProvisioning=True.
	AttributesSetSuccessfullyReason = "AttributesSetSuccessfully"
	// ResourceQuotasAllocatedReason goes with LimitedByQuotas, True or False.
	ResourceQuotasAllocatedReason = "ResourceQuotasAllocated"
	// FakePodsInjectedReason goes with Provisioning=True: the buffer's
	// chunks take part in the autoscaler's simulation.
	FakePodsInjectedReason = "FakePodsInjected"
	// NotReadyForProvisioningReason goes with Provisioning=False while the
	// buffer is not ReadyForProvisioning.
	NotReadyForProvisioningReason = "NotReadyForProvisioning"
	// BufferIsEmptyReason goes with Provisioning=False when status.replicas
	// is 0.
	BufferIsEmptyReason = "BufferIsEmpty"
	// FailedToGetPodTemplateReason goes with Provisioning=False when the
	// PodTemplate of status.podTemplateRef cannot be read.
	FailedToGetPodTemplateReason = "FailedToGetPodTemplate"
	// FailedToMakeFakePodsReason goes with Provisioning=False when no pod
	// can be built from that PodTemplate.
	FailedToMakeFakePodsReason = "FailedToMakeFakePods"
)

// CapacityBuffer asks the autoscaler to keep spare capacity in the
// cluster: room for a number of chunks, each shaped like a pod, that it
// simulates as pending pods, so that new pods of that shape start without
// waiting for a node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:path=capacitybuffers,scope=Namespaced,shortName=cb
// +kubebuilder:printcolumn:name="Strategy",type="string",JSONPath=".spec.provisioningStrategy",description="How the buffer is provisioned."
// +kubebuilder:printcolumn:name="PodTemplate",type="string",JSONPath=".status.podTemplateRef.name",description="The PodTemplate a chunk is shaped like."
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="The number of chunks kept."
// +kubebuilder:printcolumn:name="ConditionsType",type="string",JSONPath=".status.conditions[*].type",description="The types of the conditions."
// +kubebuilder:printcolumn:name="ConditionsStatus",type="string",JSONPath=".status.conditions[*].status",description="The statuses of the conditions."
// +kubebuilder:printcolumn:name="ConditionsReason",type="string",JSONPath=".status.conditions[*].reason",description="The reasons of the conditions."
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type CapacityBuffer struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the capacity to keep.
	// +required
	Spec CapacityBufferSpec `json:"spec"`

	// status is what the autoscaler resolved the spec into, and whether it
	// keeps the capacity.
	// +optional
	Status CapacityBufferStatus `json:"status,omitempty"`
}

// CapacityBufferSpec is the capacity a buffer keeps: the shape of one chunk,
// from podTemplateRef or scalableRef, and how many chunks, from replicas,
// percentage and limits.
//
// Upstream documents "exactly one of podTemplateRef, scalableRef" but its
// CRD only refuses both; this CRD also refuses neither, a buffer that no
// autoscaler can resolve.
// +kubebuilder:validation:XValidation:rule="!(has(self.podTemplateRef) && has(self.scalableRef))",message="podTemplateRef and scalableRef are mutually exclusive: set one of them"
// +kubebuilder:validation:XValidation:rule="has(self.podTemplateRef) || has(self.scalableRef)",message="one of podTemplateRef and scalableRef must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",message="a buffer with podTemplateRef must set replicas or limits: percentage counts the replicas of a scalableRef"
type CapacityBufferSpec struct {
	// provisioningStrategy says how the buffer is kept. The default,
	// buffer.x-k8s.io/active-capacity, keeps room for the chunks by
	// simulating them as pending pods. Other values are left to the
	// autoscalers that implement them.
	// +optional
	// +kubebuilder:default="buffer.x-k8s.io/active-capacity"
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`

	// podTemplateRef names a PodTemplate, in the buffer's namespace, that
	// one chunk is shaped like.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`

	// scalableRef names a workload, in the buffer's namespace, whose pods
	// one chunk is shaped like: a Deployment, ReplicaSet, StatefulSet,
	// ReplicationController or Job, or any kind with a scale subresource.
	// +optional
	ScalableRef *ScalableRef `json:"scalableRef,omitempty"`

	// replicas is the number of chunks to keep. With percentage too, the
	// larger of the two counts; limits cap both.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// percentage is the number of chunks to keep as a percentage of the
	// replicas of scalableRef, rounded up: 20 for a workload of 10
	// replicas keeps 2 chunks, 200 keeps 20. It applies to scalableRef
	// only.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Percentage *int32 `json:"percentage,omitempty"`

	// limits cap the total resource requests of the buffer's chunks: the
	// buffer keeps no more chunks than fit in every resource named here
	// that a chunk requests. Without replicas or percentage, it keeps as
	// many chunks as fit.
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// LocalObjectRef names an object in the namespace of the buffer.
type LocalObjectRef struct {
	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ScalableRef names an object with a scale subresource in the namespace of
// the buffer.
type ScalableRef struct {
	// apiGroup of the object; empty for the core API group.
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`

	// kind of the object, e.g. Deployment or StatefulSet.
	// +required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`

	// name of the object.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// CapacityBufferStatus is what the autoscaler resolved the buffer's spec
// into, and whether it keeps the capacity.
type CapacityBufferStatus struct {
	// podTemplateRef names the PodTemplate one chunk is shaped like: the
	// spec's, or, for a scalableRef, one the autoscaler builds from the
	// workload (upstream writes capacitybuffer-<buffer>-pod-template,
	// owned by the buffer).
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`

	// replicas is the number of chunks kept.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// podTemplateGeneration is the generation of the PodTemplate that
	// podTemplateRef names when the status was written: a newer generation
	// means the status is out of date.
	// +optional
	PodTemplateGeneration *int64 `json:"podTemplateGeneration,omitempty"`

	// conditions are ReadyForProvisioning, Provisioning and
	// LimitedByQuotas.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// provisioningStrategy is the strategy the status was resolved for.
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
}

// CapacityBufferList is a list of CapacityBuffers.
// +kubebuilder:object:root=true
type CapacityBufferList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapacityBuffer `json:"items"`
}
