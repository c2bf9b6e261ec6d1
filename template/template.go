// Package template builds the node a new member of a node group with no
// nodes would become, from the capacity the group publishes (scale from
// zero). The engine names it and keeps only its template taints
// (nodefacts.Rules.TemplateNode), as it does with a copy of a real node.
package template

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/external"
	capilabels "sigs.k8s.io/cluster-api/util/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Source is what a template needs from a node group's scalable resource.
type Source interface {
	ID() string
	Namespace() string
	MachineTemplate() clusterv1.MachineTemplateSpec
}

// Defaults for what a scale-from-zero template does not say.
const (
	DefaultMaxPods         = 110
	DefaultOperatingSystem = "linux"
	DefaultArchitecture    = "amd64"
)

// The deprecated labels of a node's operating system and architecture,
// which a template node carries beside kubernetes.io/os and /arch for pods
// that still select on them, as kubelets set them.
const (
	BetaOperatingSystemLabel = "beta.kubernetes.io/os"
	BetaArchitectureLabel    = "beta.kubernetes.io/arch"
)

// CannotScaleFromZeroError says why a group with no nodes has no template.
type CannotScaleFromZeroError struct {
	ID     string
	Reason string
}

func (e *CannotScaleFromZeroError) Error() string {
	return fmt.Sprintf("%s cannot scale from zero: %s", e.ID, e.Reason)
}

// FromZero returns the template of a group that has no node, from the
// hints of its capacity annotations and the status of the infrastructure
// object its machine template refers to: an infrastructure machine template,
// or for a MachinePool its infrastructure machine pool (any provider, read
// through the reader as unstructured); the hints win. It returns a
// *CannotScaleFromZeroError when neither says how much cpu and memory a node
// would have; any other error says that the infrastructure object could not
// be read, or publishes what is not a capacity.
func FromZero(ctx context.Context, reader client.Reader, source Source, hints Hints) (*corev1.Node, error) {
	machineTemplate := source.MachineTemplate()
	infra, err := infrastructureTemplate(ctx, reader, source)
	if err != nil {
		if !hasCPUAndMemory(hints.Capacity) {
			return nil, err
		}
		// The annotations say enough; only the defaults for the operating
		// system and architecture are used instead.
		ctrl.LoggerFrom(ctx).V(2).Info("Ignoring the infrastructure template, the capacity annotations suffice", "nodeGroup", source.ID(), "err", err.Error())
		infra = defaultInfrastructureInfo(source)
	}

	capacity := infra.capacity
	maps.Copy(capacity, hints.Capacity)
	if !hasCPUAndMemory(capacity) {
		return nil, &CannotScaleFromZeroError{ID: source.ID(), Reason: fmt.Sprintf(
			"no cpu and memory capacity known: set the %q and %q annotations on it, or have the infrastructure template %s publish status.capacity",
			CPUAnnotation, MemoryAnnotation, infra.description)}
	}
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resource.NewQuantity(DefaultMaxPods, resource.DecimalSI)
	}

	labels := map[string]string{
		corev1.LabelOSStable:     infra.operatingSystem,
		corev1.LabelArchStable:   infra.architecture,
		BetaOperatingSystemLabel: infra.operatingSystem,
		BetaArchitectureLabel:    infra.architecture,
	}
	maps.Copy(labels, capilabels.GetManagedLabels(machineTemplate.Labels))
	if zone := machineTemplate.Spec.FailureDomain; zone != "" {
		labels[corev1.LabelTopologyZone] = zone
	}
	maps.Copy(labels, hints.Labels)

	// The simulator reads the attach limits and the devices from the
	// template node.
	annotations := map[string]string{}
	if len(hints.AttachLimits) > 0 {
		annotations[CSIDriverAnnotation] = hints.AttachLimits.String()
	}
	if hints.Devices.Count > 0 {
		annotations[snapshot.TemplateDevicesAnnotation] = hints.Devices.String()
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: templateTaints(source, hints.Taints)},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions:  readyConditions(),
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: infra.operatingSystem,
				Architecture:    infra.architecture,
			},
		},
	}, nil
}

