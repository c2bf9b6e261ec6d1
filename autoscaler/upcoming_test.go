package autoscaler_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A registered node that has not started yet carries the not-ready taint:
// pods cannot go there in the simulation, yet it is the node a pending pod
// waits for. Counting it as upcoming keeps the engine from asking for it
// twice.
func TestRegisteredNodesThatHaveNotStartedCountAsUpcoming(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []corev1.NodeCondition
		why        string
	}{
		{
			name:       "NotReady",
			conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}},
			why:        "the pending pod waits for the node that is starting",
		},
		{
			// The node lifecycle controller removes the not-ready taint only
			// some seconds after the node reports Ready.
			name: "Ready with the not-ready taint",
			why:  "the pending pod waits for the node whose not-ready taint is not removed yet",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			full := st.Pod("full-0", "4", "1Gi", st.OwnedBy("full"), st.OnNode(nodes[0].Name))
			starting := nodes[1]
			starting.CreationTimestamp = metav1.NewTime(st.Now)
			if tc.conditions != nil {
				starting.Status.Conditions = tc.conditions
			}
			starting.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, full, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))...)

			status := f.runOnce(t)

			g.Expect(group.increases).To(BeEmpty(), tc.why)
			row := groupRow(status, group.id)
			g.Expect(row.NotStarted).To(Equal(1))
			g.Expect(row.Upcoming).To(Equal(1))
		})
	}
}
