package scalable

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

const testID = "MachineDeployment/default/md-0"

func TestSizeBounds(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		wantMin     int
		wantMax     int
		// wantErr is the annotation the error must blame, empty for no error.
		wantErr string
	}{
		{name: "both set", annotations: map[string]string{MinSizeAnnotation: "1", MaxSizeAnnotation: "5"}, wantMin: 1, wantMax: 5},
		{name: "min defaults to zero", annotations: map[string]string{MaxSizeAnnotation: "3"}, wantMin: 0, wantMax: 3},
		{name: "min equal to max", annotations: map[string]string{MinSizeAnnotation: "2", MaxSizeAnnotation: "2"}, wantMin: 2, wantMax: 2},
		{name: "max missing", annotations: map[string]string{MinSizeAnnotation: "1"}, wantErr: MaxSizeAnnotation},
		{name: "max not an integer", annotations: map[string]string{MaxSizeAnnotation: "five"}, wantErr: MaxSizeAnnotation},
		{name: "min not an integer", annotations: map[string]string{MinSizeAnnotation: "1.5", MaxSizeAnnotation: "5"}, wantErr: MinSizeAnnotation},
		{name: "min negative", annotations: map[string]string{MinSizeAnnotation: "-1", MaxSizeAnnotation: "5"}, wantErr: MinSizeAnnotation},
		{name: "max negative", annotations: map[string]string{MaxSizeAnnotation: "-2"}, wantErr: MaxSizeAnnotation},
		{name: "min greater than max", annotations: map[string]string{MinSizeAnnotation: "4", MaxSizeAnnotation: "3"}, wantErr: MinSizeAnnotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			minSize, maxSize, err := sizeBounds(testID, tt.annotations)
			if tt.wantErr != "" {
				expectAnnotationError(g, err, tt.wantErr)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(minSize).To(Equal(tt.wantMin))
			g.Expect(maxSize).To(Equal(tt.wantMax))
		})
	}
}

func TestGroupOptions(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        nodegroups.GroupOptions
		wantErr     string
		// wantReason, when set, is part of the error's reason.
		wantReason string
	}{
		{name: "none", annotations: map[string]string{}, want: nodegroups.GroupOptions{}},
		{
			name: "all",
			annotations: map[string]string{
				ScaleDownUtilizationThresholdAnnotation: "0.7",
				ScaleDownUnneededTimeAnnotation:         "5m",
				ScaleDownUnreadyTimeAnnotation:          "20m",
				MaxNodeProvisionTimeAnnotation:          "1h",
			},
			want: nodegroups.GroupOptions{
				ScaleDownUtilizationThreshold: ptr.To(0.7),
				ScaleDownUnneededTime:         ptr.To(5 * time.Minute),
				ScaleDownUnreadyTime:          ptr.To(20 * time.Minute),
				MaxNodeProvisionTime:          ptr.To(time.Hour),
			},
		},
		{name: "threshold not a number", annotations: map[string]string{ScaleDownUtilizationThresholdAnnotation: "half"}, wantErr: ScaleDownUtilizationThresholdAnnotation},
		{name: "threshold above one", annotations: map[string]string{ScaleDownUtilizationThresholdAnnotation: "1.5"}, wantErr: ScaleDownUtilizationThresholdAnnotation},
		{name: "duration without unit", annotations: map[string]string{ScaleDownUnneededTimeAnnotation: "600"}, wantErr: ScaleDownUnneededTimeAnnotation},
		{name: "negative duration", annotations: map[string]string{MaxNodeProvisionTimeAnnotation: "-5m"}, wantErr: MaxNodeProvisionTimeAnnotation},
		{
			name: "provision time under a minute", annotations: map[string]string{MaxNodeProvisionTimeAnnotation: "30s"},
			wantErr: MaxNodeProvisionTimeAnnotation, wantReason: "under the minimum of 1m0s",
		},
		{name: "provision time of a minute", annotations: map[string]string{MaxNodeProvisionTimeAnnotation: "1m"}, want: nodegroups.GroupOptions{MaxNodeProvisionTime: ptr.To(time.Minute)}},
		{name: "unready time garbage", annotations: map[string]string{ScaleDownUnreadyTimeAnnotation: "soon"}, wantErr: ScaleDownUnreadyTimeAnnotation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			options, err := groupOptions(testID, tt.annotations)
			if tt.wantErr != "" {
				expectAnnotationError(g, err, tt.wantErr)
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantReason)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(options).To(Equal(tt.want))
		})
	}
}

// expectAnnotationError checks that err blames the annotation on the object.
func expectAnnotationError(g Gomega, err error, annotation string) {
	var annotationErr *AnnotationError
	g.ExpectWithOffset(1, errors.As(err, &annotationErr)).To(BeTrue(), "want an *AnnotationError, got %v", err)
	g.ExpectWithOffset(1, annotationErr.ID).To(Equal(testID))
	g.ExpectWithOffset(1, annotationErr.Annotation).To(Equal(annotation))
	g.ExpectWithOffset(1, err.Error()).To(And(ContainSubstring(testID), ContainSubstring(annotation)))
}

func TestParseConsolidationBudget(t *testing.T) {
	tests := []struct {
		name  string
		value *string
		// want is the budget read, nil for none.
		want *intstr.IntOrString
		// wantReason, when set, is part of the error's reason.
		wantReason string
	}{
		{name: "no annotation"},
		{name: "a number of nodes", value: ptr.To("3"), want: ptr.To(intstr.FromInt32(3))},
		{name: "0 keeps consolidation away", value: ptr.To("0"), want: ptr.To(intstr.FromInt32(0))},
		{name: "a percentage", value: ptr.To("25%"), want: ptr.To(intstr.FromString("25%"))},
		{name: "100%", value: ptr.To("100%"), want: ptr.To(intstr.FromString("100%"))},
		{name: "0%", value: ptr.To("0%"), want: ptr.To(intstr.FromString("0%"))},
		{name: "empty", value: ptr.To(""), wantReason: "neither a number nor a percentage"},
		{name: "a word", value: ptr.To("two"), wantReason: "neither a number nor a percentage"},
		{name: "a fraction", value: ptr.To("1.5"), wantReason: "neither a number nor a percentage"},
		{name: "a negative number", value: ptr.To("-1"), wantReason: "from 0% to 100%"},
		{name: "over 100%", value: ptr.To("101%"), wantReason: "from 0% to 100%"},
		{name: "a negative percentage", value: ptr.To("-5%"), wantReason: "from 0% to 100%"},
		{name: "a number past int32, which would wrap around", value: ptr.To("4294967297"), wantReason: "neither a number nor a percentage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			annotations := map[string]string{MaxSizeAnnotation: "3"}
			if tt.value != nil {
				annotations[ConsolidationBudgetAnnotation] = *tt.value
			}
			budget, err := ParseConsolidationBudget(testID, annotations)
			if tt.wantReason != "" {
				expectAnnotationError(g, err, ConsolidationBudgetAnnotation)
				g.Expect(err.Error()).To(ContainSubstring(tt.wantReason))
				g.Expect(budget).To(BeNil())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(budget).To(Equal(tt.want))
		})
	}
}
