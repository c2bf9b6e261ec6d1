package template

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// fakeSource is a node group's resource reduced to what templates read.
type fakeSource struct {
	annotations map[string]string
	template    clusterv1.MachineTemplateSpec
	namespace   string
}

func (s *fakeSource) ID() string { return "MachineDeployment/" + s.namespace + "/md-0" }

const testID = "MachineDeployment/default/md-0"

func (s *fakeSource) Namespace() string                              { return s.namespace }
func (s *fakeSource) MachineTemplate() clusterv1.MachineTemplateSpec { return s.template }

func TestParseHints(t *testing.T) {
	g := NewWithT(t)
	hints, err := ParseHints(testID, map[string]string{
		CPUAnnotation:       "4",
		LabelsAnnotation:    "pool=gpu",
		TaintsAnnotation:    "dedicated=gpu:NoSchedule",
		CSIDriverAnnotation: "ebs.csi.aws.com=25",
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(hints.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, BeComparableTo(resource.MustParse("4"))))
	g.Expect(hints.Labels).To(Equal(map[string]string{"pool": "gpu"}))
	g.Expect(hints.Taints).To(Equal([]corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}))
	g.Expect(hints.AttachLimits).To(Equal(snapshot.AttachLimits{"ebs.csi.aws.com": 25}))

	for _, annotation := range []string{CPUAnnotation, LabelsAnnotation, TaintsAnnotation, CSIDriverAnnotation} {
		_, err := ParseHints(testID, map[string]string{annotation: "abc"})
		expectAnnotationError(g, err, annotation)
	}
}

func TestCapacityFromAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        corev1.ResourceList
		wantErr     string
	}{
		{name: "none", annotations: nil, want: corev1.ResourceList{}},
		{
			name: "all quantities",
			annotations: map[string]string{
				CPUAnnotation: "4", MemoryAnnotation: "16Gi", EphemeralDiskAnnotation: "100Gi", MaxPodsAnnotation: "58",
			},
			want: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("4"),
				corev1.ResourceMemory:           resource.MustParse("16Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("100Gi"),
				corev1.ResourcePods:             resource.MustParse("58"),
			},
		},
		{
			name:        "gpus default to nvidia",
			annotations: map[string]string{GPUCountAnnotation: "2"},
			want:        corev1.ResourceList{DefaultGPUResource: resource.MustParse("2")},
		},
		{
			name:        "gpus of a given type",
			annotations: map[string]string{GPUCountAnnotation: "1", GPUTypeAnnotation: "amd.com/gpu"},
			want:        corev1.ResourceList{"amd.com/gpu": resource.MustParse("1")},
		},
		{name: "cpu not a quantity", annotations: map[string]string{CPUAnnotation: "four"}, wantErr: CPUAnnotation},
		{name: "memory negative", annotations: map[string]string{MemoryAnnotation: "-1Gi"}, wantErr: MemoryAnnotation},
		{name: "gpu type not a resource name", annotations: map[string]string{GPUCountAnnotation: "1", GPUTypeAnnotation: "a b"}, wantErr: GPUTypeAnnotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			capacity, err := capacityFromAnnotations(testID, tt.annotations)
			if tt.wantErr != "" {
				expectAnnotationError(g, err, tt.wantErr)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(capacity).To(HaveLen(len(tt.want)))
			for name, quantity := range tt.want {
				g.Expect(capacity).To(HaveKeyWithValue(name, BeComparableTo(quantity)))
			}
		})
	}
}

func TestLabelsFromAnnotation(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    map[string]string
		wantErr bool
	}{
		{name: "empty", value: "", want: nil},
		{name: "pairs", value: "a=b, example.com/c=d", want: map[string]string{"a": "b", "example.com/c": "d"}},
		{name: "empty value", value: "a=", want: map[string]string{"a": ""}},
		{name: "missing =", value: "a=b,c", wantErr: true},
		{name: "invalid key", value: "-a=b", wantErr: true},
		{name: "invalid value", value: "a=b c", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			labels, err := labelsFromAnnotation(testID, map[string]string{LabelsAnnotation: tt.value})
			if tt.wantErr {
				expectAnnotationError(g, err, LabelsAnnotation)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(labels).To(Equal(tt.want))
		})
	}
}

