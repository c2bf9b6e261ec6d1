package framework

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// NodeTimeline records, for each Node of a Cluster, when a watch first saw
// it Ready and when it first saw the autoscaler's deletion taint on it.
// One watch delivers a Node's changes in the order the API server made
// them, so the times order those changes across Nodes too.
type NodeTimeline struct {
	mu      sync.Mutex
	ready   map[string]time.Time
	tainted map[string]time.Time
}

// WatchNodeTimeline starts a NodeTimeline of the Nodes of cluster (by
// ClusterLabel) until the spec ends.
func WatchNodeTimeline(ctx context.Context, stack *localstack.Stack, cluster *clusterv1.Cluster) *NodeTimeline {
	informers, err := cache.New(stack.Workload.Config, cache.Options{Scheme: localstack.Scheme})
	Expect(err).NotTo(HaveOccurred())
	timeline := &NodeTimeline{ready: map[string]time.Time{}, tainted: map[string]time.Time{}}
	informer, err := informers.GetInformer(ctx, &corev1.Node{})
	Expect(err).NotTo(HaveOccurred())
	record := func(obj any) {
		node, ok := obj.(*corev1.Node)
		if !ok || node.Labels[ClusterLabel] != cluster.Name {
			return
		}
		now := time.Now()
		timeline.mu.Lock()
		defer timeline.mu.Unlock()
		if _, seen := timeline.ready[node.Name]; !seen && nodefacts.KubeletReady(node) {
			timeline.ready[node.Name] = now
		}
		if _, seen := timeline.tainted[node.Name]; !seen && HasDeletionTaint(node) {
			timeline.tainted[node.Name] = now
		}
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
	})
	Expect(err).NotTo(HaveOccurred())
	StartInformers(ctx, informers, "the Node timeline")
	return timeline
}

// ReadyAt is when the Node was first seen Ready; zero when never.
func (t *NodeTimeline) ReadyAt(node string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ready[node]
}

// TaintedAt is when the Node was first seen with the autoscaler's deletion
// taint; zero when never.
func (t *NodeTimeline) TaintedAt(node string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tainted[node]
}

// Eviction is a pod evicted through the Eviction API, as its
// DisruptionTarget condition tells.
type Eviction struct {
	Pod, Node string
	// Owner is the pod's app label: the workload whose pod it is.
	Owner string
	// Bound is when the pod was scheduled (its PodScheduled condition),
	// Evicted when the watch first saw the condition.
	Bound, Evicted time.Time
}

// EvictionRecorder records the pods of a namespace of the workload cluster
// evicted through the Eviction API.
type EvictionRecorder struct {
	mu        sync.Mutex
	evictions []Eviction
	seen      map[string]bool
}

// RecordEvictions starts recording the evictions of namespace's pods until
// the spec ends.
func RecordEvictions(ctx context.Context, stack *localstack.Stack, namespace string) *EvictionRecorder {
	informers, err := cache.New(stack.Workload.Config, cache.Options{
		Scheme:            localstack.Scheme,
		DefaultNamespaces: map[string]cache.Config{namespace: {}},
	})
	Expect(err).NotTo(HaveOccurred())
	recorder := &EvictionRecorder{seen: map[string]bool{}}
	informer, err := informers.GetInformer(ctx, &corev1.Pod{})
	Expect(err).NotTo(HaveOccurred())
	record := func(obj any) {
		if tombstone, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tombstone.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI"
		})
		if i < 0 {
			return
		}
		var bound time.Time
		if j := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodScheduled }); j >= 0 {
			bound = pod.Status.Conditions[j].LastTransitionTime.Time
		}
		recorder.mu.Lock()
		defer recorder.mu.Unlock()
		if recorder.seen[string(pod.UID)] {
			return
		}
		recorder.seen[string(pod.UID)] = true
		recorder.evictions = append(recorder.evictions, Eviction{
			Pod: pod.Name, Node: pod.Spec.NodeName, Owner: pod.Labels["app"], Bound: bound, Evicted: time.Now(),
		})
	}
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
		DeleteFunc: record,
	})
	Expect(err).NotTo(HaveOccurred())
	StartInformers(ctx, informers, "the eviction watch")
	return recorder
}

// Evictions are the evictions seen so far, in the order seen.
func (r *EvictionRecorder) Evictions() []Eviction {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evictions)
}

// DisruptedAgainWithin counts the times an owner's pods were evicted
// again within window of an earlier eviction of its pods, evictions less
// than apart seconds from the one before counting as the same disruption
// (one drain evicts several pods of an owner at once).
func DisruptedAgainWithin(evictions []Eviction, window, apart time.Duration) map[string]int {
	byOwner := map[string][]time.Time{}
	for _, e := range evictions {
		byOwner[e.Owner] = append(byOwner[e.Owner], e.Evicted)
	}
	again := map[string]int{}
	for owner, times := range byOwner {
		slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(times); i++ {
			if gap := times[i].Sub(times[i-1]); gap >= apart && gap < window {
				again[owner]++
			}
		}
	}
	return again
}

