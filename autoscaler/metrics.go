package autoscaler

import (
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// Metrics are the engine's Prometheus metrics, under the upstream
// cluster-autoscaler names so that existing dashboards keep working, with a
// cluster label because one manager serves many clusters. A nil *Metrics
// records nothing.
type Metrics struct {
	clusterSafeToAutoscale *prometheus.GaugeVec
	nodesCount             *prometheus.GaugeVec
	nodeGroupsCount        *prometheus.GaugeVec
	unschedulablePodsCount *prometheus.GaugeVec
	scaledUpNodes          *prometheus.CounterVec
	scaledDownNodes        *prometheus.CounterVec
	failedScaleUps         *prometheus.CounterVec
	evictedPods            *prometheus.CounterVec
	unneededNodesCount     *prometheus.GaugeVec
	functionDuration       *prometheus.HistogramVec
	lastActivity           *prometheus.GaugeVec
	nodeGroupMin           *prometheus.GaugeVec
	nodeGroupMax           *prometheus.GaugeVec
	nodeGroupTarget        *prometheus.GaugeVec
	nodeGroupBackoff       *prometheus.GaugeVec
	errors                 *prometheus.CounterVec
	replicasOverwritten    *prometheus.CounterVec
	enginePanics           *prometheus.CounterVec
	noScaleUpPods          *prometheus.GaugeVec
	nodeGroupNodes         *prometheus.GaugeVec
	nodeGroupUpcoming      *prometheus.GaugeVec
	cpuCurrent             *prometheus.GaugeVec
	cpuLimits              *prometheus.GaugeVec
	memoryCurrent          *prometheus.GaugeVec
	memoryLimits           *prometheus.GaugeVec
	gpuCurrent             *prometheus.GaugeVec
	gpuLimits              *prometheus.GaugeVec
	skippedScaleEvents     *prometheus.CounterVec

	mu sync.Mutex
	// published are the series that the last loop of each cluster set,
	// by vector and label values, so that the next loop deletes those it
	// does not set again (a node group gone, a limit removed).
	published map[string]map[seriesKey][]string
}

// seriesKey names one series of a vector: its label values, joined.
type seriesKey struct {
	vec    interface{ DeleteLabelValues(...string) bool }
	labels string
}

// The direction label of the limits and of the skipped scale events, and
// the reasons of the latter, as upstream names them.
const (
	directionMinimum = "minimum"
	directionMaximum = "maximum"
	directionUp      = "up"

	skippedCPULimit      = "CpuResourceLimit"
	skippedMemoryLimit   = "MemoryResourceLimit"
	skippedGPULimit      = "GpuResourceLimit"
	skippedMaxNodesTotal = "MaxNodesTotal"

	// errorLoop is the type of the errors of loops that failed.
	errorLoop = "loop"
	// errorInformerPanic is the type of the panics of the event handlers
	// of a cluster's informers, which run outside the loop.
	errorInformerPanic = "informerPanic"

	// The mode label of the scale-up and scale-down counters: what the
	// engine did, or, in DryRun mode, would have done.
	modeActive = "Active"
	modeDryRun = "DryRun"

	// scaleDownUnderutilized is the reason of the nodes removed because
	// they were unneeded; scaleDownConsolidation of those consolidation
	// removed, which upstream does not have.
	scaleDownUnderutilized = "underutilized"
	scaleDownConsolidation = "consolidation"
)

const namespace = "cluster_autoscaler"

// NewMetrics creates the metrics and registers them with registerer.
func NewMetrics(registerer prometheus.Registerer) *Metrics {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, append([]string{"cluster"}, labels...))
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, append([]string{"cluster"}, labels...))
	}
	m := &Metrics{
		clusterSafeToAutoscale: gauge("cluster_safe_to_autoscale", "Whether the cluster is healthy enough for autoscaling: 1 yes, 0 no."),
		nodesCount:             gauge("nodes_count", "Number of nodes in the cluster.", "state"),
		nodeGroupsCount:        gauge("node_groups_count", "Number of node groups managed by the autoscaler.", "node_group_type"),
		unschedulablePodsCount: gauge("unschedulable_pods_count", "Number of unschedulable pods in the cluster.", "type"),
		scaledUpNodes: counter("scaled_up_nodes_total",
			"Number of nodes added by the autoscaler; with mode=\"DryRun\", those it would have added.", "mode"),
		scaledDownNodes: counter("scaled_down_nodes_total",
			"Number of nodes removed by the autoscaler; with mode=\"DryRun\", those it would have removed.", "reason", "mode"),
		failedScaleUps:     counter("failed_scale_ups_total", "Number of times scale-up operations failed.", "reason"),
		evictedPods:        counter("evicted_pods_total", "Number of pods evicted by the autoscaler."),
		unneededNodesCount: gauge("unneeded_nodes_count", "Number of nodes currently considered unneeded."),
		functionDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "function_duration_seconds",
			Help:    "Time taken by various parts of the autoscaler loop.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"cluster", "function"}),
		lastActivity:     gauge("last_activity", "Last time certain parts of the autoscaler ran, in seconds since the epoch.", "activity"),
		nodeGroupMin:     gauge("node_group_min_count", "Minimum number of nodes in the node group.", "node_group"),
		nodeGroupMax:     gauge("node_group_max_count", "Maximum number of nodes in the node group.", "node_group"),
		nodeGroupTarget:  gauge("node_group_target_count", "Target number of nodes in the node group.", "node_group"),
		nodeGroupBackoff: gauge("node_group_backoff_status", "Whether the node group is backing off: 1 yes, 0 no.", "node_group", "reason"),
		errors:           counter("errors_total", "Number of errors in the autoscaler loop.", "type"),
		replicasOverwritten: counter("node_group_replicas_overwritten_total",
			"Number of times another writer changed a node group's target size after the autoscaler set it.", "node_group"),
		enginePanics: counter("engine_panics_total", "Number of times the autoscaling loop of the cluster panicked and its engine stopped."),
		noScaleUpPods: gauge("no_scale_up_pods_count",
			"Number of unschedulable pods that no node group can help: they triggered no scale-up in the last loop that planned one."),
		nodeGroupNodes: gauge("node_group_nodes_count",
			"Number of registered nodes of the node group, by state: ready, unready, or notStarted (registered recently and not ready yet, or still carrying a startup taint).",
			"node_group", "state"),
		nodeGroupUpcoming: gauge("node_group_upcoming_count",
			"Number of nodes requested for the node group that have not started yet: its target size minus its started nodes.", "node_group"),
		cpuCurrent:    gauge("cluster_cpu_current_cores", "Number of cores of the cluster's nodes, the control plane's included, as resourceLimits.cores counts them."),
		cpuLimits:     gauge("cpu_limits_cores", "The cluster's minimum and maximum number of cores (resourceLimits.cores), for those set.", "direction"),
		memoryCurrent: gauge("cluster_memory_current_bytes", "Memory of the cluster's nodes in bytes, the control plane's included, as resourceLimits.memory counts it."),
		memoryLimits:  gauge("memory_limits_bytes", "The cluster's minimum and maximum memory in bytes (resourceLimits.memory), for those set.", "direction"),
		gpuCurrent: gauge("cluster_gpu_current_count",
			"Number of GPUs of the cluster's nodes, by resource, for the GPU types of resourceLimits.gpus: an extended resource counts the nodes' capacity, a DRA driver the devices it publishes on them.", "gpu_resource_name"),
		gpuLimits: gauge("gpu_limits_count",
			"The cluster's minimum and maximum number of GPUs of a resource (resourceLimits.gpus); a listed resource always has a maximum.", "gpu_resource_name", "direction"),
		skippedScaleEvents: counter("skipped_scale_events_count",
			"Number of times a node group was left out of a scale-up, or cut short, by a cluster-wide limit of resourceLimits while pods no node group helped waited, by limit.",
			"direction", "reason"),
		published: map[string]map[seriesKey][]string{},
	}
	registerer.MustRegister(m.clusterSafeToAutoscale, m.nodesCount, m.nodeGroupsCount, m.unschedulablePodsCount,
		m.scaledUpNodes, m.scaledDownNodes, m.failedScaleUps, m.evictedPods, m.unneededNodesCount, m.functionDuration,
		m.lastActivity, m.nodeGroupMin, m.nodeGroupMax, m.nodeGroupTarget, m.nodeGroupBackoff, m.errors, m.replicasOverwritten, m.enginePanics,
		m.noScaleUpPods, m.nodeGroupNodes, m.nodeGroupUpcoming, m.cpuCurrent, m.cpuLimits, m.memoryCurrent, m.memoryLimits,
		m.gpuCurrent, m.gpuLimits, m.skippedScaleEvents)
	return m
}

