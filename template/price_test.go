package template_test

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

func TestParsePrice(t *testing.T) {
	const id = "MachineDeployment/default/md-0"
	tests := []struct {
		name        string
		annotations map[string]string
		want        *pricing.Price
		wantErr     string
	}{
		{name: "no annotation", annotations: map[string]string{"other": "1"}},
		{name: "a decimal", annotations: map[string]string{template.PriceAnnotation: "0.192"}, want: ptr.To[pricing.Price](192_000)},
		{name: "a whole number", annotations: map[string]string{template.PriceAnnotation: "2"}, want: ptr.To[pricing.Price](2_000_000)},
		{name: "negative", annotations: map[string]string{template.PriceAnnotation: "-0.1"}, wantErr: `"-0.1": not a decimal price`},
		{name: "NaN", annotations: map[string]string{template.PriceAnnotation: "NaN"}, wantErr: `"NaN": not a decimal price`},
		{name: "with a currency", annotations: map[string]string{template.PriceAnnotation: "$0.19"}, wantErr: `"$0.19": not a decimal price`},
		{name: "empty", annotations: map[string]string{template.PriceAnnotation: ""}, wantErr: "not a decimal price"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			price, err := template.ParsePrice(id, tt.annotations)
			if tt.wantErr != "" {
				var annotationErr *scalable.AnnotationError
				g.Expect(err).To(BeAssignableToTypeOf(annotationErr))
				g.Expect(err).To(MatchError(And(ContainSubstring(id), ContainSubstring(template.PriceAnnotation), ContainSubstring(tt.wantErr))))
				g.Expect(price).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(price).To(Equal(tt.want))
		})
	}
}
