package buffers

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	resourcehelper "k8s.io/component-helpers/resource"
)

// QuotaLimit is what the ResourceQuotas of its namespace leave a buffer:
// the pods of a buffer are not created, but the room it holds is for pods
// that will be, and that a quota would refuse beyond its hard limits.
type QuotaLimit struct {
	// Wanted is the buffer's replicas before the quotas, Allowed after.
	Wanted, Allowed int32
	// Limiting names the quotas that cut Wanted, sorted.
	Limiting []string
	// Counted tells whether the quotas were applied: false for a buffer
	// whose pods request nothing, which quotas cannot refuse.
	Counted bool
}

// Limited tells whether the quotas cut the buffer's replicas.
func (l QuotaLimit) Limited() bool { return l.Allowed < l.Wanted }

// Message says what the quotas did, as upstream's LimitedByQuotas
// condition says it.
func (l QuotaLimit) Message() string {
	if !l.Limited() {
		return ""
	}
	return fmt.Sprintf("Buffer replicas limited from %d to %d due to quotas: %s", l.Wanted, l.Allowed, strings.Join(l.Limiting, ", "))
}

// LimitByQuotas limits the replicas of the buffers of one namespace by the
// room its ResourceQuotas have left (hard less used), as the upstream
// buffer controller does: the oldest buffer is served first, and each
// takes from every quota whose scopes its pods match what it keeps. The
// result is by buffer key; the buffers are not changed.
func LimitByQuotas(buffers []Buffer, quotas []corev1.ResourceQuota) map[string]QuotaLimit {
	ordered := slices.Clone(buffers)
	slices.SortStableFunc(ordered, func(a, b Buffer) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	taken := make([]corev1.ResourceList, len(quotas))
	limits := make(map[string]QuotaLimit, len(ordered))
	for i := range ordered {
		b := &ordered[i]
		limit := QuotaLimit{Wanted: b.Replicas, Allowed: b.Replicas}
		pod := quotaPod(b)
		requests := quotaRequests(pod)
		if len(requests) == 0 {
			limits[b.Key()] = limit
			continue
		}
		limit.Counted = true
		var matching []int
		for q := range quotas {
			if !matchesScopes(pod, &quotas[q]) {
				continue
			}
			matching = append(matching, q)
			if fit := replicasWithinQuota(&quotas[q], requests, taken[q]); fit < limit.Wanted {
				limit.Limiting = append(limit.Limiting, quotas[q].Name)
				limit.Allowed = min(limit.Allowed, fit)
			}
		}
		slices.Sort(limit.Limiting)
		for _, q := range matching {
			taken[q] = addRequests(taken[q], quotas[q].Status.Hard, requests, limit.Allowed)
		}
		limits[b.Key()] = limit
	}
	return limits
}

// quotaPod is a pod of the buffer as the API server would admit it for
// quota: containers that set limits alone request them.
func quotaPod(b *Buffer) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: b.Template.ObjectMeta, Spec: *b.Template.Spec.DeepCopy()}
	for _, containers := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range containers {
			r := &containers[i].Resources
			for name, quantity := range r.Limits {
				if _, ok := r.Requests[name]; !ok {
					if r.Requests == nil {
						r.Requests = corev1.ResourceList{}
					}
					r.Requests[name] = quantity
				}
			}
		}
	}
	return pod
}

// quotaRequests are what one pod counts against a quota: each resource it
// requests, under its own name and as requests.<name>.
func quotaRequests(pod *corev1.Pod) corev1.ResourceList {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out := make(corev1.ResourceList, 2*len(requests))
	for name, quantity := range requests {
		if quantity.IsZero() {
			continue
		}
		out[name] = quantity
		out[corev1.ResourceName(corev1.DefaultResourceRequestsPrefix+string(name))] = quantity
	}
	return out
}

// replicasWithinQuota is how many pods of requests fit in what the quota
// has left, less what the buffers before took.
func replicasWithinQuota(quota *corev1.ResourceQuota, requests, taken corev1.ResourceList) int32 {
	fit := int64(math.MaxInt32)
	for name, hard := range quota.Status.Hard {
		request, ok := requests[name]
		if !ok {
			continue
		}
		left := hard.DeepCopy()
		left.Sub(quota.Status.Used[name])
		left.Sub(taken[name])
		if left.Sign() <= 0 {
			return 0
		}
		fit = min(fit, left.MilliValue()/request.MilliValue())
	}
	return int32(fit)
}

