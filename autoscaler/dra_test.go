package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// gpuNodes adds n nodes to group, each publishing 2 GPUs, and returns
// them with their slices.
func gpuNodes(group *fakeGroup, n int) ([]*corev1.Node, []client.Object) {
	nodes := group.addNodes(n)
	var slices []client.Object
	for _, node := range nodes {
		slices = append(slices, st.ResourceSlice(node.Name, st.GPUDriver, st.GPUs(2, "a100")...))
	}
	return nodes, slices
}

// templateWithDevices returns the template node of a group at zero that
// describes devices ("driver=count", snapshot.TemplateDevicesAnnotation);
// none when devices is empty.
func templateWithDevices(devices string) *corev1.Node {
	template := templateNode()
	if devices != "" {
		template.Annotations = map[string]string{snapshot.TemplateDevicesAnnotation: devices}
	}
	return template
}

// busyGPUs returns a pod on node holding both its GPUs through a claim of
// its own, and the claim.
func busyGPUs(name string, node *corev1.Node) (*corev1.Pod, *resourceapi.ResourceClaim) {
	claim := st.AllocatedOn(st.ResourceClaim(name+"-gpus", "gpu", 2), node.Name, st.GPUDriver, "gpu-0", "gpu-1")
	pod := st.Pod(name, "100m", "128Mi", st.OwnedBy(name), st.OnNode(node.Name), st.WithResourceClaim(claim.Name))
	return pod, claim
}

func TestPodsWithClaimsGrowTheGroupWhoseNodesHaveTheDevices(t *testing.T) {
	g := NewWithT(t)
	gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateNode()}
	cpu := &fakeGroup{id: "MachineDeployment/default/cpu", max: 10, template: templateNode()}
	nodes, slices := gpuNodes(gpu, 1)
	busy, busyClaim := busyGPUs("busy", nodes[0])
	objects := append(objects(nodes, busy), slices...)
	objects = append(objects, busyClaim, st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2))
	for _, pod := range st.Replicas("train", 2, "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus")) {
		objects = append(objects, pod)
	}
	f := newFixture(t, []*fakeGroup{gpu, cpu}, objects...)
	config := autoscaler.DefaultConfig()
	config.Expanders = []string{scaleup.ExpanderPriority}
	config.ExpanderPriorities = map[int32][]string{10: {"MachineDeployment/default/cpu"}, 1: {"MachineDeployment/default/gpu"}}
	f.apply(t, config)

	f.runOnce(t)

	g.Expect(cpu.increases).To(BeEmpty(), "the CPU group's nodes have no devices, whatever the expander prefers")
	g.Expect(gpu.increases).To(Equal([]int{2}), "two devices a node, two a pod: a node a pod")
}

func TestPodsWithClaimsThatCannotBeAllocatedAreNamedInNotTriggerScaleUp(t *testing.T) {
	g := NewWithT(t)
	cpu := &fakeGroup{id: "MachineDeployment/default/cpu", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{cpu},
		st.Pod("train-0", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaim("gpus")),
		st.ResourceClaim("gpus", "gpu", 2), st.DeviceClass("gpu", st.GPUDriver),
	)

	status := f.runOnce(t)

	g.Expect(cpu.increases).To(BeEmpty())
	g.Expect(status.NotTriggerScaleUpReasons).To(ConsistOf(HaveField("Reason", ContainSubstring("cannot allocate resource claim gpus"))))
}

func TestPodsWithResourceClaimsThatCannotBeEvaluatedAreReportedNotGuessed(t *testing.T) {
	for _, failure := range readFailures(&resourceapi.ResourceSliceList{}) {
		t.Run(failure.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			f := newFixture(t, []*fakeGroup{group},
				st.Pod("train-0", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaim("gpus")),
				st.Pod("web", "1", "1Gi", st.OwnedBy("web")),
			)
			engine := f.engineReading(t, failure.cluster(f.cluster))

			status := engine.RunOnce(context.Background(), f.clock.Now())

			g.Expect(status.Err).NotTo(HaveOccurred(), "the loop goes on without the DRA objects")
			g.Expect(group.increases).To(Equal([]int{1}), "one node for the pod without claims")
			g.Expect(status.NotTriggerScaleUpReasons).To(ConsistOf(HaveField("Reason", ContainSubstring("resource claims not evaluated: listing ResourceSlices of the cluster: "+failure.err))))
		})
	}
}

