package pricing_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		value   string
		want    pricing.Price
		wantErr bool
	}{
		{value: "0.192", want: 192_000},
		{value: "3", want: 3_000_000},
		{value: "12.5", want: 12_500_000},
		{value: "0.000001", want: 1},
		{value: "0", want: 0},
		{value: "999999999.999999", want: 999_999_999_999_999},
		{value: "-0.1", wantErr: true},
		{value: "NaN", wantErr: true},
		{value: "Inf", wantErr: true},
		{value: "1e3", wantErr: true},
		{value: "0x1p-2", wantErr: true},
		{value: "$0.19", wantErr: true},
		{value: "0.19/h", wantErr: true},
		{value: "500m", wantErr: true},
		{value: ".5", wantErr: true},
		{value: "1.", wantErr: true},
		{value: "0.0000001", wantErr: true},
		{value: "1000000000", wantErr: true},
		{value: " 0.1", wantErr: true},
		{value: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			g := NewWithT(t)
			price, err := pricing.Parse(tt.value)
			if tt.wantErr {
				g.Expect(err).To(MatchError(ContainSubstring("not a decimal price")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(price).To(Equal(tt.want))
		})
	}
}

func TestPriceStringIsWhatParseReads(t *testing.T) {
	g := NewWithT(t)
	for _, value := range []string{"0.192", "3", "12.5", "0.000001", "0", "999999999.999999"} {
		price, err := pricing.Parse(value)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(price.String()).To(Equal(value))
	}
}

func node(instanceType string, capacity corev1.ResourceList) *corev1.Node {
	n := &corev1.Node{Status: corev1.NodeStatus{Capacity: capacity}}
	if instanceType != "" {
		n.Labels = map[string]string{corev1.LabelInstanceTypeStable: instanceType}
	}
	return n
}

func TestNodePrice(t *testing.T) {
	fourByEight := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")}
	gpuNode := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
		"nvidia.com/gpu": resource.MustParse("2")}
	table := pricing.Table{"m5.xlarge": 192_000}
	tests := []struct {
		name string
		own  *pricing.Price
		node *corev1.Node
		want pricing.Quote
	}{
		{
			name: "the group's own price beats the table",
			own:  ptr.To[pricing.Price](150_000),
			node: node("m5.xlarge", fourByEight),
			want: pricing.Quote{PerHour: 150_000, Source: pricing.SourceNodeGroup},
		},
		{
			name: "the table prices the node's instance type",
			node: node("m5.xlarge", fourByEight),
			want: pricing.Quote{PerHour: 192_000, Source: pricing.SourceInstanceType},
		},
		{
			name: "an instance type the table does not list gets the default for its capacity",
			node: node("m5.2xlarge", fourByEight),
			// 4 × 0.033174 + 8 × 0.004446
			want: pricing.Quote{PerHour: 4*pricing.DefaultPerCPU + 8*pricing.DefaultPerGiB, Source: pricing.SourceDefault},
		},
		{
			name: "a node without an instance type gets the default",
			node: node("", fourByEight),
			want: pricing.Quote{PerHour: 168_264, Source: pricing.SourceDefault},
		},
		{
			name: "without its node, a group's own price is known",
			own:  ptr.To[pricing.Price](150_000),
			want: pricing.Quote{PerHour: 150_000, Source: pricing.SourceNodeGroup},
		},
		{
			name: "without its node, no other price is",
			want: pricing.Quote{},
		},
		{
			name: "GPUs count in the default",
			node: node("", gpuNode),
			want: pricing.Quote{PerHour: 8*pricing.DefaultPerCPU + 32*pricing.DefaultPerGiB + 2*pricing.DefaultPerGPU, Source: pricing.SourceDefault},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			NewWithT(t).Expect(table.NodePrice(tt.own, tt.node)).To(Equal(tt.want))
		})
	}
}

func TestAtDefaultRatesIsProportionalToCapacity(t *testing.T) {
	g := NewWithT(t)
	small := pricing.Resources{MilliCPU: 2000, MemoryBytes: 4 << 30}
	large := pricing.Resources{MilliCPU: 8000, MemoryBytes: 16 << 30}
	g.Expect(large.AtDefaultRates()).To(Equal(4 * small.AtDefaultRates()))
	half := pricing.Resources{MilliCPU: 500, MemoryBytes: 512 << 20}
	g.Expect(half.AtDefaultRates()).To(Equal((pricing.DefaultPerCPU + pricing.DefaultPerGiB) / 2))
	petabyte := pricing.Resources{MemoryBytes: 1 << 50}
	g.Expect(petabyte.AtDefaultRates()).To(Equal(pricing.DefaultPerGiB<<20), "no overflow")
}
