package scaleup

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// referenceSimilar is similarTemplates as it was written first, with
// sets and copies: the allocation-free one must decide the same.
func referenceSimilar(a, b *snapshot.NodeInfo, ignoredLabels sets.Set[string]) bool {
	within := func(a, b snapshot.Resources, ratio float64) bool {
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
	capacityA := snapshot.NewResources(a.Node().Status.Capacity)
	capacityB := snapshot.NewResources(b.Node().Status.Capacity)
	if !within(capacityA, capacityB, 0) || !within(a.Allocatable(), b.Allocatable(), maxSimilarDifference) {
		return false
	}
	freeA, freeB := a.Allocatable().Clone(), b.Allocatable().Clone()
	freeA.Sub(a.Requested())
	freeB.Sub(b.Requested())
	freeA.Pods, freeB.Pods = 0, 0
	if !within(freeA, freeB, maxSimilarDifference) {
		return false
	}
	return sameLabels(a.Node().Labels, b.Node().Labels, ignoredLabels)
}

// randomTemplate is a template node with a little of everything that
// similarity looks at: cpu and memory a few percent apart, GPUs of one
// type or another in capacity, allocatable or requests, and labels.
func randomTemplate(r *rand.Rand, i int) *snapshot.NodeInfo {
	pick := func(values ...string) string { return values[r.IntN(len(values))] }
	node := st.Node(fmt.Sprintf("t-%d", i), pick("4", "4", "8"), pick("16Gi", "16Gi", "15Gi"),
		st.WithNodeLabels(corev1.LabelTopologyZone, pick("a", "b"), "pool", pick("x", "x", "y")))
	if r.IntN(2) == 0 {
		node.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse(pick("3900m", "3800m", "3500m"))
	}
	if r.IntN(3) == 0 {
		node.Status.Allocatable[corev1.ResourceEphemeralStorage] = resource.MustParse(pick("100Gi", "98Gi"))
	}
	for _, gpu := range []corev1.ResourceName{"nvidia.com/gpu", "amd.com/gpu"} {
		if r.IntN(3) == 0 {
			count := resource.MustParse(pick("0", "1", "2", "20", "21"))
			node.Status.Capacity[gpu] = count
			if r.IntN(4) != 0 {
				node.Status.Allocatable[gpu] = count.DeepCopy()
			}
		}
	}
	var pods []*snapshot.PodInfo
	for j := range r.IntN(3) {
		opts := []st.PodOption{}
		if r.IntN(3) == 0 {
			opts = append(opts, st.WithRequest(corev1.ResourceName(pick("nvidia.com/gpu", "amd.com/gpu")), pick("1", "2")))
		}
		pods = append(pods, snapshot.NewPodInfo(st.Pod(fmt.Sprintf("p-%d-%d", i, j), pick("100m", "200m"), pick("128Mi", "1Gi"), opts...)))
	}
	return snapshot.NewNodeInfo(node, pods...)
}

func TestSimilarTemplatesDecidesAsTheReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ignored := sets.New(alwaysIgnoredLabels...)
	templates := make([]*snapshot.NodeInfo, 60)
	for i := range templates {
		templates[i] = randomTemplate(r, i)
	}
	similar := 0
	for _, a := range templates {
		for _, b := range templates {
			want := referenceSimilar(a, b, ignored)
			if got := similarTemplates(a, b, ignored); got != want {
				t.Fatalf("similarTemplates(%s, %s) = %v, the reference says %v\ncapacity %v / %v\nallocatable %v / %v\nrequested %v / %v",
					a.Name(), b.Name(), got, want, a.Capacity(), b.Capacity(), a.Allocatable(), b.Allocatable(), a.Requested(), b.Requested())
			}
			if want && a != b {
				similar++
			}
		}
	}
	if similar == 0 {
		t.Fatal("no two different templates are similar: the test compares nothing interesting")
	}
}
