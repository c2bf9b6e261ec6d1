package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// A Metric is one metric the manager registers.
type Metric struct {
	Name, Type, Help string
	Labels           []string
}

// collectors remembers what is registered with it.
type collectors struct {
	prometheus.Registerer
	registered []prometheus.Collector
}

// MustRegister registers with the registry and remembers cs.
func (c *collectors) MustRegister(cs ...prometheus.Collector) {
	c.Registerer.MustRegister(cs...)
	c.registered = append(c.registered, cs...)
}

// Register registers with the registry and remembers collector.
func (c *collectors) Register(collector prometheus.Collector) error {
	if err := c.Registerer.Register(collector); err != nil {
		return err
	}
	c.registered = append(c.registered, collector)
	return nil
}

// descString parses what prometheus.Desc.String says, the only way a
// Desc tells its name, help and labels.
var descString = regexp.MustCompile(`^Desc\{fqName: "([^"]*)", help: "((?:[^"\\]|\\.)*)", constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}\}$`)

// Metrics are the metrics the manager registers (internal/manager): the
// engine's and the ClusterAutoscaler conditions'.
func Metrics() ([]Metric, error) {
	c := &collectors{Registerer: prometheus.NewRegistry()}
	autoscaler.NewMetrics(c)
	controller.NewConditionMetrics(c)
	var metrics []Metric
	for _, collector := range c.registered {
		descs := make(chan *prometheus.Desc, 16)
		go func() {
			collector.Describe(descs)
			close(descs)
		}()
		for desc := range descs {
			m := descString.FindStringSubmatch(desc.String())
			if m == nil {
				return nil, fmt.Errorf("unexpected metric description %s", desc)
			}
			var labels []string
			for label := range strings.SplitSeq(m[3], ",") {
				if label = strings.TrimSpace(label); label != "" {
					labels = append(labels, label)
				}
			}
			help := strings.NewReplacer(`\"`, `"`, `\\`, `\`).Replace(m[2])
			metrics = append(metrics, Metric{Name: m[1], Type: metricType(collector), Help: help, Labels: labels})
		}
	}
	slices.SortFunc(metrics, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return metrics, nil
}

func metricType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.HistogramVec:
		return "histogram"
	case *controller.ConditionMetrics:
		// Its series are collected as gauges (kube-state-metrics' style).
		return "gauge"
	}
	return "other"
}
