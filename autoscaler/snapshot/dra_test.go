package snapshot_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func TestParseTemplateDevices(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    snapshot.TemplateDevices
		wantErr string
	}{
		{value: "gpu.nvidia.com=2", want: snapshot.TemplateDevices{Driver: "gpu.nvidia.com", Count: 2}},
		{value: "gpu.nvidia.com", wantErr: "not driver=count"},
		{value: "gpu.nvidia.com=two", wantErr: "not a count"},
		{value: "gpu.nvidia.com=0", wantErr: "between 1 and 128"},
		{value: "gpu.nvidia.com=129", wantErr: "between 1 and 128"},
		{value: "GPU=1", wantErr: "not a DNS subdomain"},
	} {
		t.Run(tt.value, func(t *testing.T) {
			g := NewWithT(t)
			devices, err := snapshot.ParseTemplateDevices(tt.value)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(devices).To(Equal(tt.want))
			g.Expect(devices.String()).To(Equal(tt.value))
		})
	}
}

// The slice of a template's devices is named as the upstream Cluster API
// provider names it: one pool named after the node, devices gpu-0...
func TestTemplateDevicesResourceSlices(t *testing.T) {
	g := NewWithT(t)
	g.Expect(snapshot.TemplateDevices{}.ResourceSlices("template-gpu")).To(BeEmpty())

	slices := snapshot.TemplateDevices{Driver: "gpu.nvidia.com", Count: 2}.ResourceSlices("template-gpu")
	g.Expect(slices).To(HaveLen(1))
	slice := slices[0]
	g.Expect(slice.Name).To(Equal("template-gpu-gpu.nvidia.com"))
	g.Expect(slice.Spec.Driver).To(Equal("gpu.nvidia.com"))
	g.Expect(snapshot.LocalSliceNode(slice)).To(Equal("template-gpu"))
	g.Expect(slice.Spec.Pool.Name).To(Equal("template-gpu"))
	g.Expect(slice.Spec.Pool.ResourceSliceCount).To(BeEquivalentTo(1))
	g.Expect(slice.Spec.Devices).To(HaveLen(2))
	for i, name := range []string{"gpu-0", "gpu-1"} {
		g.Expect(slice.Spec.Devices[i].Name).To(Equal(name))
		g.Expect(*slice.Spec.Devices[i].Attributes["type"].StringValue).To(Equal(snapshot.TemplateDeviceType))
	}
}

// inPool returns slice in another pool of its driver, of a generation.
func inPool(slice *resourceapi.ResourceSlice, name, pool string, generation int64) *resourceapi.ResourceSlice {
	slice = slice.DeepCopy()
	slice.Name, slice.Spec.Pool.Name, slice.Spec.Pool.Generation = name, pool, generation
	return slice
}

// What the cluster-wide limits count of a node: its capacity, and under
// each DRA driver's name the devices of its local slices, however the
// node got them: read with the cluster, copied for a template, or
// described by a template at zero.
func TestLimitCapacityCountsTheDevicesOfEachDriver(t *testing.T) {
	const gpu corev1.ResourceName = "nvidia.com/gpu"
	const driver = corev1.ResourceName(st.GPUDriver)
	node := st.Node("n", "4", "16Gi", st.WithAllocatable(gpu, "1"))
	for _, tt := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		want   map[corev1.ResourceName]int64
	}{
		{name: "no slices: the capacity", want: map[corev1.ResourceName]int64{gpu: 1}},
		{
			name:   "the devices of a driver beside the extended resource",
			slices: []*resourceapi.ResourceSlice{st.ResourceSlice("n", st.GPUDriver, st.GPUs(2, "a100")...)},
			want:   map[corev1.ResourceName]int64{gpu: 1, driver: 2},
		},
		{
			name: "several pools of a driver, and another driver",
			slices: []*resourceapi.ResourceSlice{
				st.ResourceSlice("n", st.GPUDriver, st.GPUs(2, "a100")...),
				inPool(st.ResourceSlice("n", st.GPUDriver, st.GPUs(3, "t4")...), "n-t4", "n-t4", 0),
				st.ResourceSlice("n", "nic.example.com", st.Device("nic-0", "x")),
			},
			want: map[corev1.ResourceName]int64{gpu: 1, driver: 5, "nic.example.com": 1},
		},
		{
			name: "a pool being replaced counts its newest generation",
			slices: []*resourceapi.ResourceSlice{
				inPool(st.ResourceSlice("n", st.GPUDriver, st.GPUs(4, "a100")...), "old", "n", 1),
				inPool(st.ResourceSlice("n", st.GPUDriver, st.GPUs(2, "a100")...), "new", "n", 2),
			},
			want: map[corev1.ResourceName]int64{gpu: 1, driver: 2},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var in snapshot.Input
			in.Nodes = []*corev1.Node{node}
			in.ResourceSlices = tt.slices
			read := snapshot.New(in).NodeInfo("n")
			g.Expect(read.LimitCapacity().Scalar).To(Equal(tt.want), "a node read with its slices")
			g.Expect(read.LimitCapacity().MilliCPU).To(Equal(read.Capacity().MilliCPU))
			g.Expect(read.LimitCapacity().Memory).To(Equal(read.Capacity().Memory))
			g.Expect(read.Capacity().Scalar).To(Equal(map[corev1.ResourceName]int64{gpu: 1}), "the capacity is the node's")

			template := snapshot.NewNodeInfo(st.Node("template", "4", "16Gi", st.WithAllocatable(gpu, "1"))).WithResourceSlices(read.ResourceSlices())
			g.Expect(template.LimitCapacity().Scalar).To(Equal(tt.want), "a template with copies of the slices")
			g.Expect(template.CopyAs("new-0").LimitCapacity().Scalar).To(Equal(tt.want), "a new node like the template")
		})
	}
}

func TestLimitCapacityOfATemplateAtZeroCountsItsDevices(t *testing.T) {
	g := NewWithT(t)
	devices := snapshot.TemplateDevices{Driver: "gpu.nvidia.com", Count: 4}
	template := snapshot.NewNodeInfo(st.Node("template", "8", "32Gi")).WithResourceSlices(devices.ResourceSlices("template"))
	g.Expect(template.LimitCapacity().Scalar).To(Equal(map[corev1.ResourceName]int64{"gpu.nvidia.com": 4}))
	g.Expect(template.Capacity().Scalar).To(BeEmpty())
}
