package scalable

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
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
