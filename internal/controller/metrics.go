package controller

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// ConditionMetrics export the conditions of the ClusterAutoscalers the
// manager reconciles, as kube-state-metrics exports those of built-in
// objects: capi_autoscaler_clusterautoscaler_condition is 1 for the status
// and reason each condition has. The series of a ClusterAutoscaler are
// replaced as a whole when its status is written and go with it, so that no
// old status or reason lingers. A nil *ConditionMetrics records nothing.
type ConditionMetrics struct {
	desc *prometheus.Desc

	mu sync.Mutex
	// conditions are the series of each ClusterAutoscaler.
	conditions map[types.NamespacedName][]conditionSeries
}

// conditionSeries are the label values of one series, but for the
// ClusterAutoscaler's namespace and name.
type conditionSeries struct {
	cluster, conditionType, status, reason string
}

// NewConditionMetrics creates the condition metrics and registers them
// with registerer.
func NewConditionMetrics(registerer prometheus.Registerer) *ConditionMetrics {
	m := &ConditionMetrics{
		desc: prometheus.NewDesc("capi_autoscaler_clusterautoscaler_condition",
			"The conditions of each ClusterAutoscaler: 1 for the status and reason its condition of each type has. cluster is the Cluster it autoscales, as the engine's metrics name it.",
			[]string{"namespace", "name", "cluster", "type", "status", "reason"}, nil),
		conditions: map[types.NamespacedName][]conditionSeries{},
	}
	registerer.MustRegister(m)
	return m
}

// Describe implements prometheus.Collector.
func (m *ConditionMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.desc
}

// Collect implements prometheus.Collector.
func (m *ConditionMetrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	conditions := maps.Clone(m.conditions)
	m.mu.Unlock()
	for key, series := range conditions {
		for _, s := range series {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.GaugeValue, 1, key.Namespace, key.Name, s.cluster, s.conditionType, s.status, s.reason)
		}
	}
}

// record exports the conditions of ca as written to the API server; a
// ClusterAutoscaler whose deletion is complete, its finalizer removed,
// has none.
func (m *ConditionMetrics) record(ca *autoscalingv1alpha1.ClusterAutoscaler) {
	if m == nil {
		return
	}
	key := client.ObjectKeyFromObject(ca)
	if !ca.DeletionTimestamp.IsZero() && !controllerutil.ContainsFinalizer(ca, CleanupFinalizer) {
		m.forget(key)
		return
	}
	cluster := clusterKey(ca).String()
	series := make([]conditionSeries, 0, len(ca.Status.Conditions))
	for _, condition := range ca.Status.Conditions {
		series = append(series, conditionSeries{cluster: cluster, conditionType: condition.Type, status: string(condition.Status), reason: condition.Reason})
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.conditions[key] = series
}

// forget removes the series of a ClusterAutoscaler that is gone.
func (m *ConditionMetrics) forget(key types.NamespacedName) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conditions, key)
}