// start creates the counters of a cluster that alerts and rates read at 0,
// when its engine is created: rate() and increase() see no increase in a
// series that first appears with the value 1, such as the first panic.
func (m *Metrics) start(cluster string) {
	if m == nil {
		return
	}
	m.enginePanics.WithLabelValues(cluster)
	for _, mode := range []string{modeActive, modeDryRun} {
		m.scaledUpNodes.WithLabelValues(cluster, mode)
		m.scaledDownNodes.WithLabelValues(cluster, scaleDownUnderutilized, mode)
		m.scaledDownNodes.WithLabelValues(cluster, scaleDownConsolidation, mode)
	}
	m.errors.WithLabelValues(cluster, errorLoop)
}

func (m *Metrics) observeFunction(cluster, function string, start, end time.Time) {
	if m == nil {
		return
	}
	m.functionDuration.WithLabelValues(cluster, function).Observe(end.Sub(start).Seconds())
	m.lastActivity.WithLabelValues(cluster, function).Set(float64(end.Unix()))
}

func (m *Metrics) recordError(cluster, kind string) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(cluster, kind).Inc()
}

// RecordInformerPanic counts a panic of an event handler of the cluster's
// informers, recovered outside the loop.
func (m *Metrics) RecordInformerPanic(cluster string) {
	m.recordError(cluster, errorInformerPanic)
}

