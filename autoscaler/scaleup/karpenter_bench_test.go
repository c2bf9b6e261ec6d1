package scaleup_test

import (
	"fmt"
	mathrand "math/rand"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

// BenchmarkKarpenterMix times one scale-up decision for the pods of
// Karpenter's scheduling benchmark on an empty cluster with a node group
// per instance type of Karpenter's fake catalogue (400), or per 20th type
// (20), as hack/karpenter-compare's BenchmarkCapiAutoscaler does without
// Karpenter's modules, on 1 and 2 workers: the plans are the same. 20
// groups and 500 pods are DefaultMinParallelWork; 100 pods stay on one
// goroutine.
func BenchmarkKarpenterMix(b *testing.B) {
	for _, size := range []struct{ every, pods int }{{1, 1000}, {20, 1000}, {20, 500}, {20, 100}} {
		in := karpenterCluster(karpenterPods(size.pods), size.every)
		for _, workers := range []int{1, 2} {
			b.Run(fmt.Sprintf("groups=%d/pods=%d/workers=%d", 400/size.every, size.pods, workers), func(b *testing.B) {
				ctx := klog.NewContext(b.Context(), klog.Background().V(1))
				planner, err := scaleup.New(scaleup.Options{
					PriorityCutoff:  -10,
					Expanders:       []string{scaleup.ExpanderLeastWaste},
					Clock:           clocktesting.NewFakePassiveClock(time.Now()),
					Rand:            rand.New(rand.NewPCG(1, 2)),
					Workers:         workers,
					MinParallelWork: scaleup.DefaultMinParallelWork,
				})
				if err != nil {
					b.Fatal(err)
				}
				snap := snapshot.New(in)
				b.ReportAllocs()
				var plan *scaleup.Plan
				cpu := benchmark.StartCPU(b)
				for b.Loop() {
					plan = planner.Plan(ctx, snap, scaleup.State{})
				}
				cpu.Report()
				cores := 0
				for _, increase := range plan.Increases {
					cores += increase.Delta * int(snap.Template(increase.Group.ID()).Node().Status.Capacity.Cpu().Value())
				}
				b.ReportMetric(float64(len(plan.Helped)), "pods-placed")
				b.ReportMetric(float64(plan.NewNodes()), "nodes")
				b.ReportMetric(float64(cores), "cores")
				b.ReportMetric(float64(len(plan.Rounds)), "rounds")
			})
		}
	}
}

// karpenterCluster is an empty cluster with a node group for every
// every-th instance type of Karpenter's fake catalogue of 400
// (cloudprovider/fake.InstanceTypes: the i-th has i+1 cpus, 2(i+1) GiB and
// 10(i+1) pods), each in one zone of three in turn, and pods pending as
// kube-scheduler leaves them.
func karpenterCluster(pods []*corev1.Pod, every int) snapshot.Input {
	in := snapshot.Input{}
	for i := range 400 {
		if (i+1)%every != 0 {
			continue
		}
		name := fmt.Sprintf("fake-it-%d", i)
		template := st.Node(name, fmt.Sprint(i+1), fmt.Sprintf("%dGi", 2*(i+1)),
			st.WithAllocatable(corev1.ResourcePods, fmt.Sprint(10*(i+1))),
			st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("test-zone-%d", i%3+1)))
		in.NodeGroups = append(in.NodeGroups, &st.NodeGroup{Name: "MachineDeployment/default/" + name, Max: 100000, Template: template})
	}
	for _, pod := range pods {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		})
		in.Pods = append(in.Pods, pod)
	}
	return in
}

// karpenterPods are the pods of Karpenter's scheduling benchmark
// (makeDiversePods of sigs.k8s.io/karpenter v1.14.3, as
// hack/karpenter-compare generates them, with its seed): a fifth each
// generic, zone spread, hostname spread, zone self-affinity and hostname
// anti-affinity, with random labels and requests, and no owners.
func karpenterPods(count int) []*corev1.Pod {
	//nolint:gosec // The benchmark's pods, not secrets.
	g := karpenterGenerator{rand: mathrand.New(mathrand.NewSource(42))}
	const kinds = 5
	var pods []*corev1.Pod
	pods = append(pods, g.pods(count/kinds, func(*corev1.Pod) {})...)
	for _, key := range []string{corev1.LabelTopologyZone, corev1.LabelHostname} {
		pods = append(pods, g.pods(count/kinds, func(pod *corev1.Pod) {
			pod.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: g.labels("my-label")},
			}}
		})...)
	}
	pods = append(pods, g.podsLabelled(count/kinds, "my-affininity", func(pod *corev1.Pod) {
		pod.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: pod.Labels}, TopologyKey: corev1.LabelTopologyZone,
		}}}}
	})...)
	nginx := map[string]string{"app": "nginx"}
	pods = append(pods, g.podsWith(count/kinds, nginx, func(pod *corev1.Pod) {
		pod.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: nginx}, TopologyKey: corev1.LabelHostname,
		}}}}
	})...)
	return append(pods, g.pods(count-len(pods), func(*corev1.Pod) {})...)
}

// karpenterGenerator draws from its source in the order of Karpenter's:
// labels, then the spread's selector, then the cpu and memory.
type karpenterGenerator struct {
	rand *mathrand.Rand
	made int
}

func (g *karpenterGenerator) pods(count int, with func(*corev1.Pod)) []*corev1.Pod {
	return g.podsLabelled(count, "my-label", with)
}

func (g *karpenterGenerator) podsLabelled(count int, key string, with func(*corev1.Pod)) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		pods = append(pods, g.podsWith(1, g.labels(key), with)...)
	}
	return pods
}

func (g *karpenterGenerator) podsWith(count int, labels map[string]string, with func(*corev1.Pod)) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, count)
	for range count {
		g.made++
		name := fmt.Sprintf("pod-%05d", g.made)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name), Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		}
		with(pod)
		pod.Spec.Containers[0].Resources = g.requests()
		pods = append(pods, pod)
	}
	return pods
}

func (g *karpenterGenerator) labels(key string) map[string]string {
	values := []string{"a", "b", "c", "d", "e", "f", "g"}
	return map[string]string{key: values[g.rand.Intn(len(values))]}
}

func (g *karpenterGenerator) requests() corev1.ResourceRequirements {
	cpu := []int{100, 250, 500, 1000, 1500}
	memory := []int{100, 256, 512, 1024, 2048, 4096}
	requests := corev1.ResourceList{}
	requests[corev1.ResourceCPU] = resource.MustParse(fmt.Sprintf("%dm", cpu[g.rand.Intn(len(cpu))]))
	requests[corev1.ResourceMemory] = resource.MustParse(fmt.Sprintf("%dMi", memory[g.rand.Intn(len(memory))]))
	return corev1.ResourceRequirements{Requests: requests}
}
