package simulator

import (
	"encoding/binary"
	"maps"
	"slices"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// countsSignature is the same for pods whose inter-pod counts (podState)
// are the same, whatever they request: namespace and labels, which other
// pods' anti-affinity and the pod's own selectors match, required pod
// affinity and anti-affinity, hard topology spread and, when spreading,
// the node selection and tolerations that decide which nodes count. Pods
// without owners are each a pod group of their own, but mostly share a
// signature: the scheduler keeps one state per signature.
func countsSignature(pod *snapshot.Pod) string {
	b := append([]byte(pod.Namespace), 0)
	for _, key := range slices.Sorted(maps.Keys(pod.Labels)) {
		b = append(append(append(b, key...), '='), pod.Labels[key]...)
		b = append(b, 0)
	}
	if affinity := pod.Spec.Affinity; affinity != nil {
		if affinity.PodAffinity != nil {
			b = appendMarshalled(append(b, 'a'), affinity.PodAffinity)
		}
		if affinity.PodAntiAffinity != nil {
			b = appendMarshalled(append(b, 'A'), affinity.PodAntiAffinity)
		}
	}
	if !hasHardSpreadConstraints(pod.Spec) {
		return string(b)
	}
	for i := range pod.Spec.TopologySpreadConstraints {
		b = appendMarshalled(append(b, 's'), &pod.Spec.TopologySpreadConstraints[i])
	}
	for _, key := range slices.Sorted(maps.Keys(pod.Spec.NodeSelector)) {
		b = append(append(append(append(b, 'n'), key...), '='), pod.Spec.NodeSelector[key]...)
		b = append(b, 0)
	}
	if affinity := pod.Spec.Affinity; affinity != nil && affinity.NodeAffinity != nil {
		b = appendMarshalled(append(b, 'N'), affinity.NodeAffinity)
	}
	for i := range pod.Spec.Tolerations {
		b = appendMarshalled(append(b, 't'), &pod.Spec.Tolerations[i])
	}
	return string(b)
}

// marshaller is an API type with its generated protobuf encoding, which
// is deterministic: map keys are sorted.
type marshaller interface {
	Marshal() ([]byte, error)
}

// appendMarshalled appends the encoding of value after its length, so that
// consecutive values cannot run into each other.
func appendMarshalled(b []byte, value marshaller) []byte {
	// The generated encoders of these types do not fail.
	encoded, _ := value.Marshal()
	return append(binary.AppendUvarint(b, uint64(len(encoded))), encoded...)
}
