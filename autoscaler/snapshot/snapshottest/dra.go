package snapshottest

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// GPUDriver is the DRA driver of the test devices.
const GPUDriver = "gpu.example.com"

// DeviceClass returns a class that selects the devices of driver, and
// those the CEL expressions select.
func DeviceClass(name, driver string, expressions ...string) *resourceapi.DeviceClass {
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}}
	expressions = append([]string{fmt.Sprintf("device.driver == %q", driver)}, expressions...)
	for _, expression := range expressions {
		class.Spec.Selectors = append(class.Spec.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expression}})
	}
	return class
}

// Device returns a device with a "model" attribute.
func Device(name, model string) resourceapi.Device {
	return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"model": {StringValue: ptr.To(model)},
	}}
}

// GPUs returns n devices of a model, named gpu-0, gpu-1...
func GPUs(n int, model string) []resourceapi.Device {
	devices := make([]resourceapi.Device, n)
	for i := range devices {
		devices[i] = Device(fmt.Sprintf("gpu-%d", i), model)
	}
	return devices
}

// ResourceSlice returns the slice of driver's devices local to node, in a
// pool named after the node.
func ResourceSlice(node, driver string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
}

// ClaimSpec returns the spec of a claim for count devices of class; no
// count asks for all of them.
func ClaimSpec(class string, count int64, expressions ...string) resourceapi.ResourceClaimSpec {
	exact := &resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count}
	if count == 0 {
		exact.AllocationMode, exact.Count = resourceapi.DeviceAllocationModeAll, 0
	}
	for _, expression := range expressions {
		exact.Selectors = append(exact.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: expression}})
	}
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "devices", Exactly: exact}},
	}}
}

// ResourceClaim returns a claim in namespace "default" for count devices
// of class (see ClaimSpec).
func ResourceClaim(name, class string, count int64, expressions ...string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec:       ClaimSpec(class, count, expressions...),
	}
}

// AllocatedOn returns claim allocated the devices of driver on node, as
// kube-scheduler records it.
func AllocatedOn(claim *resourceapi.ResourceClaim, node, driver string, devices ...string) *resourceapi.ResourceClaim {
	claim = claim.DeepCopy()
	allocation := &resourceapi.AllocationResult{NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
	}}}}
	for _, device := range devices {
		allocation.Devices.Results = append(allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "devices", Driver: driver, Pool: node, Device: device,
		})
	}
	claim.Status.Allocation = allocation
	return claim
}

// ResourceClaimTemplate returns a template in namespace "default" of claims
// for count devices of class.
func ResourceClaimTemplate(name, class string, count int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: ClaimSpec(class, count)},
	}
}

// WithResourceClaim makes the pod use an existing claim.
func WithResourceClaim(claim string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: claim, ResourceClaimName: ptr.To(claim)})
	}
}

// WithResourceClaimTemplate makes the pod get a claim of its own from a
// template, not made yet.
func WithResourceClaimTemplate(name, template string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, corev1.PodResourceClaim{Name: name, ResourceClaimTemplateName: ptr.To(template)})
	}
}

// WithGeneratedClaim records in the pod's status the claim the resource
// claim controller made for its claim name.
func WithGeneratedClaim(name, claim string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Status.ResourceClaimStatuses = append(pod.Status.ResourceClaimStatuses, corev1.PodResourceClaimStatus{Name: name, ResourceClaimName: ptr.To(claim)})
	}
}
