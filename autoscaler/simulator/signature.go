package simulator

import (
	"encoding/binary"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// signature tells which pod groups can share the state of a part: the
// same signature, the same counts.
func signature(part statePart, pod *snapshot.Pod) string {
	if part == labelsPart {
		return labelsSignature(pod)
	}
	return termsSignature(pod)
}

// labelsSignature is the same for pods whose namespace and labels are:
// other pods' anti-affinity terms select them alike.
func labelsSignature(pod *snapshot.Pod) string {
	b := append([]byte{'l'}, pod.Namespace...)
	return string(snapshot.AppendLabels(append(b, 0), pod.Labels))
}

// termsSignature is the same for pods whose own terms count the same
// pods, whatever they request and whatever their labels (which selfTerms
// tells apart): namespace, required pod affinity and anti-affinity, hard
// topology spread with the values of its matchLabelKeys and, when
// spreading, the node selection and tolerations that decide which nodes
// count. Pods without owners are each a pod group of their own, but mostly
// share a signature: the scheduler keeps one state per signature.
func termsSignature(pod *snapshot.Pod) string {
	b := append([]byte{'t'}, pod.Namespace...)
	b = append(b, 0)
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
		constraint := &pod.Spec.TopologySpreadConstraints[i]
		b = appendMarshalled(append(b, 's'), constraint)
		for _, key := range constraint.MatchLabelKeys {
			value, ok := pod.Labels[key]
			b = append(append(append(b, 'k'), key...), 0)
			if ok {
				b = append(append(b, '='), value...)
			}
			b = append(b, 0)
		}
	}
	b = snapshot.AppendLabels(append(b, 'n'), pod.Spec.NodeSelector)
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