// A pod that holds a node's devices moves only where its claim can be
// allocated anew.
func TestNodeWhoseDevicesAPodHoldsIsKeptUnlessThePodCanMove(t *testing.T) {
	for _, tt := range []struct {
		name string
		// otherBusy has the other node's GPUs taken too.
		otherBusy    bool
		wantUnneeded bool
	}{
		{name: "the other node's devices are taken: both nodes stay", otherBusy: true},
		{name: "the other node's devices are free: the pod moves there", wantUnneeded: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateNode()}
			nodes, slices := gpuNodes(gpu, 2)
			pod, claim := busyGPUs("train", nodes[0])
			objects := append(objects(nodes, pod), slices...)
			objects = append(objects, claim, st.DeviceClass("gpu", st.GPUDriver))
			if tt.otherBusy {
				other, otherClaim := busyGPUs("other", nodes[1])
				objects = append(objects, other, otherClaim)
			} else {
				// Busy enough to stay, with room for the moving pod.
				objects = append(objects, st.Pod("web", "3", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[1].Name)))
			}
			f := newFixture(t, []*fakeGroup{gpu}, objects...)

			status := f.runPastUnneededTime(context.Background(), t)

			if tt.wantUnneeded {
				g.Expect(status.UnneededNodes).To(Equal(1), "the first node, whose pod takes the other's devices")
			} else {
				g.Expect(status.UnneededNodes).To(BeZero(), "no pod holding devices can move")
				g.Expect(gpu.deletedNodes).To(BeEmpty())
			}
		})
	}
}

func TestClustersWithoutResourceClaimsAreNotAskedForDRAObjects(t *testing.T) {
	for _, tt := range []struct {
		name      string
		pod       *corev1.Pod
		wantAsked bool
	}{
		{name: "no pod has claims", pod: st.Pod("web", "1", "1Gi", st.OwnedBy("web"))},
		{name: "a pod has claims", pod: st.Pod("train", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaim("gpus")), wantAsked: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			f := newFixture(t, []*fakeGroup{group}, tt.pod)
			cluster := &listRecorder{Reader: f.cluster}

			status := f.engineReading(t, cluster).RunOnce(context.Background(), f.clock.Now())

			g.Expect(status.Err).NotTo(HaveOccurred())
			if tt.wantAsked {
				g.Expect(cluster.lists).To(ContainElement("*v1.ResourceSliceList"))
			} else {
				g.Expect(cluster.lists).NotTo(ContainElement("*v1.ResourceSliceList"))
			}
		})
	}
}

// listRecorder is a cluster that records the types of the lists read.
type listRecorder struct {
	client.Reader
	lists []string
}

func (r *listRecorder) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.lists = append(r.lists, fmt.Sprintf("%T", list))
	return r.Reader.List(ctx, list, opts...)
}

// A GPU node that registered and has not started may have no slices yet:
// its driver publishes them once it runs. The pending pod waits for it,
// with the devices of the group's template, rather than asking for
// another node.
func TestStartingNodeWithoutSlicesYetTakesThePodsWithClaims(t *testing.T) {
	g := NewWithT(t)
	gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateNode()}
	nodes, slices := gpuNodes(gpu, 2)
	busy, busyClaim := busyGPUs("busy", nodes[0])
	starting := nodes[1]
	starting.CreationTimestamp = metav1.NewTime(st.Now)
	starting.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	objects := append(objects(nodes, busy), slices[0], busyClaim,
		st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2),
		st.Pod("train-0", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaimTemplate("gpus", "two-gpus")))
	f := newFixture(t, []*fakeGroup{gpu}, objects...)

	status := f.runOnce(t)

	g.Expect(gpu.increases).To(BeEmpty(), "the pod waits for the starting node")
	g.Expect(groupRow(status, gpu.id).Upcoming).To(Equal(1))
}

// A node is Ready a while before its DRA drivers publish its devices. A
// young Ready node of a group whose other nodes have devices waits for
// them as a starting node does: the pod with claims waits for it, and it
// is not removed as empty meanwhile. A node past the startup time that
// has none is taken as it is.
func TestReadyNodeWhoseDriversHaveNotPublishedYetIsOnItsWay(t *testing.T) {
	for _, tt := range []struct {
		name         string
		age          time.Duration
		wantIncrease []int
	}{
		{name: "registered a minute ago: the pod waits for it", age: time.Minute},
		{name: "registered past the startup time: a node for the pod", age: nodefacts.MaxStartupTime, wantIncrease: []int{1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateNode()}
			nodes, slices := gpuNodes(gpu, 2)
			busy, busyClaim := busyGPUs("busy", nodes[0])
			nodes[1].CreationTimestamp = metav1.NewTime(st.Now.Add(-tt.age))
			objects := append(objects(nodes, busy), slices[0], busyClaim,
				st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2),
				st.Pod("train-0", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaimTemplate("gpus", "two-gpus")))
			f := newFixture(t, []*fakeGroup{gpu}, objects...)

			status := f.runPastUnneededTime(context.Background(), t)

			g.Expect(gpu.increases).To(Equal(tt.wantIncrease))
			if tt.wantIncrease == nil {
				g.Expect(groupRow(status, gpu.id).Upcoming).To(Equal(1), "the node waiting for its devices")
				g.Expect(gpu.deletedNodes).To(BeEmpty(), "the node waiting for its devices is not removed as empty")
				g.Expect(status.Explanation.Nodes).To(ContainElement(And(HaveField("Name", nodes[1].Name), HaveField("Kept", scaledown.Decision{
					Reason: scaledown.ReasonNotStarted, Message: "node has not started yet: its DRA driver gpu.example.com has not published its devices yet",
				}))))
			}
		})
	}
}