func TestTaintsFromAnnotation(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []corev1.Taint
		wantErr bool
	}{
		{name: "empty", value: "", want: nil},
		{
			name:  "with and without value",
			value: "dedicated=gpu:NoSchedule,example.com/spot:PreferNoSchedule",
			want: []corev1.Taint{
				{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule},
				{Key: "example.com/spot", Effect: corev1.TaintEffectPreferNoSchedule},
			},
		},
		{name: "missing effect", value: "dedicated=gpu", wantErr: true},
		{name: "unknown effect", value: "dedicated=gpu:Sometimes", wantErr: true},
		{name: "invalid key", value: "=gpu:NoSchedule", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			taints, err := taintsFromAnnotation(testID, map[string]string{TaintsAnnotation: tt.value})
			if tt.wantErr {
				expectAnnotationError(g, err, TaintsAnnotation)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(taints).To(Equal(tt.want))
		})
	}
}

// expectAnnotationError checks that err blames the annotation on the test's object.
func expectAnnotationError(g Gomega, err error, annotation string) {
	var annotationErr *scalable.AnnotationError
	g.ExpectWithOffset(1, errors.As(err, &annotationErr)).To(BeTrue(), "want an *AnnotationError, got %v", err)
	g.ExpectWithOffset(1, annotationErr.Annotation).To(Equal(annotation))
	g.ExpectWithOffset(1, annotationErr.ID).To(Equal(testID))
}

func TestDevicesFromAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        snapshot.TemplateDevices
		// wantCapacity is the capacity the gpu annotations give.
		wantCapacity corev1.ResourceList
		wantErr      string
	}{
		{name: "none", annotations: nil, wantCapacity: corev1.ResourceList{}},
		{
			name:         "gpus as an extended resource without a driver",
			annotations:  map[string]string{GPUCountAnnotation: "2"},
			wantCapacity: corev1.ResourceList{DefaultGPUResource: resource.MustParse("2")},
		},
		{
			name:         "gpus as devices of a driver, not as an extended resource",
			annotations:  map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "2"},
			want:         snapshot.TemplateDevices{Driver: "gpu.nvidia.com", Count: 2},
			wantCapacity: corev1.ResourceList{},
		},
		{
			name:         "a gpu type names an extended resource beside the devices, as upstream",
			annotations:  map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "2", GPUTypeAnnotation: "nvidia.com/gpu"},
			want:         snapshot.TemplateDevices{Driver: "gpu.nvidia.com", Count: 2},
			wantCapacity: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
		},
		{name: "an empty driver is none", annotations: map[string]string{DRADriverAnnotation: " "}, wantCapacity: corev1.ResourceList{}},
		{name: "driver without a count", annotations: map[string]string{DRADriverAnnotation: "gpu.nvidia.com"}, wantErr: DRADriverAnnotation},
		{name: "zero devices", annotations: map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "0"}, wantErr: DRADriverAnnotation},
		{name: "more devices than a slice holds", annotations: map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "129"}, wantErr: DRADriverAnnotation},
		{name: "count not a whole number", annotations: map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "1500m"}, wantErr: GPUCountAnnotation},
		{name: "count not a quantity", annotations: map[string]string{DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "two"}, wantErr: GPUCountAnnotation},
		{name: "driver not a DNS subdomain", annotations: map[string]string{DRADriverAnnotation: "GPU_driver", GPUCountAnnotation: "2"}, wantErr: DRADriverAnnotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			hints, err := ParseHints(testID, tt.annotations)
			if tt.wantErr != "" {
				expectAnnotationError(g, err, tt.wantErr)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(hints.Devices).To(Equal(tt.want))
			g.Expect(hints.Capacity).To(HaveLen(len(tt.wantCapacity)))
			for name, quantity := range tt.wantCapacity {
				g.Expect(hints.Capacity).To(HaveKeyWithValue(name, BeComparableTo(quantity)))
			}
		})
	}
}

// The template node carries the devices for the engine, in the form it
// reads (snapshot.ParseTemplateDevices).
func TestFromZeroCarriesTheDevicesOnTheTemplateNode(t *testing.T) {
	g := NewWithT(t)
	hints, err := ParseHints(testID, map[string]string{
		CPUAnnotation: "8", MemoryAnnotation: "32Gi", DRADriverAnnotation: "gpu.nvidia.com", GPUCountAnnotation: "4",
	})
	g.Expect(err).NotTo(HaveOccurred())
	// No infrastructure template is referenced: nothing is read.
	node, err := FromZero(context.Background(), nil, &fakeSource{namespace: "default"}, hints)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Annotations).To(HaveKeyWithValue(snapshot.TemplateDevicesAnnotation, "gpu.nvidia.com=4"))
	devices, err := snapshot.ParseTemplateDevices(node.Annotations[snapshot.TemplateDevicesAnnotation])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(devices).To(Equal(hints.Devices))

	hints.Devices = snapshot.TemplateDevices{}
	node, err = FromZero(context.Background(), nil, &fakeSource{namespace: "default"}, hints)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Annotations).NotTo(HaveKey(snapshot.TemplateDevicesAnnotation))
}
