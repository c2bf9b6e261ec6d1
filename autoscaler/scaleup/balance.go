package scaleup

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// maxSimilarDifference is how far apart allocatable and free resources of
// similar node groups may be: they depend on system reservations and
// DaemonSets, which vary a little between otherwise identical machines.
const maxSimilarDifference = 0.05

// alwaysIgnoredLabels differ between similar groups by design.
var alwaysIgnoredLabels = []string{corev1.LabelHostname, corev1.LabelTopologyZone, corev1.LabelFailureDomainBetaZone}

// similarGroups returns the estimates of the groups similar to chosen that
// take every pod group chosen helps, chosen first.
func similarGroups(chosen *estimate, all []*estimate, ignoredLabels sets.Set[string]) []*estimate {
	similar := []*estimate{chosen}
	for _, other := range all {
		if other == chosen || !similarTemplates(chosen.template, other.template, ignoredLabels) {
			continue
		}
		if slices.ContainsFunc(chosen.podGroups, func(podGroup *simulator.PodGroup) bool { return !other.fits[podGroup] }) {
			continue
		}
		similar = append(similar, other)
	}
	return similar
}

// similarTemplates: same capacity, allocatable and free resources within
// 5%, same labels but the ignored ones.
func similarTemplates(a, b *snapshot.NodeInfo, ignoredLabels sets.Set[string]) bool {
	capacityA := snapshot.NewResources(a.Node().Status.Capacity)
	capacityB := snapshot.NewResources(b.Node().Status.Capacity)
	if !withinRatio(capacityA, capacityB, 0) || !withinRatio(a.Allocatable(), b.Allocatable(), maxSimilarDifference) {
		return false
	}
	freeA, freeB := a.Allocatable().Clone(), b.Allocatable().Clone()
	freeA.Sub(a.Requested())
	freeB.Sub(b.Requested())
	freeA.Pods, freeB.Pods = 0, 0
	if !withinRatio(freeA, freeB, maxSimilarDifference) {
		return false
	}
	return sameLabels(a.Node().Labels, b.Node().Labels, ignoredLabels)
}

func withinRatio(a, b snapshot.Resources, ratio float64) bool {
	names := sets.New(a.Names()...).Insert(b.Names()...)
	for name := range names {
		larger, smaller := a.Get(name), b.Get(name)
		if smaller > larger {
			larger, smaller = smaller, larger
		}
		if float64(larger-smaller) > float64(larger)*ratio {
			return false
		}
	}
	return true
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

// balancedIncrease is one group's part of a balanced scale-up.
type balancedIncrease struct {
	estimate *estimate
	delta    int
}

// balance splits nodes over the groups so that their target sizes become
// as equal as possible: each node goes to the smallest group that is below
// its max size, ties to the one listed first.
func balance(groups []*estimate, nodes int) []balancedIncrease {
	sorted := slices.Clone(groups)
	slices.SortStableFunc(sorted, func(a, b *estimate) int {
		if d := a.group.TargetSize() - b.group.TargetSize(); d != 0 {
			return d
		}
		return strings.Compare(a.group.ID(), b.group.ID())
	})
	deltas := make([]int, len(sorted))
	for ; nodes > 0; nodes-- {
		smallest := -1
		for i, option := range sorted {
			size := option.group.TargetSize() + deltas[i]
			if size >= option.group.MaxSize() {
				continue
			}
			if smallest < 0 || size < sorted[smallest].group.TargetSize()+deltas[smallest] {
				smallest = i
			}
		}
		if smallest < 0 {
			break
		}
		deltas[smallest]++
	}
	var increases []balancedIncrease
	for i, option := range sorted {
		if deltas[i] > 0 {
			increases = append(increases, balancedIncrease{estimate: option, delta: deltas[i]})
		}
	}
	return increases
}
