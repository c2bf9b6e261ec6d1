package snapshot_test

import (
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
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
