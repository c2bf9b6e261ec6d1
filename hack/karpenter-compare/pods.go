// Package compare times Karpenter's scheduler and capi-autoscaler's
// scale-up planner on the same pods, in one process: the pods of
// Karpenter's own scheduling benchmark, made by the same generator with the
// same seed.
package compare

import (
	"fmt"
	"math/rand"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/karpenter/pkg/test"
)

// generator makes the pods of Karpenter's scheduling benchmark
// (pkg/controllers/provisioning/scheduling/scheduling_benchmark_test.go in
// sigs.k8s.io/karpenter v1.14.3, makeDiversePods), drawing from its random
// source in the same order, so that the same seed gives the same pods.
// Karpenter's benchmark lives in a test file and cannot be imported.
type generator struct {
	rand *rand.Rand
}

// karpenterSeed is the seed of Karpenter's benchmark.
const karpenterSeed = 42

// diversePods returns count pods, a fifth each: generic, zone topology
// spread, hostname topology spread, zone self-affinity and hostname
// anti-affinity, the remainder generic. None has an owner.
func diversePods(count int) []*corev1.Pod {
	//nolint:gosec // The benchmark's pods, not secrets.
	g := generator{rand: rand.New(rand.NewSource(karpenterSeed))}
	const kinds = 5
	var pods []*corev1.Pod
	pods = append(pods, g.genericPods(count/kinds)...)
	pods = append(pods, g.topologySpreadPods(count/kinds, corev1.LabelTopologyZone)...)
	pods = append(pods, g.topologySpreadPods(count/kinds, corev1.LabelHostname)...)
	pods = append(pods, g.podAffinityPods(count/kinds, corev1.LabelTopologyZone)...)
	pods = append(pods, g.podAntiAffinityPods(count/kinds, corev1.LabelHostname)...)
	return append(pods, g.genericPods(count-len(pods))...)
}

func (g generator) genericPods(count int) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		pods = append(pods, test.Pod(test.PodOptions{
			ObjectMeta:           metav1.ObjectMeta{Labels: g.labels("my-label"), UID: uuid.NewUUID()},
			ResourceRequirements: g.requests(),
		}))
	}
	return pods
}

func (g generator) topologySpreadPods(count int, topologyKey string) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		// Go evaluates the composite literal's fields in order: labels,
		// then the selector, then the requests, as Karpenter's does.
		pods = append(pods, test.Pod(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: g.labels("my-label"), UID: uuid.NewUUID()},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew:           1,
				TopologyKey:       topologyKey,
				WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector:     &metav1.LabelSelector{MatchLabels: g.labels("my-label")},
			}},
			ResourceRequirements: g.requests(),
		}))
	}
	return pods
}

// podAffinityPods have affinity to themselves: pods with the same label
// share a zone.
func (g generator) podAffinityPods(count int, topologyKey string) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		labels := g.labels("my-affininity")
		pods = append(pods, test.Pod(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, UID: uuid.NewUUID()},
			PodRequirements: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
				TopologyKey:   topologyKey,
			}},
			ResourceRequirements: g.requests(),
		}))
	}
	return pods
}

// podAntiAffinityPods all repel each other: one per node.
func (g generator) podAntiAffinityPods(count int, topologyKey string) []*corev1.Pod {
	labels := map[string]string{"app": "nginx"}
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		pods = append(pods, test.Pod(test.PodOptions{
			ObjectMeta: metav1.ObjectMeta{Labels: labels, UID: uuid.NewUUID()},
			PodAntiRequirements: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
				TopologyKey:   topologyKey,
			}},
			ResourceRequirements: g.requests(),
		}))
	}
	return pods
}

func (g generator) labels(key string) map[string]string {
	values := []string{"a", "b", "c", "d", "e", "f", "g"}
	return map[string]string{key: values[g.rand.Intn(len(values))]}
}

// requests draws the cpu, then the memory.
func (g generator) requests() corev1.ResourceRequirements {
	cpu := []int{100, 250, 500, 1000, 1500}
	memory := []int{100, 256, 512, 1024, 2048, 4096}
	requests := corev1.ResourceList{}
	requests[corev1.ResourceCPU] = resource.MustParse(fmt.Sprintf("%dm", cpu[g.rand.Intn(len(cpu))]))
	requests[corev1.ResourceMemory] = resource.MustParse(fmt.Sprintf("%dMi", memory[g.rand.Intn(len(memory))]))
	return corev1.ResourceRequirements{Requests: requests}
}
