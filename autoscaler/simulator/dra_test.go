package simulator_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func TestClaimCheck(t *testing.T) {
	gpuClass := st.DeviceClass("gpu", st.GPUDriver)
	a100Class := st.DeviceClass("a100", st.GPUDriver, `device.attributes["gpu.example.com"].model == "a100"`)
	nodes := []*corev1.Node{st.Node("one", "8", "16Gi"), st.Node("two", "8", "16Gi"), st.Node("cpu", "8", "16Gi")}
	slices := []*resourceapi.ResourceSlice{
		st.ResourceSlice("one", st.GPUDriver, st.GPUs(1, "a100")...),
		st.ResourceSlice("two", st.GPUDriver, st.GPUs(2, "t4")...),
	}
	cannot := func(claim string) string {
		return simulator.ReasonCannotAllocate([]string{claim}, "the node's devices cannot satisfy it")
	}
	tests := []struct {
		name string
		in   snapshot.Input
		pod  *corev1.Pod
		// want maps nodes to the reasons the pod does not fit them.
		want map[string][]string
	}{
		{
			name: "a claim for 2 devices fits only the node with 2 free devices",
			in:   snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{gpuClass}, ResourceClaims: []*resourceapi.ResourceClaim{st.ResourceClaim("two-gpus", "gpu", 2)}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("two-gpus")),
			want: map[string][]string{"one": {cannot("two-gpus")}, "two": nil, "cpu": {cannot("two-gpus")}},
		},
		{
			name: "devices allocated to another claim are not free",
			in: snapshot.Input{
				DeviceClasses: []*resourceapi.DeviceClass{gpuClass},
				ResourceClaims: []*resourceapi.ResourceClaim{
					st.ResourceClaim("two-gpus", "gpu", 2),
					st.AllocatedOn(st.ResourceClaim("other", "gpu", 1), "two", st.GPUDriver, "gpu-1"),
				},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("two-gpus")),
			want: map[string][]string{"one": {cannot("two-gpus")}, "two": {cannot("two-gpus")}, "cpu": {cannot("two-gpus")}},
		},
		{
			name: "the device class's CEL selector matches the driver's attribute",
			in:   snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{a100Class}, ResourceClaims: []*resourceapi.ResourceClaim{st.ResourceClaim("a100", "a100", 1)}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("a100")),
			want: map[string][]string{"one": nil, "two": {cannot("a100")}, "cpu": {cannot("a100")}},
		},
		{
			name: "the claim's CEL selector narrows the class",
			in: snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{gpuClass}, ResourceClaims: []*resourceapi.ResourceClaim{
				st.ResourceClaim("t4", "gpu", 1, `device.attributes["gpu.example.com"].model == "t4"`),
			}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("t4")),
			want: map[string][]string{"one": {cannot("t4")}, "two": nil, "cpu": {cannot("t4")}},
		},
		{
			name: "a claim for all devices needs at least one",
			in:   snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{gpuClass}, ResourceClaims: []*resourceapi.ResourceClaim{st.ResourceClaim("all", "gpu", 0)}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("all")),
			want: map[string][]string{"one": nil, "two": nil, "cpu": {cannot("all")}},
		},
		{
			name: "a shared claim allocated on one node fits that node only",
			in: snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{gpuClass}, ResourceClaims: []*resourceapi.ResourceClaim{
				st.AllocatedOn(st.ResourceClaim("shared", "gpu", 1), "two", st.GPUDriver, "gpu-0"),
			}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("shared")),
			want: map[string][]string{"one": {simulator.ReasonClaimNotAvailable}, "two": nil, "cpu": {simulator.ReasonClaimNotAvailable}},
		},
		{
			name: "a claim from a template, not made yet, is made from the template",
			in: snapshot.Input{
				DeviceClasses:          []*resourceapi.DeviceClass{gpuClass},
				ResourceClaimTemplates: []*resourceapi.ResourceClaimTemplate{st.ResourceClaimTemplate("two-gpus", "gpu", 2)},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus")),
			want: map[string][]string{"one": {cannot("p-gpus")}, "two": nil, "cpu": {cannot("p-gpus")}},
		},
		{
			name: "a claim made from a template is read from the pod's status",
			in: snapshot.Input{
				DeviceClasses:          []*resourceapi.DeviceClass{gpuClass},
				ResourceClaimTemplates: []*resourceapi.ResourceClaimTemplate{st.ResourceClaimTemplate("two-gpus", "gpu", 2)},
				ResourceClaims:         []*resourceapi.ResourceClaim{st.AllocatedOn(st.ResourceClaim("p-gpus-x1", "gpu", 1), "one", st.GPUDriver, "gpu-0")},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus"), st.WithGeneratedClaim("gpus", "p-gpus-x1")),
			want: map[string][]string{"one": nil, "two": {simulator.ReasonClaimNotAvailable}, "cpu": {simulator.ReasonClaimNotAvailable}},
		},
		{
			name: "devices for all nodes are offered to every node",
			in: snapshot.Input{
				DeviceClasses:  []*resourceapi.DeviceClass{st.DeviceClass("net", "net.example.com")},
				ResourceClaims: []*resourceapi.ResourceClaim{st.ResourceClaim("nic", "net", 1)},
				ResourceSlices: []*resourceapi.ResourceSlice{allNodes(st.ResourceSlice("fabric", "net.example.com", st.Device("nic-0", "x")))},
			},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("nic")),
			want: map[string][]string{"one": nil, "two": nil, "cpu": nil},
		},
		{
			name: "a missing claim fits no node",
			in:   snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{gpuClass}},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("missing")),
			want: map[string][]string{"one": {`resourceclaim "missing" not found`}, "two": {`resourceclaim "missing" not found`}, "cpu": {`resourceclaim "missing" not found`}},
		},
		{
			name: "DRA objects that could not be read leave pods with claims not evaluated",
			in:   snapshot.Input{DRAError: errors.New("forbidden")},
			pod:  st.Pod("p", "1", "1Gi", st.WithResourceClaim("two-gpus")),
			want: map[string][]string{
				"one": {simulator.ReasonClaimsNotEvaluated(errors.New("forbidden"))},
				"two": {simulator.ReasonClaimsNotEvaluated(errors.New("forbidden"))},
				"cpu": {simulator.ReasonClaimsNotEvaluated(errors.New("forbidden"))},
			},
		},
		{
			name: "pods without claims ignore DRA",
			in:   snapshot.Input{DRAError: errors.New("forbidden")},
			pod:  st.Pod("p", "1", "1Gi"),
			want: map[string][]string{"one": nil, "two": nil, "cpu": nil},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			in := tt.in
			in.Nodes, in.ResourceSlices = nodes, append(slices, in.ResourceSlices...)
			sched := simulator.NewScheduler(ctx, snapshot.New(in))
			got := map[string][]string{}
			for _, node := range nodes {
				got[node.Name] = sched.Check(tt.pod, node.Name)
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// allNodes makes slice publish devices for all nodes.
func allNodes(slice *resourceapi.ResourceSlice) *resourceapi.ResourceSlice {
	slice.Spec.NodeName, slice.Spec.AllNodes = nil, ptr.To(true)
	return slice
}

// gpuCluster is a node with 2 GPUs and a class for them.
func gpuCluster(nodes ...string) snapshot.Input {
	in := snapshot.Input{DeviceClasses: []*resourceapi.DeviceClass{st.DeviceClass("gpu", st.GPUDriver)}}
	for _, name := range nodes {
		in.Nodes = append(in.Nodes, st.Node(name, "8", "16Gi"))
		in.ResourceSlices = append(in.ResourceSlices, st.ResourceSlice(name, st.GPUDriver, st.GPUs(2, "a100")...))
	}
	return in
}

// TestPlacedClaimsTakeTheirDevices checks that a placed pod's claims keep
// its devices from the next pods, and that Revert gives them back.
func TestPlacedClaimsTakeTheirDevices(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	in := gpuCluster("n1")
	in.ResourceClaimTemplates = []*resourceapi.ResourceClaimTemplate{st.ResourceClaimTemplate("one-gpu", "gpu", 1)}
	var pods []*corev1.Pod
	for _, name := range []string{"a", "b", "c"} {
		pods = append(pods, st.Pod(name, "1", "1Gi", st.OwnedBy("rs"), st.WithResourceClaimTemplate("gpu", "one-gpu")))
	}
	sched := simulator.NewScheduler(ctx, snapshot.New(in))

	sched.Fork()
	result := sched.SchedulePods(pods, simulator.ScheduleOptions{})
	g.Expect(result.Scheduled).To(HaveLen(2))
	g.Expect(result.Unschedulable).To(HaveLen(1))
	g.Expect(result.Unschedulable[0].Reasons).To(HaveKey(simulator.ReasonCannotAllocate([]string{"c-gpu"}, "the node's devices cannot satisfy it")))
	sched.Revert()

	result = sched.SchedulePods(pods[2:], simulator.ScheduleOptions{})
	g.Expect(result.Unschedulable).To(BeEmpty(), "the devices of the reverted placements are free again")
}

// TestRemovedNodeReleasesItsClaims checks the scale-down simulation: the
// claims allocated on a removed node's devices are allocated anew where
// its pods go, and a pod whose claim fits nowhere else keeps the node.
func TestRemovedNodeReleasesItsClaims(t *testing.T) {
	for _, tt := range []struct {
		name      string
		others    []string
		wantMoved bool
	}{
		{name: "another node with free devices takes the pod", others: []string{"n2"}, wantMoved: true},
		{name: "no other node has devices", others: nil, wantMoved: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, ctx := ktesting.NewTestContext(t)
			in := gpuCluster(append([]string{"n1"}, tt.others...)...)
			in.Nodes = append(in.Nodes, st.Node("cpu", "8", "16Gi"))
			// n2's devices are taken by a pod of its own for one of the two:
			// the moving pod needs both.
			claim := st.AllocatedOn(st.ResourceClaim("two-gpus", "gpu", 2), "n1", st.GPUDriver, "gpu-0", "gpu-1")
			in.ResourceClaims = []*resourceapi.ResourceClaim{claim}
			pod := st.Pod("p", "1", "1Gi", st.OwnedBy("rs"), st.OnNode("n1"), st.WithResourceClaim("two-gpus"))
			in.Pods = []*corev1.Pod{pod}
			sched := simulator.NewScheduler(ctx, snapshot.New(in))

			sched.Fork()
			g.Expect(sched.RemoveNode("n1")).To(Succeed())
			moving := pod.DeepCopy()
			moving.Spec.NodeName = ""
			result := sched.SchedulePods([]*corev1.Pod{moving}, simulator.ScheduleOptions{})
			g.Expect(result.Unschedulable).To(HaveLen(map[bool]int{true: 0, false: 1}[tt.wantMoved]))
			sched.Revert()

			g.Expect(sched.Check(moving, "n1")).To(BeEmpty(), "after Revert the claim is allocated on n1 again")
			if len(tt.others) > 0 {
				g.Expect(sched.Check(moving, "n2")).To(ConsistOf(simulator.ReasonClaimNotAvailable))
			}
		})
	}
}

// TestTemplateGetsTheMemberSlices checks that a template node, and the
// new nodes copied from it, publish devices of their own.
func TestTemplateGetsTheMemberSlices(t *testing.T) {
	g := NewWithT(t)
	member := snapshot.New(gpuCluster("n1")).NodeInfo("n1")
	template := snapshot.NewNodeInfo(st.Node("template-gpu", "8", "16Gi")).WithResourceSlices(member.ResourceSlices())
	g.Expect(template.ResourceSlices()).To(HaveLen(1))
	slice := template.ResourceSlices()[0]
	g.Expect(*slice.Spec.NodeName).To(Equal("template-gpu"))
	g.Expect(slice.Spec.Pool.Name).To(Equal("template-gpu"))
	g.Expect(slice.Name).To(Equal("template-gpu-" + st.GPUDriver))
	g.Expect(slice.Spec.Devices).To(HaveLen(2))
	g.Expect(*member.ResourceSlices()[0].Spec.NodeName).To(Equal("n1"), "the member's slice is not changed")

	copied := template.CopyAs("new-1").ResourceSlices()[0]
	g.Expect(*copied.Spec.NodeName).To(Equal("new-1"))
	g.Expect(copied.Spec.Pool.Name).To(Equal("new-1"))
}

// TestReplacedNodeKeepsItsClaims checks that replacing a node by itself as
// it will be once started keeps the claims of its pods allocated there.
func TestReplacedNodeKeepsItsClaims(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	in := gpuCluster("n1")
	claim := st.AllocatedOn(st.ResourceClaim("two-gpus", "gpu", 2), "n1", st.GPUDriver, "gpu-0", "gpu-1")
	in.ResourceClaims = []*resourceapi.ResourceClaim{claim, st.ResourceClaim("more-gpus", "gpu", 2)}
	in.Pods = []*corev1.Pod{st.Pod("p", "1", "1Gi", st.OwnedBy("rs"), st.OnNode("n1"), st.WithResourceClaim("two-gpus"))}
	snap := snapshot.New(in)
	sched := simulator.NewScheduler(ctx, snap)
	n1 := snap.NodeInfo("n1")

	g.Expect(sched.ReplaceNode(snapshot.NewNodeInfo(n1.Node(), n1.Pods()...).WithResourceSlices(n1.ResourceSlices()))).To(Succeed())

	g.Expect(sched.Check(st.Pod("q", "1", "1Gi", st.WithResourceClaim("more-gpus")), "n1")).
		To(ConsistOf(simulator.ReasonCannotAllocate([]string{"more-gpus"}, "the node's devices cannot satisfy it")), "p still holds both GPUs")
}

// TestPodsPlacedBeforeTheSchedulerHoldTheirDevices checks that pending
// pods an earlier step placed on a node (snapshot.AddPod) hold the devices
// their claims get there.
func TestPodsPlacedBeforeTheSchedulerHoldTheirDevices(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	in := gpuCluster("n1")
	in.ResourceClaims = []*resourceapi.ResourceClaim{st.ResourceClaim("waiting", "gpu", 2), st.ResourceClaim("other", "gpu", 1)}
	snap := snapshot.New(in)
	g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("w", "1", "1Gi", st.WithResourceClaim("waiting"))), "n1")).To(Succeed())

	sched := simulator.NewScheduler(ctx, snap)

	g.Expect(sched.Check(st.Pod("q", "1", "1Gi", st.WithResourceClaim("other")), "n1")).
		To(ConsistOf(simulator.ReasonCannotAllocate([]string{"other"}, "the node's devices cannot satisfy it")))
}

// TestGroupsFollowTheSchedulerTheyAreUsedWith checks that a pod group
// looked at by one scheduler sees the allocations of the next one.
func TestGroupsFollowTheSchedulerTheyAreUsedWith(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	in := gpuCluster("n1")
	in.ResourceClaims = []*resourceapi.ResourceClaim{st.ResourceClaim("a", "gpu", 2), st.ResourceClaim("b", "gpu", 2)}
	group := simulator.NewPodGroup(st.Pod("q", "1", "1Gi", st.WithResourceClaim("b")))
	g.Expect(simulator.NewScheduler(ctx, snapshot.New(in)).CheckGroup(group, "n1")).To(BeEmpty())

	sched := simulator.NewScheduler(ctx, snapshot.New(in))
	g.Expect(sched.SchedulePods([]*corev1.Pod{st.Pod("p", "1", "1Gi", st.WithResourceClaim("a"))}, simulator.ScheduleOptions{}).Scheduled).To(HaveLen(1))

	g.Expect(sched.CheckGroup(group, "n1")).To(HaveLen(1), "p holds both GPUs in this scheduler")
}
