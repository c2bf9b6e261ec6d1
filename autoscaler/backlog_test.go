package autoscaler_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// TestHugeBacklog: with 50,000 pending pods (the upstream shape), each loop
// plans for the default budget of pods, acts on it, finishes within the
// loop timeout and says how many pods it left; the pods planned for keep
// their nodes on their way, so that the backlog is worked off, 200 nodes a
// loop, until every pod has a node.
func TestHugeBacklog(t *testing.T) {
	g := NewWithT(t)
	ctx := klog.NewContext(t.Context(), klog.Background().V(1))
	c := pendingShape(50000, "200m", "200Mi", nil)
	c.config.MaxPendingPodsPerLoop = autoscaler.DefaultConfig().MaxPendingPodsPerLoop
	g.Expect(c.config.MaxPendingPodsPerLoop).To(Equal(10000))
	clk := clocktesting.NewFakeClock(st.Now)
	engine := c.newEngine(t, clk)

	for loop := 1; loop <= 5; loop++ {
		status := engine.RunOnce(ctx, clk.Now())
		g.Expect(status.Err).NotTo(HaveOccurred(), "loop %d finishes within the loop timeout", loop)
		g.Expect(status.UnschedulablePods).To(Equal(50000))
		g.Expect(status.PodsLeftForNextLoop).To(Equal(50000-10000*loop), "loop %d", loop)
		g.Expect(c.group.increases).To(HaveLen(loop))
		g.Expect(c.group.increases[loop-1]).To(Equal(200), "loop %d adds the nodes of its 10,000 pods, 50 a node", loop)
		clk.Step(10 * time.Second)
	}
	status := engine.RunOnce(ctx, clk.Now())
	g.Expect(status.PodsLeftForNextLoop).To(BeZero())
	g.Expect(c.group.target).To(Equal(1000), "upstream's outcome, in five loops")
}
