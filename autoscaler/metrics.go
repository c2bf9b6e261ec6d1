package autoscaler

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
}

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
		scaledUpNodes:          counter("scaled_up_nodes_total", "Number of nodes added by the autoscaler."),
		scaledDownNodes:        counter("scaled_down_nodes_total", "Number of nodes removed by the autoscaler.", "reason"),
		failedScaleUps:         counter("failed_scale_ups_total", "Number of times scale-up operations failed.", "reason"),
		evictedPods:            counter("evicted_pods_total", "Number of pods evicted by the autoscaler."),
		unneededNodesCount:     gauge("unneeded_nodes_count", "Number of nodes currently considered unneeded."),
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
	}
	registerer.MustRegister(m.clusterSafeToAutoscale, m.nodesCount, m.nodeGroupsCount, m.unschedulablePodsCount,
		m.scaledUpNodes, m.scaledDownNodes, m.failedScaleUps, m.evictedPods, m.unneededNodesCount, m.functionDuration,
		m.lastActivity, m.nodeGroupMin, m.nodeGroupMax, m.nodeGroupTarget, m.nodeGroupBackoff, m.errors, m.replicasOverwritten, m.enginePanics)
	return m
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

func (m *Metrics) recordScaleUp(cluster string, nodes int) {
	if m == nil {
		return
	}
	m.scaledUpNodes.WithLabelValues(cluster).Add(float64(nodes))
}

func (m *Metrics) recordScaleDown(cluster, reason string, nodes int) {
	if m == nil {
		return
	}
	m.scaledDownNodes.WithLabelValues(cluster, reason).Add(float64(nodes))
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

func (m *Metrics) setUnneededNodes(cluster string, nodes int) {
	if m == nil {
		return
	}
	m.unneededNodesCount.WithLabelValues(cluster).Set(float64(nodes))
}

// publish sets the gauges that describe the state after a loop.
func (m *Metrics) publish(cluster string, status Status) {
	if m == nil || status.Err != nil {
		return
	}
	m.clusterSafeToAutoscale.WithLabelValues(cluster).Set(boolToFloat(status.ClusterHealthy))
	m.nodesCount.WithLabelValues(cluster, "ready").Set(float64(status.ReadyNodes))
	m.nodesCount.WithLabelValues(cluster, "unready").Set(float64(status.Nodes - status.ReadyNodes))
	autoscaled := 0
	for _, group := range status.NodeGroups {
		if group.Autoscaled {
			autoscaled++
		}
	}
	m.nodeGroupsCount.WithLabelValues(cluster, "autoscaled").Set(float64(autoscaled))
	m.unschedulablePodsCount.WithLabelValues(cluster, "unschedulable").Set(float64(status.UnschedulablePods))
	m.nodeGroupBackoff.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	for _, group := range status.NodeGroups {
		if !group.Autoscaled {
			continue
		}
		m.nodeGroupMin.WithLabelValues(cluster, group.ID).Set(float64(group.MinSize))
		m.nodeGroupMax.WithLabelValues(cluster, group.ID).Set(float64(group.MaxSize))
		m.nodeGroupTarget.WithLabelValues(cluster, group.ID).Set(float64(group.TargetSize))
		m.nodeGroupBackoff.WithLabelValues(cluster, group.ID, group.BackoffReason).Set(boolToFloat(!group.BackoffUntil.IsZero()))
	}
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
	} {
		vec.DeletePartialMatch(labels)
	}
}

func boolToFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