// templateTaints merges the taints of the machine template with the taints
// annotation; the annotation wins for the same key and effect.
func templateTaints(source Source, fromAnnotation []corev1.Taint) []corev1.Taint {
	type keyEffect struct {
		key    string
		effect corev1.TaintEffect
	}
	annotated := map[keyEffect]bool{}
	for _, taint := range fromAnnotation {
		annotated[keyEffect{taint.Key, taint.Effect}] = true
	}
	var taints []corev1.Taint
	for _, taint := range source.MachineTemplate().Spec.Taints {
		if !annotated[keyEffect{taint.Key, taint.Effect}] {
			taints = append(taints, corev1.Taint{Key: taint.Key, Value: taint.Value, Effect: taint.Effect})
		}
	}
	return append(taints, fromAnnotation...)
}

// infrastructureInfo is what the infrastructure machine template (or
// machine pool) publishes for the autoscaler in its status.
type infrastructureInfo struct {
	description     string
	capacity        corev1.ResourceList
	operatingSystem string
	architecture    string
}

// infrastructureTemplate reads status.capacity and status.nodeInfo of the
// infrastructure machine template, or a MachinePool's infrastructure machine
// pool, which publishes them the same way. One that does not exist or
// publishes nothing is not an error: the annotations may say enough.
func infrastructureTemplate(ctx context.Context, reader client.Reader, source Source) (*infrastructureInfo, error) {
	ref := source.MachineTemplate().Spec.InfrastructureRef
	info := defaultInfrastructureInfo(source)
	if !ref.IsDefined() {
		return info, nil
	}
	obj, err := external.GetObjectFromContractVersionedRef(ctx, reader, ref, source.Namespace())
	if apierrors.IsNotFound(err) {
		info.description += " (not found)"
		return info, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the infrastructure template of %s: %w", source.ID(), err)
	}

	capacity, _, err := unstructured.NestedStringMap(obj.Object, "status", "capacity")
	if err != nil {
		return nil, fmt.Errorf("%s: status.capacity is not a map of quantities: %w", info.description, err)
	}
	for name, value := range capacity {
		quantity, err := resource.ParseQuantity(value)
		if err != nil {
			return nil, fmt.Errorf("%s: status.capacity.%s=%q is not a quantity: %w", info.description, name, value, err)
		}
		info.capacity[corev1.ResourceName(name)] = quantity
	}
	if os, _, _ := unstructured.NestedString(obj.Object, "status", "nodeInfo", "operatingSystem"); os != "" {
		info.operatingSystem = os
	}
	if arch, _, _ := unstructured.NestedString(obj.Object, "status", "nodeInfo", "architecture"); arch != "" {
		info.architecture = arch
	}
	return info, nil
}

func defaultInfrastructureInfo(source Source) *infrastructureInfo {
	ref := source.MachineTemplate().Spec.InfrastructureRef
	description := "(none referenced)"
	if ref.IsDefined() {
		description = fmt.Sprintf("%s %s/%s", ref.Kind, source.Namespace(), ref.Name)
	}
	return &infrastructureInfo{
		description:     description,
		capacity:        corev1.ResourceList{},
		operatingSystem: DefaultOperatingSystem,
		architecture:    DefaultArchitecture,
	}
}

func hasCPUAndMemory(capacity corev1.ResourceList) bool {
	_, cpu := capacity[corev1.ResourceCPU]
	_, memory := capacity[corev1.ResourceMemory]
	return cpu && memory
}

func readyConditions() []corev1.NodeCondition {
	return []corev1.NodeCondition{{
		Type:   corev1.NodeReady,
		Status: corev1.ConditionTrue,
		Reason: "KubeletReady",
	}}
}
