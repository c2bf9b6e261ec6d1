package scaleup

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// withinBudget splits the candidates into those a plan takes on and those
// left for a later loop, when there are more than
// Options.MaxPendingPodsPerLoop. The pods the last plan nominated always
// go, beyond the bound: they keep their places at little cost. The others
// go by priority, highest first, so that no pod waits behind one of lower
// priority, then the longest waiting first: since they were last planned
// for (State.LastPlanned), or since their creation. Pods just planned for
// go behind every pod that waited longer, so that each pod is planned for
// within a bounded number of loops.
func (s *ScaleUp) withinBudget(candidates []*corev1.Pod, state State) (planned, deferred []*corev1.Pod) {
	budget := s.opts.MaxPendingPodsPerLoop
	if budget == 0 || len(candidates) <= budget {
		return candidates, nil
	}
	nominated := sets.New[types.UID]()
	for _, nomination := range state.Nominations {
		nominated.Insert(nomination.Pod)
	}
	var others []*corev1.Pod
	for _, pod := range candidates {
		if nominated.Has(pod.UID) {
			planned = append(planned, pod)
		} else {
			others = append(others, pod)
		}
	}
	if len(others) <= budget {
		return candidates, nil
	}
	waitingSince := func(pod *corev1.Pod) time.Time {
		if at, ok := state.LastPlanned[pod.UID]; ok {
			return at
		}
		return pod.CreationTimestamp.Time
	}
	slices.SortFunc(others, func(a, b *corev1.Pod) int {
		return cmp.Or(
			cmp.Compare(corev1helpers.PodPriority(b), corev1helpers.PodPriority(a)),
			waitingSince(a).Compare(waitingSince(b)),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Name, b.Name))
	})
	return append(planned, others[:budget]...), others[budget:]
}

// lastPlanned is when each pod still pending was last planned for, after a
// plan for planned that deferred deferred at now: planned now, or, for the
// pods deferred, as before.
func lastPlanned(planned, deferred []*corev1.Pod, before map[types.UID]time.Time, now time.Time) map[types.UID]time.Time {
	after := make(map[types.UID]time.Time, len(planned)+len(deferred))
	for _, pod := range planned {
		after[pod.UID] = now
	}
	for _, pod := range deferred {
		if at, ok := before[pod.UID]; ok {
			after[pod.UID] = at
		}
	}
	return after
}
