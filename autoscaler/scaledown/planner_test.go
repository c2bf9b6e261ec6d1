package scaledown_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// busyAndIdle is the base of most cases: "busy" runs 3 of its 4 cores and
// has room for 1 more; "idle" runs one 500m pod that can move to busy.
func busyAndIdle(idlePodOpts ...st.PodOption) cluster {
	return cluster{
		nodes: []*corev1.Node{node("busy"), node("idle")},
		pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("idle-0", "500m", "idle", idlePodOpts...)},
	}
}

// zonalVolume is busyAndIdle with busy in zone a and idle in zone b, and
// the idle pod's volume reachable from the given zone only.
func zonalVolume(zone string) cluster {
	return cluster{
		nodes: []*corev1.Node{
			node("busy", st.WithNodeLabels(corev1.LabelTopologyZone, "a")),
			node("idle", st.WithNodeLabels(corev1.LabelTopologyZone, "b")),
		},
		pods:   []*corev1.Pod{pod("busy-0", "3", "busy"), pod("idle-0", "500m", "idle", st.WithClaims("data"))},
		claims: []*corev1.PersistentVolumeClaim{st.BoundClaim("data", "pv-data")},
		volumes: []*corev1.PersistentVolume{st.PersistentVolume("pv-data",
			st.BoundTo("data"), st.RequiringNode(corev1.LabelTopologyZone, zone))},
	}
}

// twoGPUNodes are two idle nodes with one nvidia.com/gpu each.
func twoGPUNodes() cluster {
	return cluster{nodes: []*corev1.Node{
		node("gpu-a", st.WithAllocatable("nvidia.com/gpu", "1")),
		node("gpu-b", st.WithAllocatable("nvidia.com/gpu", "1")),
	}}
}

// twoDRAGPUNodes are two idle nodes whose slices publish 2 devices of the
// test DRA driver each.
func twoDRAGPUNodes() cluster {
	c := cluster{nodes: []*corev1.Node{node("gpu-a"), node("gpu-b")}}
	for _, node := range c.nodes {
		c.resourceSlices = append(c.resourceSlices, st.ResourceSlice(node.Name, st.GPUDriver, st.GPUs(2, "a100")...))
	}
	return c
}

