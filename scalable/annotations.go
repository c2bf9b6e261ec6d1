package scalable

import (
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// The annotations that make a MachineDeployment, MachineSet or MachinePool a
// node group, the same the upstream cluster-autoscaler reads with
// --cloud-provider=clusterapi.
const (
	MinSizeAnnotation = clusterv1.AutoscalerMinSizeAnnotation
	MaxSizeAnnotation = clusterv1.AutoscalerMaxSizeAnnotation

	ScaleDownUtilizationThresholdAnnotation = "cluster.x-k8s.io/autoscaling-options-scaledownutilizationthreshold"
	ScaleDownUnneededTimeAnnotation         = "cluster.x-k8s.io/autoscaling-options-scaledownunneededtime"
	ScaleDownUnreadyTimeAnnotation          = "cluster.x-k8s.io/autoscaling-options-scaledownunreadytime"
	MaxNodeProvisionTimeAnnotation          = "cluster.x-k8s.io/autoscaling-options-maxnodeprovisiontime"
)

// ConsolidationBudgetAnnotation is the most nodes of the group consolidation
// disrupts at once, a number or a percentage of the group as
// spec.consolidation.budget.nodes, in place of that budget; "0" keeps
// consolidation away from the group. Upstream has no such annotation.
const ConsolidationBudgetAnnotation = "autoscaling.cluster.x-k8s.io/consolidation-budget"

// AnnotationError says which annotation on which object is wrong. A resource
// with an AnnotationError is not a node group; nothing else is affected.
type AnnotationError struct {
	// ID identifies the object, e.g. "MachineDeployment/default/md-0".
	ID string
	// Annotation is the key of the offending annotation.
	Annotation string
	// Value is the annotation's value, empty when it is missing.
	Value string
	// Reason says what is wrong with the value.
	Reason string
}

func (e *AnnotationError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: annotation %q: %s", e.ID, e.Annotation, e.Reason)
	}
	return fmt.Sprintf("%s: annotation %q=%q: %s", e.ID, e.Annotation, e.Value, e.Reason)
}

// HasSizeAnnotations tells whether the object asks to be autoscaled, that is
// carries at least one of the size annotations.
func HasSizeAnnotations(annotations map[string]string) bool {
	_, hasMin := annotations[MinSizeAnnotation]
	_, hasMax := annotations[MaxSizeAnnotation]
	return hasMin || hasMax
}

// sizeBounds reads the min and max size annotations. Max is required as soon
// as the object asks to be autoscaled; min defaults to 0.
func sizeBounds(id string, annotations map[string]string) (minSize, maxSize int, err error) {
	maxValue, ok := annotations[MaxSizeAnnotation]
	if !ok {
		return 0, 0, &AnnotationError{ID: id, Annotation: MaxSizeAnnotation, Reason: fmt.Sprintf("missing; it is required when %q is set", MinSizeAnnotation)}
	}
	if maxSize, err = parseSize(id, MaxSizeAnnotation, maxValue); err != nil {
		return 0, 0, err
	}
	if minValue, ok := annotations[MinSizeAnnotation]; ok {
		if minSize, err = parseSize(id, MinSizeAnnotation, minValue); err != nil {
			return 0, 0, err
		}
	}
	if minSize > maxSize {
		return 0, 0, &AnnotationError{ID: id, Annotation: MinSizeAnnotation, Value: annotations[MinSizeAnnotation],
			Reason: fmt.Sprintf("greater than %q (%d)", MaxSizeAnnotation, maxSize)}
	}
	return minSize, maxSize, nil
}

func parseSize(id, annotation, value string) (int, error) {
	size, err := strconv.Atoi(value)
	if err != nil {
		return 0, &AnnotationError{ID: id, Annotation: annotation, Value: value, Reason: "not an integer"}
	}
	if size < 0 {
		return 0, &AnnotationError{ID: id, Annotation: annotation, Value: value, Reason: "negative"}
	}
	return size, nil
}

// ParseConsolidationBudget reads ConsolidationBudgetAnnotation; nil
// without it. A bad value is an *AnnotationError that leaves the group a
// node group, with the ClusterAutoscaler's budget: a typo in a budget must
// not stop the group's autoscaling.
func ParseConsolidationBudget(id string, annotations map[string]string) (*intstr.IntOrString, error) {
	value, ok := annotations[ConsolidationBudgetAnnotation]
	if !ok {
		return nil, nil
	}
	budget := intstr.FromString(value)
	// Numbers past int32 stay strings, which are no budget.
	if nodes, err := strconv.ParseInt(value, 10, 32); err == nil {
		budget = intstr.FromInt32(int32(nodes))
	}
	if err := nodegroups.CheckConsolidationBudget(budget); err != nil {
		return nil, &AnnotationError{ID: id, Annotation: ConsolidationBudgetAnnotation, Value: value, Reason: err.Error()}
	}
	return &budget, nil
}

// groupOptions reads the per-group overrides of the engine's defaults.
func groupOptions(id string, annotations map[string]string) (nodegroups.GroupOptions, error) {
	var options nodegroups.GroupOptions
	if value, ok := annotations[ScaleDownUtilizationThresholdAnnotation]; ok {
		threshold, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return options, &AnnotationError{ID: id, Annotation: ScaleDownUtilizationThresholdAnnotation, Value: value, Reason: "not a number"}
		}
		if threshold < 0 || threshold > 1 {
			return options, &AnnotationError{ID: id, Annotation: ScaleDownUtilizationThresholdAnnotation, Value: value, Reason: "not between 0 and 1"}
		}
		options.ScaleDownUtilizationThreshold = ptr.To(threshold)
	}
	durations := []struct {
		annotation string
		into       **time.Duration
	}{
		{ScaleDownUnneededTimeAnnotation, &options.ScaleDownUnneededTime},
		{ScaleDownUnreadyTimeAnnotation, &options.ScaleDownUnreadyTime},
		{MaxNodeProvisionTimeAnnotation, &options.MaxNodeProvisionTime},
	}
	for _, d := range durations {
		value, ok := annotations[d.annotation]
		if !ok {
			continue
		}
		duration, err := time.ParseDuration(value)
		if err != nil {
			return options, &AnnotationError{ID: id, Annotation: d.annotation, Value: value, Reason: "not a duration such as 10m or 1h30m"}
		}
		if duration < 0 {
			return options, &AnnotationError{ID: id, Annotation: d.annotation, Value: value, Reason: "negative"}
		}
		*d.into = ptr.To(duration)
	}
	if provisionTime := options.MaxNodeProvisionTime; provisionTime != nil && *provisionTime < nodegroups.MinMaxNodeProvisionTime {
		return options, &AnnotationError{ID: id, Annotation: MaxNodeProvisionTimeAnnotation, Value: annotations[MaxNodeProvisionTimeAnnotation],
			Reason: fmt.Sprintf("under the minimum of %s: a shorter time deletes Machines that are still booting", nodegroups.MinMaxNodeProvisionTime)}
	}
	return options, nil
}
