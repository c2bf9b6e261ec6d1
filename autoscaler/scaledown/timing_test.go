package scaledown_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func TestUnneededNodesAreRemovedAfterTheirTime(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(st.Now)
	planner := scaledown.NewPlanner(clk)
	opts := options(func(o *scaledown.Options) { o.Groups.ScaleDownUnneededTime = 10 * time.Minute })
	idle := busyAndIdle()
	// "idle" is needed while it runs a 2.5-core pod.
	needed := busyAndIdle()
	needed.pods = append(needed.pods, pod("idle-1", "2", "idle"))

	plan := func(c cluster) *scaledown.Plan {
		snap := c.snapshot(nil)
		return planner.Plan(ctx, snap, opts, scaledown.Progress{})
	}
	expectWaiting := func(p *scaledown.Plan, since time.Time) {
		g.Expect(p.Drain).To(BeEmpty())
		g.Expect(p.Kept).To(HaveKeyWithValue("idle", HaveField("Reason", scaledown.ReasonNotUnneededLongEnough)))
		g.Expect(p.Unneeded).To(ConsistOf(HaveField("Since", since)))
	}

	expectWaiting(plan(idle), st.Now)
	clk.Step(6 * time.Minute)
	expectWaiting(plan(idle), st.Now)

	clk.Step(time.Minute)
	p := plan(needed)
	g.Expect(p.Unneeded).To(BeEmpty(), "a needed node is forgotten")
	g.Expect(p.Kept).To(HaveKeyWithValue("idle", HaveField("Reason", scaledown.ReasonNotUnderutilized)))

	clk.Step(time.Minute)
	restart := clk.Now()
	expectWaiting(plan(idle), restart)
	clk.Step(9*time.Minute + 59*time.Second)
	expectWaiting(plan(idle), restart)
	clk.Step(time.Second)
	g.Expect(names(plan(idle).Drain)).To(ConsistOf("idle"), "removable once unneeded for 10m since it was needed last")
}

func TestRemovableAfterUsesTheRightTime(t *testing.T) {
	tests := []struct {
		name          string
		idle          *corev1.Node
		group         func(*testGroup)
		wantRemovable time.Duration
	}{
		{name: "ready nodes wait the unneeded time", idle: node("idle"), wantRemovable: 10 * time.Minute},
		{name: "unready nodes wait the unready time", idle: node("idle", notReady), wantRemovable: 20 * time.Minute},
		{
			name: "a group's unneeded time overrides the default", idle: node("idle"),
			group:         func(g *testGroup) { g.options.ScaleDownUnneededTime = ptr.To(time.Minute) },
			wantRemovable: time.Minute,
		},
		{
			name: "a group's unready time overrides the default", idle: node("idle", notReady),
			group:         func(g *testGroup) { g.options.ScaleDownUnreadyTime = ptr.To(2 * time.Minute) },
			wantRemovable: 2 * time.Minute,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			clk := clocktesting.NewFakeClock(st.Now)
			planner := scaledown.NewPlanner(clk)
			opts := options(func(o *scaledown.Options) {
				o.Groups.ScaleDownUnneededTime, o.Groups.ScaleDownUnreadyTime = 10*time.Minute, 20*time.Minute
			})
			c := cluster{nodes: []*corev1.Node{node("busy"), tt.idle}, pods: []*corev1.Pod{pod("busy-0", "3", "busy")}}
			plan := func() *scaledown.Plan {
				snap := c.snapshot(tt.group)
				return planner.Plan(ctx, snap, opts, scaledown.Progress{})
			}

			g.Expect(plan().Unneeded).To(ConsistOf(HaveField("RemovableAt", st.Now.Add(tt.wantRemovable))))
			clk.Step(tt.wantRemovable - time.Second)
			g.Expect(plan().Empty).To(BeEmpty())
			clk.Step(time.Second)
			g.Expect(names(plan().Empty)).To(ConsistOf("idle"))
		})
	}
}

