package buffers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestLimitByQuotas(t *testing.T) {
	created := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	buffer := func(name string, age time.Duration, replicas int32, mutate func(*corev1.PodSpec)) Buffer {
		spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
		}}}}
		if mutate != nil {
			mutate(&spec)
		}
		return Buffer{Namespace: "team", Name: name, CreationTimestamp: metav1.NewTime(created.Add(-age)), Replicas: replicas, Template: corev1.PodTemplateSpec{Spec: spec}}
	}
	quota := func(name string, hard, used corev1.ResourceList, mutate func(*corev1.ResourceQuotaSpec)) corev1.ResourceQuota {
		q := corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}, Status: corev1.ResourceQuotaStatus{Hard: hard, Used: used}}
		if mutate != nil {
			mutate(&q.Spec)
		}
		return q
	}
	cpu := func(hard, used string) (corev1.ResourceList, corev1.ResourceList) {
		return corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse(hard)}, corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse(used)}
	}
	limitsOnly := func(spec *corev1.PodSpec) {
		spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	}

	for _, tc := range []struct {
		name    string
		buffers []Buffer
		quotas  []corev1.ResourceQuota
		want    map[string]QuotaLimit
	}{{
		name:    "without quotas, every replica",
		buffers: []Buffer{buffer("a", 0, 3, nil)},
		want:    map[string]QuotaLimit{"team/a": {Wanted: 3, Allowed: 3, Counted: true}},
	}, {
		name:    "a quota leaves room for what is not used yet",
		buffers: []Buffer{buffer("a", 0, 5, nil)},
		quotas:  []corev1.ResourceQuota{func() corev1.ResourceQuota { hard, used := cpu("4", "1500m"); return quota("cpu", hard, used, nil) }()},
		want:    map[string]QuotaLimit{"team/a": {Wanted: 5, Allowed: 2, Limiting: []string{"cpu"}, Counted: true}},
	}, {
		name:    "the oldest buffer is served first, and the quota with the least room limits",
		buffers: []Buffer{buffer("young", time.Minute, 3, nil), buffer("old", time.Hour, 3, nil)},
		quotas: []corev1.ResourceQuota{
			func() corev1.ResourceQuota { hard, used := cpu("10", "6"); return quota("cpu", hard, used, nil) }(),
			quota("memory", corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("100Gi")}, nil, nil),
		},
		want: map[string]QuotaLimit{
			"team/old":   {Wanted: 3, Allowed: 3, Counted: true},
			"team/young": {Wanted: 3, Allowed: 1, Limiting: []string{"cpu"}, Counted: true},
		},
	}, {
		name:    "a quota used up leaves nothing",
		buffers: []Buffer{buffer("a", 0, 2, nil)},
		quotas:  []corev1.ResourceQuota{func() corev1.ResourceQuota { hard, used := cpu("4", "5"); return quota("cpu", hard, used, nil) }()},
		want:    map[string]QuotaLimit{"team/a": {Wanted: 2, Allowed: 0, Limiting: []string{"cpu"}, Counted: true}},
	}, {
		name:    "limits alone are requested, as admission defaults them",
		buffers: []Buffer{buffer("a", 0, 4, limitsOnly)},
		quotas:  []corev1.ResourceQuota{func() corev1.ResourceQuota { hard, used := cpu("5", "0"); return quota("cpu", hard, used, nil) }()},
		want:    map[string]QuotaLimit{"team/a": {Wanted: 4, Allowed: 2, Limiting: []string{"cpu"}, Counted: true}},
	}, {
		name:    "a quota whose scope the pods do not match does not count them",
		buffers: []Buffer{buffer("a", 0, 4, nil)},
		quotas: []corev1.ResourceQuota{
			func() corev1.ResourceQuota {
				hard, used := cpu("1", "0")
				return quota("best-effort", hard, used, func(s *corev1.ResourceQuotaSpec) {
					s.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeBestEffort}
				})
			}(),
			func() corev1.ResourceQuota {
				hard, used := cpu("1", "0")
				return quota("terminating", hard, used, func(s *corev1.ResourceQuotaSpec) {
					s.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeTerminating}
				})
			}(),
			func() corev1.ResourceQuota {
				hard, used := cpu("1", "0")
				return quota("high-priority", hard, used, func(s *corev1.ResourceQuotaSpec) {
					s.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
						ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"},
					}}}
				})
			}(),
		},
		want: map[string]QuotaLimit{"team/a": {Wanted: 4, Allowed: 4, Counted: true}},
	}, {
		name:    "a priority class scope counts the pods of that class",
		buffers: []Buffer{buffer("a", 0, 4, func(s *corev1.PodSpec) { s.PriorityClassName = "high" })},
		quotas: []corev1.ResourceQuota{func() corev1.ResourceQuota {
			hard, used := cpu("3", "0")
			return quota("high-priority", hard, used, func(s *corev1.ResourceQuotaSpec) {
				s.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
					ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"},
				}}}
			})
		}()},
		want: map[string]QuotaLimit{"team/a": {Wanted: 4, Allowed: 3, Limiting: []string{"high-priority"}, Counted: true}},
	}, {
		name:    "pods that request nothing are not counted",
		buffers: []Buffer{buffer("a", 0, 4, func(s *corev1.PodSpec) { s.Containers[0].Resources = corev1.ResourceRequirements{} })},
		quotas:  []corev1.ResourceQuota{func() corev1.ResourceQuota { hard, used := cpu("0", "0"); return quota("cpu", hard, used, nil) }()},
		want:    map[string]QuotaLimit{"team/a": {Wanted: 4, Allowed: 4}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(LimitByQuotas(tc.buffers, tc.quotas)).To(Equal(tc.want))
		})
	}
}

func TestQuotaLimitMessage(t *testing.T) {
	g := NewWithT(t)
	g.Expect(QuotaLimit{Wanted: 5, Allowed: 2, Limiting: []string{"cpu", "memory"}, Counted: true}.Message()).To(
		Equal("Buffer replicas limited from 5 to 2 due to quotas: cpu, memory"))
	g.Expect(QuotaLimit{Wanted: 5, Allowed: 5, Counted: true}.Message()).To(BeEmpty())
}
