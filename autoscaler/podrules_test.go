package autoscaler_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"

	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// A DaemonSet controller other than the DaemonSet (OpenKruise's Advanced
// DaemonSet, for one) annotates its pods daemonset-pod=true: they belong
// to their node, which is empty with them and goes at once, nothing
// evicted.
func TestNodeWithOnlyAPodOfACustomDaemonSetIsRemovedAsEmpty(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	agent := st.Pod("agent-1", "100m", "128Mi", st.CustomDaemonSetPod("agent"), st.OnNode(nodes[1].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, agent)...)

	f.runOnce(t)
	f.clock.Step(10*time.Minute + time.Second)
	f.runOnce(t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name))
	g.Expect(f.podEvents()).NotTo(ContainElement(ContainSubstring("deleting pod for node scale down")), "its pod goes with it, not evicted before")
}