// A group that just grew from zero has no node whose drivers published:
// its template's devices (the dra-driver and gpu-count annotations) say
// what its young Ready node waits for. The pod waits for that node, and
// the node, empty, is not removed meanwhile.
func TestNodeOfAGroupAtZeroWaitsForTheDevicesOfItsTemplate(t *testing.T) {
	for _, tt := range []struct {
		name     string
		devices  string
		wantWait bool
	}{
		{name: "the template describes devices", devices: st.GPUDriver + "=2", wantWait: true},
		{name: "the template describes none", devices: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateWithDevices(tt.devices)}
			nodes := gpu.addNodes(1)
			nodes[0].CreationTimestamp = metav1.NewTime(st.Now.Add(-time.Minute))
			objects := append(objects(nodes), st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2),
				st.Pod("train-0", "1", "1Gi", st.OwnedBy("train"), st.WithResourceClaimTemplate("gpus", "two-gpus")))
			f := newFixture(t, []*fakeGroup{gpu}, objects...)

			status := f.runPastUnneededTime(context.Background(), t)

			g.Expect(gpu.increases).To(BeEmpty())
			if tt.wantWait {
				g.Expect(status.Explanation.PendingPods).To(ConsistOf(And(HaveField("Outcome", autoscaler.WaitForNode), HaveField("Node", nodes[0].Name))))
				g.Expect(gpu.deletedNodes).To(BeEmpty(), "the node waiting for its devices is not removed as empty")
			} else {
				g.Expect(status.Explanation.PendingPods).To(ConsistOf(HaveField("Outcome", autoscaler.NotTriggerScaleUp)))
			}
		})
	}
}

// The pods of a capacity buffer have the claims of its pod template: the
// DRA objects are read for them too, and they grow the group with the
// devices.
func TestBufferPodsWithClaimsGrowTheGroupWhoseNodesHaveTheDevices(t *testing.T) {
	g := NewWithT(t)
	gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateNode()}
	cpu := &fakeGroup{id: "MachineDeployment/default/cpu", max: 10, template: templateNode()}
	// No pod of the cluster has claims: only the buffer's pods do.
	nodes, slices := gpuNodes(gpu, 1)
	objects := append(objects(nodes), slices...)
	objects = append(objects, st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2))
	buffer := bufferOf(2)
	buffer.Template.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To("two-gpus")}}
	f := newFixture(t, []*fakeGroup{gpu, cpu}, objects...).withBuffers(t, &staticBuffers{list: []buffers.Buffer{buffer}})
	config := autoscaler.DefaultConfig()
	config.Expanders = []string{scaleup.ExpanderPriority}
	config.ExpanderPriorities = map[int32][]string{10: {"MachineDeployment/default/cpu"}, 1: {"MachineDeployment/default/gpu"}}
	f.apply(t, config)

	f.runOnce(t)

	g.Expect(cpu.increases).To(BeEmpty())
	g.Expect(gpu.increases).To(Equal([]int{1}), "one pod on the node, whose 2 GPUs are free, one on a new node")
}

