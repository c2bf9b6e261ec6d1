package scaleup

import (
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

// similarCandidates returns lead and the candidates similar to it: the
// groups a scale-up led by lead may also grow, to balance them, or to take
// the pods lead cannot, such as the other zones of a zone spread.
func similarCandidates(lead *candidate, all []*candidate, ignoredLabels sets.Set[string]) []*candidate {
	similar := []*candidate{lead}
	for _, other := range all {
		if other != lead && similarTemplates(lead.template, other.template, ignoredLabels) {
			similar = append(similar, other)
		}
	}
	return similar
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