// CostMeterInput is the input of StartCostMeter.
type CostMeterInput struct {
	// Client talks to the management cluster.
	Client  client.Client
	Cluster *clusterv1.Cluster
	// Prices are the prices per node-hour of the Cluster's
	// MachineDeployments, by name.
	Prices map[string]float64
	// Interval between two readings of the Machines.
	Interval time.Duration
}

// CostMeter integrates the price of the Machines of a Cluster over time:
// a Machine costs its MachineDeployment's price from the reading where it
// exists until the reading where it is gone, deleting or not, as a cloud
// bills an instance until it is terminated.
type CostMeter struct {
	mu sync.Mutex
	// seconds are the Machine-seconds by MachineDeployment.
	seconds map[string]float64
	prices  map[string]float64
	last    time.Time
	current map[string]int
}

// StartCostMeter reads the Cluster's Machines every Interval until the
// spec ends.
func StartCostMeter(ctx context.Context, input CostMeterInput) *CostMeter {
	meter := &CostMeter{seconds: map[string]float64{}, prices: input.Prices}
	read := func() {
		machines := &clusterv1.MachineList{}
		if err := input.Client.List(ctx, machines, client.InNamespace(input.Cluster.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: input.Cluster.Name}); err != nil {
			return
		}
		count := map[string]int{}
		for _, m := range machines.Items {
			count[m.Labels[clusterv1.MachineDeploymentNameLabel]]++
		}
		meter.mu.Lock()
		defer meter.mu.Unlock()
		now := time.Now()
		if !meter.last.IsZero() {
			elapsed := now.Sub(meter.last).Seconds()
			for group, n := range meter.current {
				meter.seconds[group] += float64(n) * elapsed
			}
		}
		meter.last, meter.current = now, count
	}
	read()
	meterCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer GinkgoRecover()
		ticker := time.NewTicker(input.Interval)
		defer ticker.Stop()
		for {
			select {
			case <-meterCtx.Done():
				return
			case <-ticker.C:
				read()
			}
		}
	}()
	DeferCleanup(func() {
		stop()
		<-done
	})
	return meter
}

// MachineSeconds are the Machine-seconds so far, by MachineDeployment.
func (m *CostMeter) MachineSeconds() map[string]float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]float64, len(m.seconds))
	for group, s := range m.seconds {
		out[group] = s
	}
	return out
}

// Cost is the price of the Machines so far, in a day compressed so that
// one of its hours lasts hour: Machine-seconds over hour are node-hours.
func (m *CostMeter) Cost(hour time.Duration) float64 {
	var cost float64
	for group, seconds := range m.MachineSeconds() {
		cost += seconds / hour.Seconds() * m.prices[group]
	}
	return cost
}

// CPUUtilization is the cpu the pods bound to the Cluster's Nodes request
// (finished ones aside) over the cpu those Nodes can allocate.
func CPUUtilization(ctx context.Context, g Gomega, workload client.Client, cluster *clusterv1.Cluster) float64 {
	var requested, allocatable int64
	for _, node := range ClusterNodes(ctx, g, workload, cluster) {
		allocatable += node.Status.Allocatable.Cpu().MilliValue()
		pods := &corev1.PodList{}
		g.Expect(workload.List(ctx, pods, client.MatchingFields{"spec.nodeName": node.Name})).To(Succeed())
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range pod.Spec.Containers {
				requested += c.Resources.Requests.Cpu().MilliValue()
			}
		}
	}
	if allocatable == 0 {
		return 0
	}
	return float64(requested) / float64(allocatable)
}

// NodeLayout tells, a line per Node of the Cluster, its value of
// groupLabel, the cpu its pods request over what it can allocate, and its
// pods by app label.
func NodeLayout(ctx context.Context, g Gomega, workload client.Client, cluster *clusterv1.Cluster, groupLabel string) string {
	nodes := ClusterNodes(ctx, g, workload, cluster)
	slices.SortFunc(nodes, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	var b strings.Builder
	for _, node := range nodes {
		pods := &corev1.PodList{}
		g.Expect(workload.List(ctx, pods, client.MatchingFields{"spec.nodeName": node.Name})).To(Succeed())
		var requested int64
		apps := map[string]int{}
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range pod.Spec.Containers {
				requested += c.Resources.Requests.Cpu().MilliValue()
			}
			apps[pod.Labels["app"]]++
		}
		names := slices.Sorted(maps.Keys(apps))
		parts := make([]string, 0, len(names))
		for _, app := range names {
			parts = append(parts, fmt.Sprintf("%s×%d", app, apps[app]))
		}
		fmt.Fprintf(&b, "- %s (%s): %dm of %dm: %s\n", node.Name, node.Labels[groupLabel], requested,
			node.Status.Allocatable.Cpu().MilliValue(), strings.Join(parts, ", "))
	}
	return b.String()
}
