package autoscaler_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A node that reports Ready but still carries a startup taint has not
// started: it is on its way, not ready capacity, and the group's template
// copied from it leaves the taint out. So of two pods that need a node
// each and tolerate nothing, one waits for that node and the other gets a
// new one, although the group publishes no template of its own.
func TestNodesWithStartupTaintsAreUpcomingAndTheirGroupStillScalesUp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		taint  string
		config func(*autoscaler.Config)
	}{
		{name: "startup-taint prefix", taint: nodefacts.StartupTaintPrefix + "foo"},
		{name: "ignore-taint prefix", taint: nodefacts.IgnoreTaintPrefix + "foo"},
		{name: "Cluster API's uninitialized taint", taint: nodefacts.ClusterAPIUninitializedTaint},
		{name: "taint listed in startupTaints", taint: "example.com/cni-not-ready", config: func(c *autoscaler.Config) {
			c.Taints.StartupTaints = []string{"example.com/cni-not-ready"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10}
			nodes := group.addNodes(1, st.WithTaint(tc.taint, "", corev1.TaintEffectNoSchedule))
			nodes[0].CreationTimestamp = metav1.NewTime(st.Now)
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 2, "3", "1Gi")...)...)
			if tc.config != nil {
				config := autoscaler.DefaultConfig()
				tc.config(&config)
				f.apply(t, config)
			}

			status := f.runOnce(t)

			g.Expect(group.increases).To(Equal([]int{1}), "one pod waits for the starting node, the other needs a new one")
			row := groupRow(status, group.id)
			g.Expect(row.Ready).To(BeZero())
			g.Expect(row.NotStarted).To(Equal(1))
			g.Expect(row.Upcoming).To(Equal(2), "the starting node and the new one")
			g.Expect(status.ReadyNodes).To(BeZero())
		})
	}
}

// Status taints are left out of templates too, but the node is ready.
func TestNodesWithStatusTaintsAreReadyAndTheirGroupStillScalesUp(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10}
	nodes := group.addNodes(1, st.WithTaint(nodefacts.StatusTaintPrefix+"gpu-health", "", corev1.TaintEffectNoSchedule))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 2, "3", "1Gi")...)...)

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{2}), "the tainted node takes neither pod")
	row := groupRow(status, group.id)
	g.Expect(row.Ready).To(Equal(1))
	g.Expect(row.NotStarted).To(BeZero())
	g.Expect(row.Upcoming).To(Equal(2))
}