func (m *Metrics) recordScaleUp(cluster, mode string, nodes int) {
	if m == nil {
		return
	}
	m.scaledUpNodes.WithLabelValues(cluster, mode).Add(float64(nodes))
}

func (m *Metrics) recordScaleDown(cluster, reason, mode string, nodes int) {
	if m == nil {
		return
	}
	m.scaledDownNodes.WithLabelValues(cluster, reason, mode).Add(float64(nodes))
}

func (m *Metrics) recordFailedScaleUp(cluster, reason string) {
	if m == nil {
		return
	}
	m.failedScaleUps.WithLabelValues(cluster, reason).Inc()
}

func (m *Metrics) recordEvictions(cluster string, pods int) {
	if m == nil {
		return
	}
	m.evictedPods.WithLabelValues(cluster).Add(float64(pods))
}

func (m *Metrics) recordReplicasOverwritten(cluster, group string) {
	if m == nil {
		return
	}
	m.replicasOverwritten.WithLabelValues(cluster, group).Inc()
}

func (m *Metrics) recordPanic(cluster string) {
	if m == nil {
		return
	}
	m.enginePanics.WithLabelValues(cluster).Inc()
}

// recordLimitedScaleUps counts, by limit, the node groups that a
// cluster-wide limit kept from growing, or cut short, for the pods no
// group helped in a loop.
func (m *Metrics) recordLimitedScaleUps(cluster string, limits ResourceLimits, pods []scaleup.NoScaleUp) {
	if m == nil || len(pods) == 0 {
		return
	}
	reasons := limitReasons(limits)
	type groupLimit struct{ group, limit string }
	limited := map[groupLimit]bool{}
	for _, pod := range pods {
		for group, why := range pod.Reasons {
			for _, reason := range why {
				if limit, ok := reasons[reason]; ok {
					limited[groupLimit{group, limit}] = true
				}
			}
		}
	}
	for key := range limited {
		m.skippedScaleEvents.WithLabelValues(cluster, directionUp, key.limit).Inc()
	}
}

// limitReasons map the reasons a scale-up gives when a limit of limits
// binds to the reason label of the skipped scale events.
func limitReasons(limits ResourceLimits) map[string]string {
	reasons := map[string]string{
		scaleup.ReasonMaxNodesTotal:                        skippedMaxNodesTotal,
		scaleup.ResourceLimitReason(corev1.ResourceCPU):    skippedCPULimit,
		scaleup.ResourceLimitReason(corev1.ResourceMemory): skippedMemoryLimit,
	}
	for name := range limits.GPUs {
		reasons[scaleup.ResourceLimitReason(name)] = skippedGPULimit
	}
	return reasons
}

func (m *Metrics) setUnneededNodes(cluster string, nodes int) {
	if m == nil {
		return
	}
	m.unneededNodesCount.WithLabelValues(cluster).Set(float64(nodes))
}

