package template

import (
	"fmt"
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// The capacity annotations on a MachineDeployment, MachineSet or MachinePool,
// the same the upstream cluster-autoscaler reads to scale a Cluster API
// group from zero.
const (
	CPUAnnotation           = "capacity.cluster-autoscaler.kubernetes.io/cpu"
	MemoryAnnotation        = "capacity.cluster-autoscaler.kubernetes.io/memory"
	EphemeralDiskAnnotation = "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk"
	MaxPodsAnnotation       = "capacity.cluster-autoscaler.kubernetes.io/maxPods"
	GPUTypeAnnotation       = "capacity.cluster-autoscaler.kubernetes.io/gpu-type"
	GPUCountAnnotation      = "capacity.cluster-autoscaler.kubernetes.io/gpu-count"
	LabelsAnnotation        = "capacity.cluster-autoscaler.kubernetes.io/labels"
	TaintsAnnotation        = "capacity.cluster-autoscaler.kubernetes.io/taints"
	// CSIDriverAnnotation gives CSI attach limits, "driver=count,...".
	CSIDriverAnnotation = snapshot.AttachLimitsAnnotation
	// DRADriverAnnotation names the DRA driver (e.g. gpu.nvidia.com) that
	// publishes the gpu-count GPUs of a node as devices of a ResourceSlice
	// instead of an extended resource.
	DRADriverAnnotation = "capacity.cluster-autoscaler.kubernetes.io/dra-driver"
)

// DefaultGPUResource is the resource GPUs are counted as when the gpu-type
// annotation does not name another one.
const DefaultGPUResource corev1.ResourceName = "nvidia.com/gpu"

// Hints are what the capacity annotations of a node group say about the
// nodes it would create. They are parsed once, when the node group is
// discovered, so that a bad annotation is reported on the group at once,
// not only when it has to scale from zero.
type Hints struct {
	// Capacity holds the resources the annotations set, and only those.
	Capacity corev1.ResourceList
	// Labels are the labels annotation.
	Labels map[string]string
	// Taints are the taints annotation.
	Taints []corev1.Taint
	// AttachLimits are the CSI attach limits of the csi-driver annotation.
	AttachLimits snapshot.AttachLimits
	// Devices are the DRA devices of the dra-driver and gpu-count
	// annotations; the zero value when there is no dra-driver annotation.
	Devices snapshot.TemplateDevices
}

// ParseHints reads the capacity annotations of the object id names. It fails
// with a *scalable.AnnotationError on the first annotation that is wrong.
func ParseHints(id string, annotations map[string]string) (Hints, error) {
	var hints Hints
	var err error
	if hints.Capacity, err = capacityFromAnnotations(id, annotations); err != nil {
		return Hints{}, err
	}
	if hints.Labels, err = labelsFromAnnotation(id, annotations); err != nil {
		return Hints{}, err
	}
	if hints.Taints, err = taintsFromAnnotation(id, annotations); err != nil {
		return Hints{}, err
	}
	if value, ok := annotations[CSIDriverAnnotation]; ok {
		if hints.AttachLimits, err = snapshot.ParseAttachLimits(value); err != nil {
			return Hints{}, &scalable.AnnotationError{ID: id, Annotation: CSIDriverAnnotation, Value: value, Reason: err.Error()}
		}
	}
	if hints.Devices, err = devicesFromAnnotations(id, annotations); err != nil {
		return Hints{}, err
	}
	return hints, nil
}

// devicesFromAnnotations reads the dra-driver annotation with the gpu-count
// it requires: that many devices of the driver, as the upstream Cluster API
// provider describes them.
func devicesFromAnnotations(id string, annotations map[string]string) (snapshot.TemplateDevices, error) {
	driver, ok := annotations[DRADriverAnnotation]
	if !ok || strings.TrimSpace(driver) == "" {
		return snapshot.TemplateDevices{}, nil
	}
	value, set := annotations[GPUCountAnnotation]
	if !set {
		return snapshot.TemplateDevices{}, &scalable.AnnotationError{ID: id, Annotation: DRADriverAnnotation, Value: driver,
			Reason: fmt.Sprintf("needs the %s annotation to say how many devices a node has", GPUCountAnnotation)}
	}
	count, err := parseQuantity(id, GPUCountAnnotation, value)
	if err != nil {
		return snapshot.TemplateDevices{}, err
	}
	if count.CmpInt64(count.Value()) != 0 {
		return snapshot.TemplateDevices{}, &scalable.AnnotationError{ID: id, Annotation: GPUCountAnnotation, Value: value, Reason: "not a whole number of devices"}
	}
	devices := snapshot.TemplateDevices{Driver: driver, Count: int(min(count.Value(), math.MaxInt32))}
	if err := devices.Validate(); err != nil {
		return snapshot.TemplateDevices{}, &scalable.AnnotationError{ID: id, Annotation: DRADriverAnnotation, Value: driver,
			Reason: fmt.Sprintf("with %s=%q: %v", GPUCountAnnotation, value, err)}
	}
	return devices, nil
}

// capacityFromAnnotations returns the capacity the annotations set; resources
// they do not mention are left out.
func capacityFromAnnotations(id string, annotations map[string]string) (corev1.ResourceList, error) {
	capacity := corev1.ResourceList{}
	quantities := []struct {
		annotation string
		resource   corev1.ResourceName
	}{
		{CPUAnnotation, corev1.ResourceCPU},
		{MemoryAnnotation, corev1.ResourceMemory},
		{EphemeralDiskAnnotation, corev1.ResourceEphemeralStorage},
		{MaxPodsAnnotation, corev1.ResourcePods},
	}
	for _, q := range quantities {
		value, ok := annotations[q.annotation]
		if !ok {
			continue
		}
		quantity, err := parseQuantity(id, q.annotation, value)
		if err != nil {
			return nil, err
		}
		capacity[q.resource] = quantity
	}
	if value, ok := annotations[GPUCountAnnotation]; ok {
		count, err := parseQuantity(id, GPUCountAnnotation, value)
		if err != nil {
			return nil, err
		}
		gpu := DefaultGPUResource
		gpuType := annotations[GPUTypeAnnotation]
		if gpuType == "" && strings.TrimSpace(annotations[DRADriverAnnotation]) != "" {
			// The driver publishes the GPUs as DRA devices (Hints.Devices),
			// not as an extended resource, unless a type names one, as
			// upstream.
			return capacity, nil
		}
		if gpuType != "" {
			if errs := validation.IsQualifiedName(gpuType); len(errs) > 0 {
				return nil, &scalable.AnnotationError{ID: id, Annotation: GPUTypeAnnotation, Value: gpuType, Reason: "not a resource name: " + strings.Join(errs, "; ")}
			}
			gpu = corev1.ResourceName(gpuType)
		}
		capacity[gpu] = count
	}
	return capacity, nil
}

func parseQuantity(id, annotation, value string) (resource.Quantity, error) {
	quantity, err := resource.ParseQuantity(value)
	if err != nil {
		return resource.Quantity{}, &scalable.AnnotationError{ID: id, Annotation: annotation, Value: value, Reason: "not a quantity such as 4, 500m or 16Gi"}
	}
	if quantity.Sign() < 0 {
		return resource.Quantity{}, &scalable.AnnotationError{ID: id, Annotation: annotation, Value: value, Reason: "negative"}
	}
	return quantity, nil
}

// labelsFromAnnotation parses "key=value,key2=value2".
func labelsFromAnnotation(id string, annotations map[string]string) (map[string]string, error) {
	value, ok := annotations[LabelsAnnotation]
	if !ok || strings.TrimSpace(value) == "" {
		return nil, nil
	}
	labels := map[string]string{}
	for _, pair := range strings.Split(value, ",") {
		key, val, found := strings.Cut(strings.TrimSpace(pair), "=")
		if !found {
			return nil, &scalable.AnnotationError{ID: id, Annotation: LabelsAnnotation, Value: value, Reason: fmt.Sprintf("%q is not key=value", pair)}
		}
		if errs := append(validation.IsQualifiedName(key), validation.IsValidLabelValue(val)...); len(errs) > 0 {
			return nil, &scalable.AnnotationError{ID: id, Annotation: LabelsAnnotation, Value: value, Reason: fmt.Sprintf("%q is not a valid label: %s", pair, strings.Join(errs, "; "))}
		}
		labels[key] = val
	}
	return labels, nil
}

// taintsFromAnnotation parses "key=value:Effect,key2:Effect".
func taintsFromAnnotation(id string, annotations map[string]string) ([]corev1.Taint, error) {
	value, ok := annotations[TaintsAnnotation]
	if !ok || strings.TrimSpace(value) == "" {
		return nil, nil
	}
	var taints []corev1.Taint
	for _, spec := range strings.Split(value, ",") {
		spec = strings.TrimSpace(spec)
		keyValue, effect, found := strings.Cut(spec, ":")
		if !found {
			return nil, &scalable.AnnotationError{ID: id, Annotation: TaintsAnnotation, Value: value, Reason: fmt.Sprintf("%q is not key=value:Effect", spec)}
		}
		taint := corev1.Taint{Effect: corev1.TaintEffect(effect)}
		taint.Key, taint.Value, _ = strings.Cut(keyValue, "=")
		switch taint.Effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, &scalable.AnnotationError{ID: id, Annotation: TaintsAnnotation, Value: value,
				Reason: fmt.Sprintf("%q has effect %q, not one of NoSchedule, PreferNoSchedule, NoExecute", spec, effect)}
		}
		if errs := validation.IsQualifiedName(taint.Key); len(errs) > 0 {
			return nil, &scalable.AnnotationError{ID: id, Annotation: TaintsAnnotation, Value: value, Reason: fmt.Sprintf("%q has an invalid key: %s", spec, strings.Join(errs, "; "))}
		}
		taints = append(taints, taint)
	}
	return taints, nil
}
