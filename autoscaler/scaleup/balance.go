package scaleup

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// maxSimilarDifference is how far apart allocatable and free resources of
// similar node groups may be: they depend on system reservations and
// DaemonSets, which vary a little between otherwise identical machines.
const maxSimilarDifference = 0.05

// alwaysIgnoredLabels differ between similar groups by design.
var alwaysIgnoredLabels = []string{corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone}

// linkSimilar gives every candidate the others similar to it, in the order
// of group IDs: the groups a scale-up it leads may also grow, to balance
// them, or to take the pods it cannot, such as the other zones of a zone
// spread. Templates do not change during a plan, so every round shares the
// links. Only candidates of the same similarityKey are compared: comparing
// every pair took most of a scale-up at a thousand groups.
func linkSimilar(all []*candidate, ignoredLabels sets.Set[string]) {
	byKey := map[string][]*candidate{}
	var keys []string
	for _, c := range all {
		key := similarityKey(c.template, ignoredLabels)
		if _, ok := byKey[key]; !ok {
			keys = append(keys, key)
		}
		byKey[key] = append(byKey[key], c)
	}
	for _, key := range keys {
		alike := byKey[key]
		for i, lead := range alike {
			for _, other := range alike[i+1:] {
				if similarTemplates(lead.template, other.template, ignoredLabels) {
					lead.similar = append(lead.similar, other)
					other.similar = append(other.similar, lead)
				}
			}
		}
	}
	for _, c := range all {
		slices.SortFunc(c.similar, func(a, b *candidate) int { return strings.Compare(a.group.ID(), b.group.ID()) })
	}
}

// similarityKey is what similar templates have in common exactly: the same
// capacity (an extended resource at zero as none) and the same labels but
// the ignored ones. Templates of different keys are never similar.
func similarityKey(template *snapshot.NodeInfo, ignoredLabels sets.Set[string]) string {
	capacity := template.Capacity()
	var b strings.Builder
	fmt.Fprintf(&b, "%d/%d/%d/%d", capacity.MilliCPU, capacity.Memory, capacity.EphemeralStorage, capacity.Pods)
	for _, name := range slices.Sorted(maps.Keys(capacity.Scalar)) {
		if value := capacity.Scalar[name]; value != 0 {
			fmt.Fprintf(&b, "\x00%s=%d", name, value)
		}
	}
	b.WriteString("\x01")
	labels := template.Node().Labels
	for _, key := range slices.Sorted(maps.Keys(labels)) {
		if !ignoredLabels.Has(key) {
			b.WriteString(key + "=" + labels[key] + "\x00")
		}
	}
	return b.String()
}

// members are lead and the similar candidates that may still grow.
func (lead *candidate) members() []*candidate {
	members := []*candidate{lead}
	for _, other := range lead.similar {
		if other.room() > 0 {
			members = append(members, other)
		}
	}
	return members
}

// membersKey identifies a set of candidates, whatever their order.
func membersKey(members []*candidate) string {
	ids := make([]string, 0, len(members))
	for _, member := range members {
		ids = append(ids, member.group.ID())
	}
	slices.Sort(ids)
	return strings.Join(ids, "\x00")
}

// similarTemplates: same capacity, allocatable and free resources within
// 5%, same labels but the ignored ones. It allocates nothing: a scale-up
// compares every pair of candidates, 250,000 pairs with 500 node groups.
func similarTemplates(a, b *snapshot.NodeInfo, ignoredLabels sets.Set[string]) bool {
	if !withinRatio(a.Capacity(), b.Capacity(), 0) || !withinRatio(a.Allocatable(), b.Allocatable(), maxSimilarDifference) ||
		!freeWithinRatio(a, b, maxSimilarDifference) {
		return false
	}
	return sameLabels(a.Node().Labels, b.Node().Labels, ignoredLabels)
}

// withinRatio tells whether every resource of a and b, pods included, is
// within ratio of the larger of the two.
func withinRatio(a, b snapshot.Resources, ratio float64) bool {
	if !amountsWithinRatio(a.MilliCPU, b.MilliCPU, ratio) || !amountsWithinRatio(a.Memory, b.Memory, ratio) ||
		!amountsWithinRatio(a.EphemeralStorage, b.EphemeralStorage, ratio) || !amountsWithinRatio(a.Pods, b.Pods, ratio) {
		return false
	}
	for name, value := range a.Scalar {
		if !amountsWithinRatio(value, b.Scalar[name], ratio) {
			return false
		}
	}
	for name, value := range b.Scalar {
		if _, ok := a.Scalar[name]; !ok && !amountsWithinRatio(0, value, ratio) {
			return false
		}
	}
	return true
}

// freeWithinRatio is withinRatio for the free resources (allocatable minus
// requested) of a and b, the pod count left out.
func freeWithinRatio(a, b *snapshot.NodeInfo, ratio float64) bool {
	allocA, allocB, reqA, reqB := a.Allocatable(), b.Allocatable(), a.Requested(), b.Requested()
	if !amountsWithinRatio(allocA.MilliCPU-reqA.MilliCPU, allocB.MilliCPU-reqB.MilliCPU, ratio) ||
		!amountsWithinRatio(allocA.Memory-reqA.Memory, allocB.Memory-reqB.Memory, ratio) ||
		!amountsWithinRatio(allocA.EphemeralStorage-reqA.EphemeralStorage, allocB.EphemeralStorage-reqB.EphemeralStorage, ratio) {
		return false
	}
	if len(allocA.Scalar)+len(allocB.Scalar)+len(reqA.Scalar)+len(reqB.Scalar) == 0 {
		return true
	}
	free := func(name corev1.ResourceName) bool {
		return amountsWithinRatio(allocA.Scalar[name]-reqA.Scalar[name], allocB.Scalar[name]-reqB.Scalar[name], ratio)
	}
	for _, scalars := range []map[corev1.ResourceName]int64{allocA.Scalar, reqA.Scalar, allocB.Scalar, reqB.Scalar} {
		for name := range scalars {
			if !free(name) {
				return false
			}
		}
	}
	return true
}

func amountsWithinRatio(larger, smaller int64, ratio float64) bool {
	if smaller > larger {
		larger, smaller = smaller, larger
	}
	return float64(larger-smaller) <= float64(larger)*ratio
}

func sameLabels(a, b map[string]string, ignored sets.Set[string]) bool {
	for key, value := range a {
		if other, ok := b[key]; !ignored.Has(key) && (!ok || other != value) {
			return false
		}
	}
	for key := range b {
		if _, ok := a[key]; !ignored.Has(key) && !ok {
			return false
		}
	}
	return true
}