// publish sets the series that describe the state after a loop, under
// limits, and deletes those of the cluster's last loop that it does not set
// again, only after setting the others: a scrape never misses a series
// that goes on.
func (m *Metrics) publish(cluster string, status Status, limits ResourceLimits) {
	if m == nil || status.Err != nil {
		return
	}
	current := map[seriesKey][]string{}
	keep := func(vec interface{ DeleteLabelValues(...string) bool }, values []string) {
		current[seriesKey{vec: vec, labels: strings.Join(values, "\xff")}] = values
	}
	gauge := func(vec *prometheus.GaugeVec, value float64, labels ...string) {
		values := append([]string{cluster}, labels...)
		vec.WithLabelValues(values...).Set(value)
		keep(vec, values)
	}
	// Counters of what may happen are created at 0 for start's reason.
	counter := func(vec *prometheus.CounterVec, labels ...string) {
		values := append([]string{cluster}, labels...)
		vec.WithLabelValues(values...)
		keep(vec, values)
	}

	gauge(m.clusterSafeToAutoscale, boolToFloat(status.ClusterHealthy))
	gauge(m.nodesCount, float64(status.ReadyNodes), "ready")
	gauge(m.nodesCount, float64(status.Nodes-status.ReadyNodes), "unready")
	autoscaled := 0
	for _, group := range status.NodeGroups {
		if group.Autoscaled {
			autoscaled++
		}
	}
	gauge(m.nodeGroupsCount, float64(autoscaled), "autoscaled")
	gauge(m.unschedulablePodsCount, float64(status.UnschedulablePods), "unschedulable")
	noScaleUp := 0
	for _, reason := range status.NotTriggerScaleUpReasons {
		noScaleUp += reason.Pods
	}
	gauge(m.noScaleUpPods, float64(noScaleUp))
	for _, group := range status.NodeGroups {
		if !group.Autoscaled {
			continue
		}
		gauge(m.nodeGroupMin, float64(group.MinSize), group.ID)
		gauge(m.nodeGroupMax, float64(group.MaxSize), group.ID)
		gauge(m.nodeGroupTarget, float64(group.TargetSize), group.ID)
		gauge(m.nodeGroupNodes, float64(group.Ready), group.ID, "ready")
		gauge(m.nodeGroupNodes, float64(group.Unready), group.ID, "unready")
		gauge(m.nodeGroupNodes, float64(group.NotStarted), group.ID, "notStarted")
		gauge(m.nodeGroupUpcoming, float64(group.Upcoming), group.ID)
		gauge(m.nodeGroupBackoff, boolToFloat(!group.BackoffUntil.IsZero()), group.ID, group.BackoffCode)
		counter(m.replicasOverwritten, group.ID)
	}

	gauge(m.cpuCurrent, float64(status.Capacity.MilliCPU)/1000)
	gauge(m.memoryCurrent, float64(status.Capacity.Memory))
	limit := func(vec *prometheus.GaugeVec, min, max int64, labels ...string) {
		if min > 0 {
			gauge(vec, float64(min), append(labels, directionMinimum)...)
		}
		if max > 0 {
			gauge(vec, float64(max), append(labels, directionMaximum)...)
		}
	}
	limit(m.cpuLimits, limits.MinCores, limits.MaxCores)
	limit(m.memoryLimits, limits.MinMemory, limits.MaxMemory)
	if limits.MaxCores > 0 {
		counter(m.skippedScaleEvents, directionUp, skippedCPULimit)
	}
	if limits.MaxMemory > 0 {
		counter(m.skippedScaleEvents, directionUp, skippedMemoryLimit)
	}
	if limits.MaxNodesTotal > 0 {
		counter(m.skippedScaleEvents, directionUp, skippedMaxNodesTotal)
	}
	for name, r := range limits.GPUs {
		gauge(m.gpuCurrent, float64(status.Capacity.Scalar[name]), string(name))
		limit(m.gpuLimits, r.Min, 0, string(name))
		gauge(m.gpuLimits, float64(r.Max), string(name), directionMaximum)
		counter(m.skippedScaleEvents, directionUp, skippedGPULimit)
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	for key, values := range m.published[cluster] {
		if _, set := current[key]; !set {
			key.vec.DeleteLabelValues(values...)
		}
	}
	m.published[cluster] = current
}

// Forget removes every series of a cluster, when it is no longer
// autoscaled. An engine that panicked keeps them for the one that takes
// its place: its panics stay counted, and last_activity shows since when
// the cluster has not been autoscaled.
func (m *Metrics) Forget(cluster string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"cluster": cluster}
	for _, vec := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		m.clusterSafeToAutoscale, m.nodesCount, m.nodeGroupsCount, m.unschedulablePodsCount, m.scaledUpNodes,
		m.scaledDownNodes, m.failedScaleUps, m.evictedPods, m.unneededNodesCount, m.functionDuration,
		m.lastActivity, m.nodeGroupMin, m.nodeGroupMax, m.nodeGroupTarget, m.nodeGroupBackoff, m.errors, m.replicasOverwritten, m.enginePanics,
		m.noScaleUpPods, m.nodeGroupNodes, m.nodeGroupUpcoming, m.cpuCurrent, m.cpuLimits, m.memoryCurrent, m.memoryLimits,
		m.gpuCurrent, m.gpuLimits, m.skippedScaleEvents,
	} {
		vec.DeletePartialMatch(labels)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.published, cluster)
}

// ForgetDryRun removes the series of a cluster's DryRun engine, when it
// stops: those of the decisions it did not carry out. The cluster's other
// series are another engine's.
func (m *Metrics) ForgetDryRun(cluster string) {
	if m == nil {
		return
	}
	labels := prometheus.Labels{"cluster": cluster, "mode": modeDryRun}
	m.scaledUpNodes.DeletePartialMatch(labels)
	m.scaledDownNodes.DeletePartialMatch(labels)
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
