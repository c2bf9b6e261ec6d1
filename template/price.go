package template

import (
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// PriceAnnotation on a MachineDeployment, MachineSet or MachinePool gives
// what a node of the group costs per hour, as a decimal such as "0.192"
// (pricing.DecimalPattern), in the currency of the other prices. It is of
// the family of the capacity annotations, as karpenter-provider-cluster-api
// #92 proposed it; upstream's clusterapi provider reads no price.
const PriceAnnotation = "capacity.cluster-autoscaler.kubernetes.io/price"

// ParsePrice reads the price annotation of the object id names: nil when
// there is none, a *scalable.AnnotationError when it is not a price.
func ParsePrice(id string, annotations map[string]string) (*pricing.Price, error) {
	value, ok := annotations[PriceAnnotation]
	if !ok {
		return nil, nil
	}
	price, err := pricing.Parse(value)
	if err != nil {
		return nil, &scalable.AnnotationError{ID: id, Annotation: PriceAnnotation, Value: value, Reason: err.Error()}
	}
	return &price, nil
}