func TestDelaysPauseRemovals(t *testing.T) {
	tests := []struct {
		name      string
		scaleUp   time.Duration // before now; 0 means never
		progress  scaledown.Progress
		wantPause bool
	}{
		{name: "nothing happened lately", wantPause: false},
		{name: "within delayAfterAdd of a scale-up", scaleUp: 9 * time.Minute, wantPause: true},
		{name: "after delayAfterAdd of a scale-up", scaleUp: 10 * time.Minute, wantPause: false},
		{name: "within delayAfterDelete of a deletion", progress: scaledown.Progress{LastDeletion: st.Now.Add(-time.Minute)}, wantPause: true},
		{name: "after delayAfterDelete of a deletion", progress: scaledown.Progress{LastDeletion: st.Now.Add(-2 * time.Minute)}, wantPause: false},
		{name: "within delayAfterFailure of a failure", progress: scaledown.Progress{LastFailure: st.Now.Add(-2 * time.Minute)}, wantPause: true},
		{name: "after delayAfterFailure of a failure", progress: scaledown.Progress{LastFailure: st.Now.Add(-3 * time.Minute)}, wantPause: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			clk := clocktesting.NewFakeClock(st.Now)
			planner := scaledown.NewPlanner(clk)
			opts := options(func(o *scaledown.Options) {
				o.DelayAfterAdd, o.DelayAfterDelete, o.DelayAfterFailure = 10*time.Minute, 2*time.Minute, 3*time.Minute
			})
			if tt.scaleUp > 0 {
				planner.RecordScaleUp(st.Now.Add(-tt.scaleUp))
			}
			snap := busyAndIdle().snapshot(nil)

			plan := planner.Plan(ctx, snap, opts, tt.progress)

			g.Expect(plan.Unneeded).To(HaveLen(1), "the node is unneeded either way")
			if tt.wantPause {
				g.Expect(plan.Drain).To(BeEmpty())
				g.Expect(plan.Kept).To(HaveKeyWithValue("idle", HaveField("Reason", scaledown.ReasonScaleDownInCooldown)))
			} else {
				g.Expect(names(plan.Drain)).To(ConsistOf("idle"))
			}
		})
	}
}

func TestNodeUtilization(t *testing.T) {
	gpuNode := node("gpu", st.WithAllocatable("nvidia.com/gpu", "2"))
	tests := []struct {
		name    string
		node    *corev1.Node
		pods    []*corev1.Pod
		opts    func(*scaledown.Options)
		want    float64
		wantGPU corev1.ResourceName
	}{
		{name: "an empty node", node: node("n"), want: 0},
		{name: "cpu when it is the larger", node: node("n"), pods: []*corev1.Pod{st.Pod("p", "1", "2Gi", st.OnNode("n"))}, want: 0.25},
		{name: "memory when it is the larger", node: node("n"), pods: []*corev1.Pod{st.Pod("p", "1", "8Gi", st.OnNode("n"))}, want: 0.5},
		{name: "DaemonSet and mirror pods count by default", node: node("n"),
			pods: []*corev1.Pod{pod("ds", "1", "n", daemonSetPod), pod("static", "1", "n", mirrorPod)}, want: 0.5},
		{name: "DaemonSet pods can be ignored", node: node("n"), opts: func(o *scaledown.Options) { o.IgnoreDaemonSetsUtilization = true },
			pods: []*corev1.Pod{pod("ds", "1", "n", daemonSetPod), pod("static", "1", "n", mirrorPod)}, want: 0.25},
		{name: "pods annotated daemonset-pod=true are ignored as DaemonSet pods", node: node("n"), opts: func(o *scaledown.Options) { o.IgnoreDaemonSetsUtilization = true },
			pods: []*corev1.Pod{pod("agent", "1", "n", st.CustomDaemonSetPod("agent")), pod("web", "1", "n")}, want: 0.25},
		{name: "mirror pods can be ignored", node: node("n"), opts: func(o *scaledown.Options) { o.IgnoreMirrorPodsUtilization = true },
			pods: []*corev1.Pod{pod("ds", "1", "n", daemonSetPod), pod("static", "2", "n", mirrorPod)}, want: 0.25},
		{name: "a GPU node is judged on its GPUs alone", node: gpuNode,
			pods: []*corev1.Pod{pod("busy-cpu", "3", "gpu")}, want: 0, wantGPU: "nvidia.com/gpu"},
		{name: "a GPU node using its GPUs", node: gpuNode,
			pods: []*corev1.Pod{pod("trainer", "100m", "gpu", st.WithRequest("nvidia.com/gpu", "1"))}, want: 0.5, wantGPU: "nvidia.com/gpu"},
		{name: "requests of a resource the node does not offer count as full", node: node("n", st.WithAllocatable(corev1.ResourceCPU, "0")),
			pods: []*corev1.Pod{pod("p", "100m", "n")}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			snap := cluster{nodes: []*corev1.Node{tt.node}, pods: tt.pods}.snapshot(nil)
			opts := options(optsOrNothing(tt.opts))

			u := scaledown.NodeUtilization(snap.NodeInfos()[0], opts, st.Now)

			g.Expect(u.Value).To(BeNumerically("~", tt.want, 1e-9))
			g.Expect(u.GPUResource).To(Equal(tt.wantGPU))
		})
	}
}
