package controller

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

// The engine's atomic scale-ups in progress go into the ClusterAutoscaler's
// status after each loop, and a new engine gets them back as they were: a
// restarted manager rolls back what the last one added, from the
// management cluster's record alone.
func TestAtomicScaleUpsAreRecordedInTheStatusForTheNextEngine(t *testing.T) {
	g := NewWithT(t)
	started := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	scaleUps := map[types.UID]provisioning.ScaleUp{
		"uid-b": {Started: started, Groups: map[string]int{"MachineDeployment/ns/b": 1}, Instances: map[string][]string{}},
		"uid-a": {Started: started.Add(time.Minute), Groups: map[string]int{"MachineDeployment/ns/a": 2, "MachineDeployment/ns/c": 1},
			Instances: map[string][]string{"MachineDeployment/ns/a": {"a-machine-1", "a-machine-2"}}},
	}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}

	setStatusFromLoop(ca, autoscaler.Status{Time: started, AtomicScaleUps: scaleUps})

	g.Expect(ca.Status.AtomicScaleUps).To(HaveLen(2))
	g.Expect(ca.Status.AtomicScaleUps[0].RequestUID).To(Equal("uid-a"), "in the order of their UIDs")
	g.Expect(ca.Status.AtomicScaleUps[0].NodeGroups).To(Equal([]autoscalingv1alpha1.NodeGroupDelta{
		{ID: "MachineDeployment/ns/a", Delta: 2}, {ID: "MachineDeployment/ns/c", Delta: 1}}))
	g.Expect(atomicScaleUpsOf(ca.Status.AtomicScaleUps)).To(Equal(scaleUps))

	setStatusFromLoop(ca, autoscaler.Status{Time: started.Add(time.Minute)})
	g.Expect(ca.Status.AtomicScaleUps).To(BeEmpty(), "done with, rolled back or provisioned")
}