func TestPlanDecidesWhichNodesGo(t *testing.T) {
	const busyKept = scaledown.ReasonNotUnderutilized
	tests := []struct {
		name      string
		cluster   cluster
		group     func(*testGroup)
		opts      func(*scaledown.Options)
		progress  scaledown.Progress
		wantEmpty []string
		wantDrain []string
		wantKept  map[string]scaledown.Reason
		// wantMessage is part of the message of the first kept node
		// that is not "busy".
		wantMessage string
	}{
		{
			name:      "an underutilized node whose pods fit elsewhere is drained",
			cluster:   busyAndIdle(),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:        "safe-to-evict=false blocks",
			cluster:     busyAndIdle(withPodAnnotation(scaledown.SafeToEvictAnnotation, "false")),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "NotSafeToEvictAnnotation",
		},
		{
			name:        "a kube-system pod without a PDB blocks",
			cluster:     busyAndIdle(inKubeSystem),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "UnmovableKubeSystemPod",
		},
		{
			name: "a kube-system pod with a PDB that allows a disruption moves",
			cluster: func() cluster {
				c := busyAndIdle(inKubeSystem)
				c.pdbs = []*policyv1.PodDisruptionBudget{pdb("kube-system", 1)}
				return c
			}(),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:        "an emptyDir on disk blocks",
			cluster:     busyAndIdle(withVolume(emptyDir("scratch", ""))),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "LocalStorageRequested: pod has local volumes scratch",
		},
		{
			name:        "a hostPath volume blocks",
			cluster:     busyAndIdle(withVolume(logsHostPath())),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "LocalStorageRequested",
		},
		{
			name:      "an emptyDir in memory does not block",
			cluster:   busyAndIdle(withVolume(emptyDir("cache", corev1.StorageMediumMemory))),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:      "local volumes listed in safe-to-evict-local-volumes do not block",
			cluster:   busyAndIdle(withVolume(emptyDir("scratch", "")), withVolume(logsHostPath()), withPodAnnotation(scaledown.SafeToEvictLocalVolumesAnnotation, "scratch,logs")),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:        "a local volume missing from safe-to-evict-local-volumes blocks",
			cluster:     busyAndIdle(withVolume(emptyDir("scratch", "")), withVolume(logsHostPath()), withPodAnnotation(scaledown.SafeToEvictLocalVolumesAnnotation, "scratch")),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "local volumes logs",
		},
		{
			name:      "safe-to-evict=true lifts the local storage rule",
			cluster:   busyAndIdle(withVolume(logsHostPath()), withPodAnnotation(scaledown.SafeToEvictAnnotation, "true")),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:      "with skipNodesWithLocalStorage off, local volumes do not block",
			cluster:   busyAndIdle(withVolume(emptyDir("scratch", "")), withVolume(logsHostPath())),
			opts:      func(o *scaledown.Options) { o.SkipNodesWithLocalStorage = false },
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name:      "with skipNodesWithSystemPods off, a kube-system pod without a PDB moves",
			cluster:   busyAndIdle(inKubeSystem),
			opts:      func(o *scaledown.Options) { o.SkipNodesWithSystemPods = false },
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name: "a PDB that allows no disruption blocks, even with safe-to-evict=true",
			cluster: func() cluster {
				c := busyAndIdle(withPodAnnotation(scaledown.SafeToEvictAnnotation, "true"))
				c.pdbs = []*policyv1.PodDisruptionBudget{pdb("default", 0)}
				return c
			}(),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonBlockedByPod},
			wantMessage: "NotEnoughPdb",
		},
		{
			name: "a PDB's disruptions are shared by the nodes of one pass",
			cluster: cluster{
				nodes: []*corev1.Node{node("big", st.WithAllocatable(corev1.ResourceCPU, "16")), node("a"), node("b")},
				pods:  []*corev1.Pod{pod("big-0", "9", "big"), pod("a-0", "500m", "a"), pod("b-0", "500m", "b")},
				pdbs:  []*policyv1.PodDisruptionBudget{pdb("default", 1)},
			},
			wantDrain:   []string{"a"},
			wantKept:    map[string]scaledown.Reason{"big": busyKept, "b": scaledown.ReasonBlockedByPod},
			wantMessage: "allows 0 more disruptions",
		},
		{
			name: "a node whose pods fit nowhere else stays",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("idle")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("idle-0", "1500m", "idle")},
			},
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonNoPlaceToMovePods},
			wantMessage: "Insufficient cpu",
		},
		{
			name:        "a pod whose volume cannot be reached from the node with room stays",
			cluster:     zonalVolume("b"),
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonNoPlaceToMovePods},
			wantMessage: "didn't match PersistentVolume's node affinity",
		},
		{
			name:      "a pod whose volume the node with room reaches moves",
			cluster:   zonalVolume("a"),
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name: "pods below the priority cutoff need no place and never block",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("idle")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("idle-0", "1500m", "idle", st.WithPriority(-100), withoutController)},
			},
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name: "a node with only DaemonSet and mirror pods is empty",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("idle")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("agent", "100m", "idle", daemonSetPod), pod("static", "100m", "idle", mirrorPod, inKubeSystem)},
			},
			wantEmpty: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name: "a node does not take pods of another node removed in the same pass",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("a"), node("b")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("a-0", "1", "a"), pod("b-0", "1", "b")},
			},
			wantDrain:   []string{"a"},
			wantKept:    map[string]scaledown.Reason{"busy": busyKept, "b": scaledown.ReasonNoPlaceToMovePods},
			wantMessage: "pod default/b-0 fits on no other node",
		},
		{
			// Three nodes at 40%: a's pods take b to 80%, and b cannot go
			// then, nor c, whose pods would need a's room or b's.
			name: "pods moved onto a node by one removal move again when that node goes too",
			cluster: cluster{
				nodes: []*corev1.Node{node("a"), node("b"), node("c")},
				pods: []*corev1.Pod{
					pod("a-0", "400m", "a"), pod("a-1", "400m", "a"), pod("a-2", "400m", "a"), pod("a-3", "400m", "a"),
					pod("b-0", "400m", "b"), pod("b-1", "400m", "b"), pod("b-2", "400m", "b"), pod("b-3", "400m", "b"),
					pod("c-0", "400m", "c"), pod("c-1", "400m", "c"), pod("c-2", "400m", "c"), pod("c-3", "400m", "c"),
				},
			},
			opts:        func(o *scaledown.Options) { o.MaxParallelDrains = 3 },
			wantDrain:   []string{"a"},
			wantKept:    map[string]scaledown.Reason{"b": scaledown.ReasonNoPlaceToMovePods, "c": scaledown.ReasonNoPlaceToMovePods},
			wantMessage: "Insufficient cpu",
		},
		{
			name: "the pods of nodes being deleted take their room first",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("going"), node("idle")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy"), pod("going-0", "1", "going"), pod("idle-0", "500m", "idle")},
			},
			progress: scaledown.Progress{Deleting: map[string]bool{"going": true}, Draining: 1},
			opts:     func(o *scaledown.Options) { o.MaxParallelDrains = 2 },
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "going": scaledown.ReasonCurrentlyBeingDeleted, "idle": scaledown.ReasonNoPlaceToMovePods},
		},
		{
			name: "scale-down-disabled annotation keeps the node",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("idle", withAnnotation(scaledown.ScaleDownDisabledAnnotation, "true"))},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonScaleDownDisabledAnnotation},
		},
		{
			name:     "a node of no node group stays",
			cluster:  cluster{nodes: []*corev1.Node{node("busy"), node("control-plane")}, pods: []*corev1.Pod{pod("busy-0", "3", "busy")}, outside: []string{"control-plane"}},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "control-plane": scaledown.ReasonNotAutoscaled},
		},
		{
			name: "a node that has not started yet stays",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("new", notReady, createdAt(st.Now.Add(-time.Minute)))},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "new": scaledown.ReasonNotStarted},
		},
		{
			name: "a node that still carries a startup taint has not started and stays",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("new", createdAt(st.Now.Add(-time.Minute)),
					st.WithTaint(nodefacts.ClusterAPIUninitializedTaint, "", corev1.TaintEffectNoSchedule))},
				pods: []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "new": scaledown.ReasonNotStarted},
		},
		{
			name: "an unready node is removed whatever its utilization",
			cluster: cluster{
				nodes: []*corev1.Node{node("big", st.WithAllocatable(corev1.ResourceCPU, "16")), node("sick", notReady)},
				pods:  []*corev1.Pod{pod("big-0", "9", "big"), pod("sick-0", "3", "sick")},
			},
			wantDrain: []string{"sick"},
			wantKept:  map[string]scaledown.Reason{"big": busyKept},
		},
		{
			name:     "a group at its minimum size keeps its nodes",
			cluster:  busyAndIdle(),
			group:    func(g *testGroup) { g.Min = 2 },
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonNodeGroupMinSizeReached},
		},
		{
			name: "the minimum size counts the nodes removed in the same pass",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("a"), node("b"), node("c")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			group:     func(g *testGroup) { g.Min = 2 },
			wantEmpty: []string{"a", "b"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept, "c": scaledown.ReasonNodeGroupMinSizeReached},
		},
		{
			name:     "the minimum size counts the nodes being deleted",
			cluster:  cluster{nodes: []*corev1.Node{node("busy"), node("going"), node("idle")}, pods: []*corev1.Pod{pod("busy-0", "3", "busy")}},
			group:    func(g *testGroup) { g.Min = 2 },
			progress: scaledown.Progress{Deleting: map[string]bool{"going": true}, Draining: 1},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "going": scaledown.ReasonCurrentlyBeingDeleted, "idle": scaledown.ReasonNodeGroupMinSizeReached},
		},
		{
			name: "a node already deleted through its group is not chosen again, nor counted twice against the minimum size",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("gone"), node("idle")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			// The group's target size no longer counts "gone".
			group:     func(g *testGroup) { g.Min, g.Target = 1, 2 },
			progress:  scaledown.Progress{Deleting: map[string]bool{"gone": true}, Deleted: map[string]bool{"gone": true}},
			wantEmpty: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept, "gone": scaledown.ReasonCurrentlyBeingDeleted},
		},
		{
			name:        "a rollout in progress keeps the group's nodes",
			cluster:     busyAndIdle(),
			group:       func(g *testGroup) { g.blocked = "rollout in progress" },
			wantKept:    map[string]scaledown.Reason{"busy": scaledown.ReasonNodeGroupScaleDownBlocked, "idle": scaledown.ReasonNodeGroupScaleDownBlocked},
			wantMessage: "rollout in progress",
		},
		{
			name:     "the cluster keeps its minimum cores",
			cluster:  busyAndIdle(),
			opts:     func(o *scaledown.Options) { o.Minimums.Cores = 5 },
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonMinimalResourceLimitExceeded},
		},
		{
			name:     "the cluster keeps its minimum memory",
			cluster:  busyAndIdle(),
			opts:     func(o *scaledown.Options) { o.Minimums.MemoryBytes = 17 << 30 },
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": scaledown.ReasonMinimalResourceLimitExceeded},
		},
		{
			name:     "the cluster keeps its minimum GPUs of a type",
			cluster:  twoGPUNodes(),
			opts:     func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{"nvidia.com/gpu": 2} },
			wantKept: map[string]scaledown.Reason{"gpu-a": scaledown.ReasonMinimalResourceLimitExceeded, "gpu-b": scaledown.ReasonMinimalResourceLimitExceeded},
		},
		{
			name:      "GPU nodes above the minimum go, down to the minimum",
			cluster:   twoGPUNodes(),
			opts:      func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{"nvidia.com/gpu": 1} },
			wantEmpty: []string{"gpu-a"},
			wantKept:  map[string]scaledown.Reason{"gpu-b": scaledown.ReasonMinimalResourceLimitExceeded},
		},
		{
			name:      "a minimum of another GPU type keeps no node",
			cluster:   twoGPUNodes(),
			opts:      func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{"amd.com/gpu": 2} },
			wantEmpty: []string{"gpu-a", "gpu-b"},
			wantKept:  map[string]scaledown.Reason{},
		},
		{
			name:        "the cluster keeps its minimum devices of a DRA driver",
			cluster:     twoDRAGPUNodes(),
			opts:        func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{st.GPUDriver: 4} },
			wantKept:    map[string]scaledown.Reason{"gpu-a": scaledown.ReasonMinimalResourceLimitExceeded, "gpu-b": scaledown.ReasonMinimalResourceLimitExceeded},
			wantMessage: "the cluster would have fewer than the minimum 4 gpu.example.com",
		},
		{
			name:      "nodes with devices above the minimum of their driver go, down to the minimum",
			cluster:   twoDRAGPUNodes(),
			opts:      func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{st.GPUDriver: 2} },
			wantEmpty: []string{"gpu-a"},
			wantKept:  map[string]scaledown.Reason{"gpu-b": scaledown.ReasonMinimalResourceLimitExceeded},
		},
		{
			name:      "a minimum of an extended resource does not count DRA devices",
			cluster:   twoDRAGPUNodes(),
			opts:      func(o *scaledown.Options) { o.Minimums.GPUs = map[corev1.ResourceName]int64{"nvidia.com/gpu": 2} },
			wantEmpty: []string{"gpu-a", "gpu-b"},
			wantKept:  map[string]scaledown.Reason{},
		},
		{
			name:     "a group's utilization threshold overrides the default",
			cluster:  busyAndIdle(),
			group:    func(g *testGroup) { g.options.ScaleDownUtilizationThreshold = ptr.To(0.1) },
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": busyKept},
		},
		{
			name:      "a higher group threshold makes a busier node a candidate, which still needs room",
			cluster:   busyAndIdle(),
			group:     func(g *testGroup) { g.options.ScaleDownUtilizationThreshold = ptr.To(0.9) },
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": scaledown.ReasonNoPlaceToMovePods},
		},
		{
			name: "empty nodes go in bulk up to the limit",
			cluster: cluster{
				nodes: []*corev1.Node{node("busy"), node("a"), node("b"), node("c")},
				pods:  []*corev1.Pod{pod("busy-0", "3", "busy")},
			},
			opts:      func(o *scaledown.Options) { o.MaxEmptyBulkDelete = 2 },
			wantEmpty: []string{"a", "b"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept, "c": scaledown.ReasonParallelismLimitReached},
		},
		{
			name: "non-empty nodes are drained one at a time",
			cluster: cluster{
				nodes: []*corev1.Node{node("big", st.WithAllocatable(corev1.ResourceCPU, "16")), node("a"), node("b")},
				pods:  []*corev1.Pod{pod("big-0", "9", "big"), pod("a-0", "500m", "a"), pod("b-0", "500m", "b")},
			},
			wantDrain: []string{"a"},
			wantKept:  map[string]scaledown.Reason{"big": busyKept, "b": scaledown.ReasonParallelismLimitReached},
		},
		{
			name:     "no drain starts while one is in progress",
			cluster:  cluster{nodes: []*corev1.Node{node("busy"), node("going"), node("idle")}, pods: []*corev1.Pod{pod("busy-0", "3", "busy"), pod("idle-0", "100m", "idle")}},
			progress: scaledown.Progress{Deleting: map[string]bool{"going": true}, Draining: 1},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "going": scaledown.ReasonCurrentlyBeingDeleted, "idle": scaledown.ReasonParallelismLimitReached},
		},
		{
			name: "a pod terminating within its grace period counts in the utilization",
			cluster: cluster{nodes: []*corev1.Node{node("busy"), node("idle")},
				pods: []*corev1.Pod{pod("busy-0", "3", "busy"), pod("stopping-0", "3", "idle", st.Terminating(st.Now))}},
			wantKept: map[string]scaledown.Reason{"busy": busyKept, "idle": busyKept},
		},
		{
			// The Actuator would find the pod on the node at every loop
			// and give the node back, with events.
			name: "a node whose only pod is still terminating is drained, not deleted as empty",
			cluster: cluster{nodes: []*corev1.Node{node("busy"), node("idle")},
				pods: []*corev1.Pod{pod("busy-0", "3", "busy"), pod("stopping-0", "100m", "idle", st.Terminating(st.Now.Add(10*time.Minute)))}},
			wantDrain: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
		{
			name: "a pod terminating past its grace period and the margin holds its node no more",
			cluster: cluster{nodes: []*corev1.Node{node("busy"), node("idle")},
				pods: []*corev1.Pod{pod("busy-0", "3", "busy"), pod("stuck-0", "3", "idle", st.Terminating(st.Now.Add(-31*time.Second)))}},
			wantEmpty: []string{"idle"},
			wantKept:  map[string]scaledown.Reason{"busy": busyKept},
		},
	}
	for _, tt := range tests {
		// The controller's cache keeps pods as trim makes them: every
		// decision must be the same as on the whole pods.
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cached=%t", tt.name, cached), func(t *testing.T) {
				g := NewWithT(t)
				_, ctx := ktesting.NewTestContext(t)
				clk := clocktesting.NewFakeClock(st.Now)
				planner := scaledown.NewPlanner(clk)
				c := tt.cluster
				c.cached = cached
				snap := c.snapshot(tt.group)
				before := len(snap.NodeInfos())

				plan := planner.Plan(ctx, snap, options(optsOrNothing(tt.opts)), tt.progress)

				g.Expect(names(plan.Empty)).To(ConsistOf(orEmpty(tt.wantEmpty)), "empty nodes removed")
				g.Expect(names(plan.Drain)).To(ConsistOf(orEmpty(tt.wantDrain)), "nodes drained")
				g.Expect(reasons(plan.Kept)).To(Equal(tt.wantKept), "nodes kept")
				g.Expect(snap.NodeInfos()).To(HaveLen(before), "the snapshot is left as it was")
				if tt.wantMessage != "" {
					g.Expect(keptMessages(plan.Kept)).To(ContainElement(ContainSubstring(tt.wantMessage)))
				}
			})
		}
	}
}

func optsOrNothing(change func(*scaledown.Options)) func(*scaledown.Options) {
	if change == nil {
		return func(*scaledown.Options) {}
	}
	return change
}

func orEmpty(names []string) []string {
	if names == nil {
		return []string{}
	}
	return names
}

func keptMessages(kept map[string]scaledown.Decision) []string {
	var messages []string
	for _, decision := range kept {
		messages = append(messages, decision.Message)
	}
	return messages
}
