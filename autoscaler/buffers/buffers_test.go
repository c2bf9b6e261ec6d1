package buffers

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

func TestReplicasOfCountsAsTheUpstreamAutoscalerDoes(t *testing.T) {
	template := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
		}},
	}}}}
	limits := func(cpu, memory string) corev1.ResourceList {
		list := corev1.ResourceList{}
		if cpu != "" {
			list[corev1.ResourceCPU] = resource.MustParse(cpu)
		}
		if memory != "" {
			list[corev1.ResourceMemory] = resource.MustParse(memory)
		}
		return list
	}
	tests := []struct {
		name    string
		size    Size
		want    int32
		wantErr string
	}{
		{name: "a number of pods", size: Size{Replicas: ptr.To[int32](3)}, want: 3},
		{name: "a negative number is none", size: Size{Replicas: ptr.To[int32](-1)}, want: 0},
		{name: "a percentage of a workload, rounded up", size: Size{Percentage: ptr.To[int32](25), WorkloadReplicas: ptr.To[int32](10)}, want: 3},
		{name: "a small percentage of a small workload is one pod", size: Size{Percentage: ptr.To[int32](1), WorkloadReplicas: ptr.To[int32](3)}, want: 1},
		{name: "a percentage of a workload at zero is none", size: Size{Percentage: ptr.To[int32](50), WorkloadReplicas: ptr.To[int32](0)}, want: 0},
		{name: "the larger of a number and a percentage", size: Size{Replicas: ptr.To[int32](1), Percentage: ptr.To[int32](50), WorkloadReplicas: ptr.To[int32](10)}, want: 5},
		{name: "limits alone: what fits within every resource named", size: Size{Limits: limits("2", "3Gi")}, want: 3},
		{name: "limits cap a number", size: Size{Replicas: ptr.To[int32](10), Limits: limits("1", "")}, want: 2},
		{name: "a percentage whose workload is unknown, with limits", size: Size{Percentage: ptr.To[int32](50), Limits: limits("", "2Gi")}, want: 2},
		{name: "nothing set", size: Size{}, wantErr: "sets none of replicas"},
		{name: "a percentage whose workload is unknown, alone", size: Size{Percentage: ptr.To[int32](50)}, wantErr: "sets none of replicas"},
		{name: "limits of a resource the pods do not request", size: Size{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}},
			wantErr: "limits name none of the resources its pods request ([cpu memory])"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := tt.size.ReplicasOf(template)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

func TestBufferPodsArePendingAtTheCutoffWithStableUIDs(t *testing.T) {
	g := NewWithT(t)
	buffer := Buffer{Namespace: "apps", Name: "warm", UID: "b-uid", Replicas: 2, Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{PriorityClassName: "high", NodeName: "somewhere", Containers: []corev1.Container{{Name: "app"}}},
	}}

	pods := Pods([]Buffer{buffer}, -10)

	g.Expect(pods).To(HaveLen(2))
	g.Expect([]string{string(pods[0].UID), string(pods[1].UID)}).To(Equal([]string{"b-uid-0", "b-uid-1"}))
	for _, pod := range pods {
		g.Expect(IsBufferPod(pod)).To(BeTrue())
		g.Expect(pod.Namespace).To(Equal("apps"))
		g.Expect(pod.Spec.NodeName).To(BeEmpty())
		g.Expect(*pod.Spec.Priority).To(Equal(int32(-10)))
		g.Expect(pod.Spec.PriorityClassName).To(BeEmpty())
		g.Expect(pod.Annotations).To(HaveKeyWithValue(safeToEvictAnnotation, "true"))
	}
	g.Expect(buffer.Template.Spec.NodeName).To(Equal("somewhere"), "the template is left as it was")
}
