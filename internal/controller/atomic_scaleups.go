package controller

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

// maxAtomicScaleUpRecords is how many atomic scale-ups in progress the
// status records (the CRD's bound); those beyond are left to scale-down
// if their engine goes.
const maxAtomicScaleUpRecords = 100

// atomicScaleUpRecords are an engine's atomic scale-ups in progress as the
// ClusterAutoscaler's status records them, in the management cluster: the
// only record a later engine trusts to roll them back.
func atomicScaleUpRecords(scaleUps map[types.UID]provisioning.ScaleUp) []autoscalingv1alpha1.AtomicScaleUpRecord {
	var records []autoscalingv1alpha1.AtomicScaleUpRecord
	for _, uid := range slices.Sorted(maps.Keys(scaleUps))[:min(len(scaleUps), maxAtomicScaleUpRecords)] {
		scaleUp := scaleUps[uid]
		record := autoscalingv1alpha1.AtomicScaleUpRecord{RequestUID: string(uid), Started: metav1.NewTime(scaleUp.Started)}
		for _, id := range slices.Sorted(maps.Keys(scaleUp.Groups)) {
			record.NodeGroups = append(record.NodeGroups, autoscalingv1alpha1.NodeGroupDelta{ID: id, Delta: int32(scaleUp.Groups[id])})
		}
		for _, id := range slices.Sorted(maps.Keys(scaleUp.Instances)) {
			if instances := scaleUp.Instances[id]; len(instances) > 0 {
				record.Instances = append(record.Instances, autoscalingv1alpha1.NodeGroupInstances{ID: id, Instances: slices.Clone(instances)})
			}
		}
		records = append(records, record)
	}
	return records
}

// atomicScaleUpsOf are the atomic scale-ups the status records, for a new
// engine to follow (autoscaler.Options.AtomicScaleUps).
func atomicScaleUpsOf(records []autoscalingv1alpha1.AtomicScaleUpRecord) map[types.UID]provisioning.ScaleUp {
	if len(records) == 0 {
		return nil
	}
	scaleUps := make(map[types.UID]provisioning.ScaleUp, len(records))
	for _, record := range records {
		scaleUp := provisioning.ScaleUp{Started: record.Started.Time, Groups: map[string]int{}, Instances: map[string][]string{}}
		for _, group := range record.NodeGroups {
			scaleUp.Groups[group.ID] = int(group.Delta)
		}
		for _, group := range record.Instances {
			scaleUp.Instances[group.ID] = slices.Clone(group.Instances)
		}
		scaleUps[types.UID(record.RequestUID)] = scaleUp
	}
	return scaleUps
}
