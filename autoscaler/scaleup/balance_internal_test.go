package scaleup

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// TestLinkSimilarLinksWhatComparingEveryPairLinks generates sets of
// candidates whose templates are alike in some ways and not in others
// (capacity, an extended resource absent, at zero or not, allocatable and
// free resources a few percent apart, labels that count and labels that
// are ignored) and expects linkSimilar to give each the same similar
// candidates, in the same order, as comparing every pair does.
func TestLinkSimilarLinksWhatComparingEveryPairLinks(t *testing.T) {
	g := NewWithT(t)
	ignored := sets.New(alwaysIgnoredLabels...).Insert("ignored.example.com/id")
	for seed := range uint64(20) {
		n := 1 + int(seed*11)
		linked, compared := generatedCandidates(rand.New(rand.NewPCG(seed, 51)), n), generatedCandidates(rand.New(rand.NewPCG(seed, 51)), n)
		linkSimilar(linked, ignored)
		linkEveryPair(compared, ignored)
		links := 0
		for i := range linked {
			g.Expect(similarIDs(linked[i])).To(Equal(similarIDs(compared[i])), "seed %d, candidate %s", seed, linked[i].group.ID())
			links += len(linked[i].similar)
		}
		t.Logf("seed %d: %d candidates, %d links", seed, n, links/2)
	}
}

// linkEveryPair is linkSimilar comparing every pair of candidates.
func linkEveryPair(all []*candidate, ignoredLabels sets.Set[string]) {
	for i, lead := range all {
		for _, other := range all[i+1:] {
			if similarTemplates(lead.template, other.template, ignoredLabels) {
				lead.similar = append(lead.similar, other)
				other.similar = append(other.similar, lead)
			}
		}
	}
	for _, c := range all {
		slices.SortFunc(c.similar, func(a, b *candidate) int { return strings.Compare(a.group.ID(), b.group.ID()) })
	}
}

func similarIDs(c *candidate) []string {
	ids := []string{}
	for _, other := range c.similar {
		ids = append(ids, other.group.ID())
	}
	return ids
}

// generatedCandidates are n candidates in random order whose templates
// vary little, so that many are similar and many are near misses.
func generatedCandidates(rng *rand.Rand, n int) []*candidate {
	candidates := make([]*candidate, 0, n)
	for _, i := range rng.Perm(n) {
		name := fmt.Sprintf("md-%03d", i)
		node := st.Node(name, []string{"4", "8"}[rng.IntN(2)], []string{"16Gi", "16385Mi"}[rng.IntN(2)],
			st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("zone-%d", rng.IntN(3)), "pool", fmt.Sprintf("pool-%d", rng.IntN(2)),
				"ignored.example.com/id", name))
		if rng.IntN(4) == 0 {
			node.Labels["team"] = "a"
		}
		// Allocatable 0-8% below capacity: within 5% of each other or not.
		cpu := node.Status.Capacity.Cpu().MilliValue()
		node.Status.Allocatable[corev1.ResourceCPU] = *resource.NewMilliQuantity(cpu-cpu*int64(rng.IntN(9))/100, resource.DecimalSI)
		switch rng.IntN(3) {
		case 0:
		case 1:
			st.WithAllocatable("example.com/gpu", "0")(node)
		default:
			st.WithAllocatable("example.com/gpu", "1")(node)
		}
		// A DaemonSet's pod using a little of the node: free resources
		// apart or not.
		agent := snapshot.NewPodInfo(st.Pod("agent-"+name, fmt.Sprintf("%dm", 100*rng.IntN(4)), "", st.OnNode(name)))
		candidates = append(candidates, &candidate{group: &st.NodeGroup{Name: "MachineDeployment/ns/" + name}, template: snapshot.NewNodeInfo(node, agent)})
	}
	return candidates
}
