package soak

import (
	"context"
	"slices"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// PodLatencies watches the soak's pods that fit a group (FitsLabel) and
// records, for each that kube-scheduler found Unschedulable, how long it
// waited for a node: from its creation, the wait its owner sees,
// to when the watch first saw it bound.
type PodLatencies struct {
	mu sync.Mutex
	// unschedulable are the creation times of the pods seen
	// Unschedulable and not bound yet; zero once counted.
	unschedulable map[types.UID]time.Time
	waited        []time.Duration
	// now is the clock the binding is seen by.
	now func() time.Time
}

// WatchPodLatencies starts watching the pods of namespace in the workload
// cluster, until the spec ends.
func WatchPodLatencies(ctx context.Context, stack *localstack.Stack, namespace string) *PodLatencies {
	GinkgoHelper()
	informers, err := cache.New(stack.Workload.Config, cache.Options{
		Scheme:            localstack.Scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
	})
	Expect(err).NotTo(HaveOccurred())
	latencies := newPodLatencies(time.Now)
	informer, err := informers.GetInformer(ctx, &corev1.Pod{})
	Expect(err).NotTo(HaveOccurred())
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    latencies.see,
		UpdateFunc: func(_, obj any) { latencies.see(obj) },
	})
	Expect(err).NotTo(HaveOccurred())
	framework.StartInformers(ctx, informers, "the pod watch")
	return latencies
}

func (l *PodLatencies) see(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Labels[FitsLabel] != "true" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	created, waiting := l.unschedulable[pod.UID]
	switch {
	case pod.Spec.NodeName != "" && waiting && !created.IsZero():
		l.waited = append(l.waited, l.now().Sub(created))
		// Zero: counted, and never again.
		l.unschedulable[pod.UID] = time.Time{}
	case pod.Spec.NodeName == "" && !waiting && unschedulable(pod):
		// The watch may see it Unschedulable late, after a restart or
		// while the scheduler retries: its wait started when it was
		// created.
		l.unschedulable[pod.UID] = pod.CreationTimestamp.Time
	}
}

// newPodLatencies returns latencies measured with the clock now.
func newPodLatencies(now func() time.Time) *PodLatencies {
	return &PodLatencies{unschedulable: map[types.UID]time.Time{}, now: now}
}

func unschedulable(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// Waited are how long each pod that was Unschedulable waited for a node,
// sorted.
func (l *PodLatencies) Waited() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	waited := slices.Clone(l.waited)
	slices.Sort(waited)
	return waited
}