// addRequests adds replicas pods of requests to taken, for the resources
// the quota limits.
func addRequests(taken, hard, requests corev1.ResourceList, replicas int32) corev1.ResourceList {
	if taken == nil {
		taken = corev1.ResourceList{}
	}
	for name, request := range requests {
		if _, ok := hard[name]; !ok {
			continue
		}
		sum, all := taken[name], request.DeepCopy()
		all.Mul(int64(replicas))
		sum.Add(all)
		taken[name] = sum
	}
	return taken
}

// matchesScopes tells whether the quota counts the pod: it matches each of
// the quota's scopes and scope selector requirements. The pods of a buffer
// do not terminate on their own (no activeDeadlineSeconds).
func matchesScopes(pod *corev1.Pod, quota *corev1.ResourceQuota) bool {
	requirements := make([]corev1.ScopedResourceSelectorRequirement, 0, len(quota.Spec.Scopes))
	for _, scope := range quota.Spec.Scopes {
		requirements = append(requirements, corev1.ScopedResourceSelectorRequirement{ScopeName: scope, Operator: corev1.ScopeSelectorOpExists})
	}
	if quota.Spec.ScopeSelector != nil {
		requirements = append(requirements, quota.Spec.ScopeSelector.MatchExpressions...)
	}
	for _, r := range requirements {
		if !matchesScope(pod, r) {
			return false
		}
	}
	return true
}

func matchesScope(pod *corev1.Pod, r corev1.ScopedResourceSelectorRequirement) bool {
	switch r.ScopeName {
	case corev1.ResourceQuotaScopeNotTerminating:
		return pod.Spec.ActiveDeadlineSeconds == nil
	case corev1.ResourceQuotaScopeTerminating:
		return pod.Spec.ActiveDeadlineSeconds != nil
	case corev1.ResourceQuotaScopeBestEffort:
		return bestEffort(pod)
	case corev1.ResourceQuotaScopeNotBestEffort:
		return !bestEffort(pod)
	case corev1.ResourceQuotaScopePriorityClass:
		return matchesPriorityClass(pod, r)
	case corev1.ResourceQuotaScopeCrossNamespacePodAffinity:
		return crossNamespaceAffinity(pod)
	}
	// A scope this version does not know: the quota is not taken to
	// count the pod, as upstream.
	return false
}

func bestEffort(pod *corev1.Pod) bool {
	requests := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	_, cpu := requests[corev1.ResourceCPU]
	_, memory := requests[corev1.ResourceMemory]
	return !cpu && !memory
}

func matchesPriorityClass(pod *corev1.Pod, r corev1.ScopedResourceSelectorRequirement) bool {
	if r.Operator == corev1.ScopeSelectorOpExists {
		return pod.Spec.PriorityClassName != ""
	}
	operators := map[corev1.ScopeSelectorOperator]selection.Operator{
		corev1.ScopeSelectorOpIn: selection.In, corev1.ScopeSelectorOpNotIn: selection.NotIn, corev1.ScopeSelectorOpDoesNotExist: selection.DoesNotExist,
	}
	operator, ok := operators[r.Operator]
	if !ok {
		return false
	}
	requirement, err := labels.NewRequirement(string(r.ScopeName), operator, r.Values)
	if err != nil {
		return false
	}
	var set labels.Set
	if pod.Spec.PriorityClassName != "" {
		set = labels.Set{string(r.ScopeName): pod.Spec.PriorityClassName}
	}
	return requirement.Matches(set)
}

func crossNamespaceAffinity(pod *corev1.Pod) bool {
	affinity := pod.Spec.Affinity
	if affinity == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if a := affinity.PodAffinity; a != nil {
		terms = append(terms, a.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if a := affinity.PodAntiAffinity; a != nil {
		terms = append(terms, a.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range a.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	return slices.ContainsFunc(terms, func(t corev1.PodAffinityTerm) bool { return len(t.Namespaces) > 0 || t.NamespaceSelector != nil })
}