// A group at zero whose template node describes DRA devices
// (snapshot.TemplateDevicesAnnotation, which the template package sets from
// the dra-driver and gpu-count annotations) has a template with a
// ResourceSlice of them: pods with claims for its devices scale it from
// zero, as long as their classes select only what the description says.
func TestGroupAtZeroWithTemplateDevicesScalesUpForPodsWithClaims(t *testing.T) {
	for _, tt := range []struct {
		name string
		// devices is the template node's annotation; none when empty.
		devices string
		// selectors are the CEL selectors of the device class beside its
		// driver.
		selectors []string
		want      []int
	}{
		{name: "two devices a node, two a pod: a node a pod", devices: "gpu.example.com=2", want: []int{2}},
		{name: "the class selects the type the template's devices have", devices: "gpu.example.com=2",
			selectors: []string{`device.attributes["gpu.example.com"].type == "gpu"`}, want: []int{2}},
		{name: "four devices a node: both pods on one node", devices: "gpu.example.com=4", want: []int{1}},
		{name: "one device a node is not enough for a pod", devices: "gpu.example.com=1"},
		{name: "the class selects an attribute the template does not know", devices: "gpu.example.com=2",
			selectors: []string{`device.attributes["gpu.example.com"].model == "a100"`}},
		{name: "another driver's devices", devices: "other.example.com=2"},
		{name: "no devices described"},
		{name: "a description that is not a count of devices", devices: "gpu.example.com=0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: templateWithDevices(tt.devices)}
			cpu := &fakeGroup{id: "MachineDeployment/default/cpu", max: 10, template: templateNode()}
			objects := []client.Object{st.DeviceClass("gpu", st.GPUDriver, tt.selectors...), st.ResourceClaimTemplate("two-gpus", "gpu", 2)}
			for _, pod := range st.Replicas("train", 2, "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus")) {
				objects = append(objects, pod)
			}
			f := newFixture(t, []*fakeGroup{gpu, cpu}, objects...)
			config := autoscaler.DefaultConfig()
			config.Expanders = []string{scaleup.ExpanderPriority}
			config.ExpanderPriorities = map[int32][]string{10: {cpu.id}, 1: {gpu.id}}
			f.apply(t, config)

			f.runOnce(t)

			g.Expect(cpu.increases).To(BeEmpty(), "the CPU group's template has no devices")
			g.Expect(gpu.increases).To(Equal(tt.want))
		})
	}
}

// The cluster-wide limit of a DRA driver's devices (resourceLimits.gpus
// with the driver's name as its type) counts the devices of every node and
// of the new nodes' template, whether copied from a node of the group or
// described at zero: pods with claims that would need 4 new nodes of 2
// devices get the 2 the limit allows, and the others say why.
func TestTheGPULimitOfADRADriverCountsItsDevices(t *testing.T) {
	for _, tt := range []struct {
		name string
		// atZero builds the group's template from the template devices
		// annotation; otherwise the group has a node of 2 devices, whose
		// pod holds them.
		atZero bool
		max    int64
		// wantCurrent is the devices of the cluster's nodes.
		wantCurrent int
	}{
		{name: "a template copied from a node of the group", max: 6, wantCurrent: 2},
		{name: "a template at zero", atZero: true, max: 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			template := templateNode()
			if tt.atZero {
				template = templateWithDevices(st.GPUDriver + "=2")
			}
			gpu := &fakeGroup{id: "MachineDeployment/default/gpu", max: 10, template: template}
			cluster := []client.Object{st.DeviceClass("gpu", st.GPUDriver), st.ResourceClaimTemplate("two-gpus", "gpu", 2)}
			if !tt.atZero {
				nodes, slices := gpuNodes(gpu, 1)
				busy, busyClaim := busyGPUs("busy", nodes[0])
				cluster = append(append(cluster, objects(nodes, busy)...), slices...)
				cluster = append(cluster, busyClaim)
			}
			for _, pod := range st.Replicas("train", 4, "1", "1Gi", st.WithResourceClaimTemplate("gpus", "two-gpus")) {
				cluster = append(cluster, pod)
			}
			f := newFixture(t, []*fakeGroup{gpu}, cluster...)
			config := autoscaler.DefaultConfig()
			config.Limits.GPUs = map[corev1.ResourceName]autoscaler.Range{st.GPUDriver: {Max: tt.max}}
			f.apply(t, config)

			status := f.runOnce(t)

			g.Expect(gpu.increases).To(Equal([]int{2}), "2 devices a node, 2 a pod: the limit leaves room for 2 nodes")
			g.Expect(status.NotTriggerScaleUpReasons).To(ConsistOf(And(
				HaveField("Reason", ContainSubstring("max cluster gpu.example.com limit reached")), HaveField("Pods", 2))))
			g.Expect(status.Capacity.Scalar[st.GPUDriver]).To(BeEquivalentTo(tt.wantCurrent))
			f.expectMetrics(t, fmt.Sprintf(`
# HELP cluster_autoscaler_cluster_gpu_current_count Number of GPUs of the cluster's nodes, by resource, for the GPU types of resourceLimits.gpus: an extended resource counts the nodes' capacity, a DRA driver the devices it publishes on them.
# TYPE cluster_autoscaler_cluster_gpu_current_count gauge
cluster_autoscaler_cluster_gpu_current_count{cluster="default/workload",gpu_resource_name="gpu.example.com"} %d
`, tt.wantCurrent), "cluster_autoscaler_cluster_gpu_current_count")
		})
	}
}
