package monitoring_test

import (
	"bufio"
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/capi-autoscaler/capi-autoscaler/config/monitoring"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
)

// promql parses as Prometheus does, with no experimental feature on.
var promql = parser.NewParser(parser.Options{})

func TestEveryExpressionParses(t *testing.T) {
	queries, err := monitoring.Queries()
	if err != nil {
		t.Fatal(err)
	}
	for _, query := range queries {
		if _, err := promql.ParseExpr(query.Expr); err != nil {
			t.Errorf("%s: %v", query.Where, err)
		}
	}
	if len(queries) < len(alertRules(t)) {
		t.Errorf("only %d queries: the dashboard's are missing", len(queries))
	}
}

// alertRules loads the rule groups as Prometheus' rule loader does, and
// returns their alerting rules.
func alertRules(t *testing.T) []rulefmt.Rule {
	t.Helper()
	content, err := monitoring.RuleGroups()
	if err != nil {
		t.Fatal(err)
	}
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	var alerts []rulefmt.Rule
	for _, group := range groups.Groups {
		for _, rule := range group.Rules {
			if rule.Alert == "" {
				t.Errorf("recording rule %s: the file holds alerts only", rule.Record)
			}
			alerts = append(alerts, rule)
		}
	}
	return alerts
}

// runbooks is where every alert's runbook_url points, an anchor added.
const runbooks = "https://github.com/capi-autoscaler/capi-autoscaler/blob/main/docs/runbooks.md#"

func TestEveryAlertHasARunbookASeverityAndASummary(t *testing.T) {
	anchors := markdownAnchors(t, filepath.Join("..", "..", "docs", "runbooks.md"))
	for _, alert := range alertRules(t) {
		g := NewWithT(t)
		g.Expect(alert.Labels).To(HaveKeyWithValue("severity", BeElementOf("critical", "warning")), alert.Alert)
		g.Expect(alert.Annotations).To(HaveKeyWithValue("summary", Not(BeEmpty())), alert.Alert)
		g.Expect(alert.Annotations).To(HaveKeyWithValue("description", Not(BeEmpty())), alert.Alert)
		g.Expect(alert.Annotations).To(HaveKeyWithValue("runbook_url", runbooks+strings.ToLower(alert.Alert)), alert.Alert)
		g.Expect(anchors).To(ContainElement(strings.ToLower(alert.Alert)), "docs/runbooks.md has no section %s", alert.Alert)
	}
}

// markdownAnchors are the anchors GitHub gives the headings of a Markdown
// file: lower case, punctuation but hyphens and underscores dropped,
// spaces made hyphens.
func markdownAnchors(t *testing.T, path string) []string {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	punctuation := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	var anchors []string
	scanner := bufio.NewScanner(bytes.NewReader(content))
	inCode := false
	for scanner.Scan() {
		line := scanner.Text()
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors = append(anchors, strings.ReplaceAll(punctuation.ReplaceAllString(strings.ToLower(heading), ""), " ", "-"))
	}
	return anchors
}

// alertCase records series and says, at some times, which alerts of one
// rule must fire: none at the other times checked.
type alertCase struct {
	name string
	// series is a promqltest load command, from time 0.
	series string
	checks []alertCheck
}

type alertCheck struct {
	at time.Duration
	// firing are the labels of the alerts that fire, but the rule's own.
	firing []string
}

// alertCases are the cases of each alert, by name. Every alert has some.
var alertCases = map[string][]alertCase{
	"CapiAutoscalerLoopsFailing": {{
		name: "fires after 10 minutes of most loops failing, not for a third failing or for an unreachable cluster, and stops once they succeed",
		series: `
load 1m
  cluster_autoscaler_function_duration_seconds_count{cluster="default/failing", function="main"} 0+6x40
  cluster_autoscaler_errors_total{cluster="default/failing", type="loop"}                        0+6x20 120x20
  cluster_autoscaler_function_duration_seconds_count{cluster="default/flaky", function="main"}   0+6x40
  cluster_autoscaler_errors_total{cluster="default/flaky", type="loop"}                          0+2x40
  cluster_autoscaler_function_duration_seconds_count{cluster="default/away", function="main"}    0+6x40
  cluster_autoscaler_errors_total{cluster="default/away", type="loop"}                           0+6x40
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="away", cluster="default/away", type="Ready", status="False", reason="WorkloadClusterUnreachable"} 1x40
`,
		checks: []alertCheck{
			{at: 10 * time.Minute},
			{at: 12 * time.Minute, firing: []string{`{cluster="default/failing"}`}},
			{at: 26 * time.Minute},
		},
	}},
	"CapiAutoscalerLoopsStalled": {{
		name: "fires 10 minutes after the last loop, not while loops finish",
		// last_activity is the time of the last loop, in seconds.
		series: `
load 1m
  cluster_autoscaler_last_activity{cluster="default/stuck", activity="main"}   0+60x10 600x20
  cluster_autoscaler_last_activity{cluster="default/looping", activity="main"} 0+60x30
`,
		checks: []alertCheck{
			{at: 19 * time.Minute},
			{at: 21 * time.Minute, firing: []string{`{cluster="default/stuck"}`}},
		},
	}},
	"CapiAutoscalerWorkloadClusterUnreachable": {{
		name: "fires after 10 minutes unreachable or without a usable kubeconfig, not for other reasons or a shorter outage",
		series: `
load 1m
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="a", cluster="default/a", type="Ready", status="False", reason="WorkloadClusterUnreachable"} 1x20
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="b", cluster="default/b", type="Ready", status="False", reason="WorkloadKubeconfigNotFound"} 1x20
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="c", cluster="default/c", type="Ready", status="False", reason="WorkloadClusterUnreachable"} 1x5 stale
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="c", cluster="default/c", type="Ready", status="True", reason="Running"} _x6 1x14
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="d", cluster="default/d", type="Ready", status="False", reason="LoopFailed"} 1x20
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="e", cluster="default/e", type="Ready", status="False", reason="WorkloadKubeconfigForbidden"} 1x20
`,
		checks: []alertCheck{
			{at: 9 * time.Minute},
			{at: 11 * time.Minute, firing: []string{
				`{cluster="default/a", name="a", namespace="default", reason="WorkloadClusterUnreachable"}`,
				`{cluster="default/b", name="b", namespace="default", reason="WorkloadKubeconfigNotFound"}`,
				`{cluster="default/e", name="e", namespace="default", reason="WorkloadKubeconfigForbidden"}`,
			}},
		},
	}},
	"CapiAutoscalerClusterUnsafeToAutoscale": {{
		name: "fires after 15 minutes unsafe, across a failover, not for a shorter spell",
		series: `
load 1m
  cluster_autoscaler_cluster_safe_to_autoscale{cluster="default/a", pod="manager-1"} 0x10 stale
  cluster_autoscaler_cluster_safe_to_autoscale{cluster="default/a", pod="manager-2"} _x11 0x19
  cluster_autoscaler_cluster_safe_to_autoscale{cluster="default/b", pod="manager-1"} 1x5 0x10 1x15
`,
		checks: []alertCheck{
			{at: 14 * time.Minute},
			{at: 16 * time.Minute, firing: []string{`{cluster="default/a"}`}},
			{at: 25 * time.Minute, firing: []string{`{cluster="default/a"}`}},
		},
	}},
	"CapiAutoscalerUnschedulablePodsNoScaleUp": {{
		name: "fires after 15 minutes of pods no group helps, not for a shorter spell",
		series: `
load 1m
  cluster_autoscaler_no_scale_up_pods_count{cluster="default/a"} 2x30
  cluster_autoscaler_no_scale_up_pods_count{cluster="default/b"} 0x5 3x10 0x15
  cluster_autoscaler_no_scale_up_pods_count{cluster="default/c"} 0x30
`,
		checks: []alertCheck{
			{at: 14 * time.Minute},
			{at: 16 * time.Minute, firing: []string{`{cluster="default/a"}`}},
			{at: 30 * time.Minute, firing: []string{`{cluster="default/a"}`}},
		},
	}},
	"CapiAutoscalerResourceLimitReached": {{
		name: "fires after 15 minutes of scale-ups refused by a limit, not for one refusal or for limits that refuse none",
		series: `
load 1m
  cluster_autoscaler_skipped_scale_events_count{cluster="default/a", direction="up", reason="CpuResourceLimit"}    0+6x30
  cluster_autoscaler_skipped_scale_events_count{cluster="default/a", direction="up", reason="MemoryResourceLimit"} 0x30
  cluster_autoscaler_skipped_scale_events_count{cluster="default/b", direction="up", reason="CpuResourceLimit"}    0x5 1x25
`,
		checks: []alertCheck{
			{at: 15 * time.Minute},
			{at: 17 * time.Minute, firing: []string{`{cluster="default/a", reason="CpuResourceLimit"}`}},
		},
	}},
	"CapiAutoscalerNodeGroupBackoff": {{
		name: "fires past a first backoff of 5 minutes, not for one",
		series: `
load 1m
  cluster_autoscaler_node_group_backoff_status{cluster="default/a", node_group="MachineDeployment/default/md-0", reason="ScaleUpTimedOut"} 1x5 stale
  cluster_autoscaler_node_group_backoff_status{cluster="default/a", node_group="MachineDeployment/default/md-0", reason=""}                _x6 0x24
  cluster_autoscaler_node_group_backoff_status{cluster="default/a", node_group="MachineDeployment/default/md-1", reason=""}                0x4 stale
  cluster_autoscaler_node_group_backoff_status{cluster="default/a", node_group="MachineDeployment/default/md-1", reason="MachineFailed"}   _x5 1x9 stale
  cluster_autoscaler_node_group_backoff_status{cluster="default/a", node_group="MachineDeployment/default/md-1", reason=""}                _x16 0x14
`,
		checks: []alertCheck{
			{at: 5 * time.Minute},
			{at: 10 * time.Minute},
			{at: 12 * time.Minute, firing: []string{`{cluster="default/a", node_group="MachineDeployment/default/md-1", reason="MachineFailed"}`}},
			{at: 16 * time.Minute},
		},
	}},
	"CapiAutoscalerConfigurationNotApplied": {{
		name: "fires after 5 minutes not applied, whatever the reason, not for one applied",
		series: `
load 1m
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="owner", cluster="default/a", type="ConfigurationApplied", status="True", reason="Applied"}                      1x20
  capi_autoscaler_clusterautoscaler_condition{namespace="default", name="second", cluster="default/a", type="ConfigurationApplied", status="False", reason="ClusterAlreadyAutoscaled"} 1x20
  capi_autoscaler_clusterautoscaler_condition{namespace="other", name="old", cluster="other/b", type="ConfigurationApplied", status="False", reason="InvalidConfiguration"}            _x3 1x17
`,
		checks: []alertCheck{
			{at: 4 * time.Minute},
			{at: 6 * time.Minute, firing: []string{`{cluster="default/a", name="second", namespace="default", reason="ClusterAlreadyAutoscaled"}`}},
			{at: 9 * time.Minute, firing: []string{
				`{cluster="default/a", name="second", namespace="default", reason="ClusterAlreadyAutoscaled"}`,
				`{cluster="other/b", name="old", namespace="other", reason="InvalidConfiguration"}`,
			}},
		},
	}},
	"CapiAutoscalerReplicasOverwritten": {{
		name: "fires on a second overwrite within 30 minutes, not on one, until the first is 30 minutes old",
		series: `
load 1m
  cluster_autoscaler_node_group_replicas_overwritten_total{cluster="default/a", node_group="MachineDeployment/default/md-0"} 0x5 1x45
  cluster_autoscaler_node_group_replicas_overwritten_total{cluster="default/a", node_group="MachineDeployment/default/md-1"} 0x5 1x3 2x41
`,
		checks: []alertCheck{
			{at: 9 * time.Minute},
			{at: 10 * time.Minute, firing: []string{`{cluster="default/a", node_group="MachineDeployment/default/md-1"}`}},
			{at: 34 * time.Minute, firing: []string{`{cluster="default/a", node_group="MachineDeployment/default/md-1"}`}},
			{at: 36 * time.Minute},
		},
	}},
	"CapiAutoscalerEnginePanicked": {{
		name: "fires at a panic and for 30 minutes, not before",
		series: `
load 1m
  cluster_autoscaler_engine_panics_total{cluster="default/a"} 0x5 1x40
  cluster_autoscaler_engine_panics_total{cluster="default/b"} 0x45
`,
		checks: []alertCheck{
			{at: 5 * time.Minute},
			{at: 6 * time.Minute, firing: []string{`{cluster="default/a"}`}},
			{at: 34 * time.Minute, firing: []string{`{cluster="default/a"}`}},
			{at: 36 * time.Minute},
		},
	}},
}

// evaluationInterval is how often the rules are evaluated in the tests, as
// Prometheus' default evaluation_interval.
const evaluationInterval = time.Minute

func TestAlertsFireWhenTheyShouldAndNotOtherwise(t *testing.T) {
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	labelReference := regexp.MustCompile(`\$labels\.(\w+)`)
	tested := map[string]bool{}
	for _, alert := range alertRules(t) {
		tested[alert.Alert] = true
		for _, tc := range alertCases[alert.Alert] {
			t.Run(alert.Alert+"/"+tc.name, func(t *testing.T) {
				g := NewWithT(t)
				storage := promqltest.LoadedStorage(t, tc.series)
				t.Cleanup(func() { _ = storage.Close() })
				expr, err := promql.ParseExpr(alert.Expr)
				g.Expect(err).NotTo(HaveOccurred())
				rule := rules.NewAlertingRule(alert.Alert, expr, time.Duration(alert.For), 0,
					labels.FromMap(alert.Labels), labels.FromMap(alert.Annotations), labels.EmptyLabels(), "", true, nil)
				query := rules.EngineQueryFunc(engine, storage)

				checks := slices.Clone(tc.checks)
				for at := time.Duration(0); len(checks) > 0; at += evaluationInterval {
					_, err := rule.Eval(context.Background(), 0, time.Unix(0, 0).UTC().Add(at), query, nil, 0)
					g.Expect(err).NotTo(HaveOccurred())
					if checks[0].at != at {
						continue
					}
					var firing []string
					for _, active := range rule.ActiveAlerts() {
						if active.State != rules.StateFiring {
							continue
						}
						firing = append(firing, active.Labels.MatchLabels(false, "alertname", "severity").String())
						// The annotations name only labels the alert has.
						for _, annotation := range slices.Sorted(maps.Values(alert.Annotations)) {
							for _, match := range labelReference.FindAllStringSubmatch(annotation, -1) {
								g.Expect(active.Labels.Has(match[1])).To(BeTrue(), "%q names label %s, which the alert does not have", annotation, match[1])
							}
						}
					}
					g.Expect(firing).To(ConsistOf(checks[0].firing), "firing at %s", at)
					checks = checks[1:]
				}
			})
		}
	}
	for name, cases := range alertCases {
		if !tested[name] {
			t.Errorf("cases of %s, which prometheusrule.yaml does not have", name)
		}
		if len(cases) == 0 {
			t.Errorf("%s has no case", name)
		}
	}
	for name := range tested {
		if len(alertCases[name]) == 0 {
			t.Errorf("%s has no case: add one to alertCases", name)
		}
	}
}

// The component as docs/operations.md installs it: listed in the
// components of config/default, whose namespace and name prefix it takes.
func TestComponentInTheDefaultConfiguration(t *testing.T) {
	memory := filesys.MakeFsInMemory()
	config := ".."
	err := filepath.WalkDir(config, func(path string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return memory.WriteFile(filepath.Join("/config", strings.TrimPrefix(path, config)), content)
	})
	if err != nil {
		t.Fatal(err)
	}
	kustomization, err := memory.ReadFile("/config/default/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kustomization = append(kustomization, "\ncomponents:\n- ../monitoring\n"...)
	if err := memory.WriteFile("/config/default/kustomization.yaml", kustomization); err != nil {
		t.Fatal(err)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(memory, "/config/default")
	if err != nil {
		t.Fatal(err)
	}
	var objects []*unstructured.Unstructured
	for _, resource := range resources.Resources() {
		fields, err := resource.Map()
		if err != nil {
			t.Fatal(err)
		}
		objects = append(objects, &unstructured.Unstructured{Object: fields})
	}
	expectScrapedAndShown(t, objects, objects)
}

// The release's monitoring.yaml, beside the manager of addon-components.yaml.
func TestReleaseFile(t *testing.T) {
	objects, err := kustomize.Build(filepath.Join("..", "monitoring-release"))
	if err != nil {
		t.Fatal(err)
	}
	components, err := kustomize.Build(filepath.Join("..", "release"))
	if err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)
	g.Expect(objects).To(HaveLen(4), "the Service, the ServiceMonitor, the PrometheusRule and the dashboard")
	for _, object := range objects {
		// clusterctl upgrade would delete what carries its provider label.
		g.Expect(object.GetLabels()).NotTo(HaveKey("cluster.x-k8s.io/provider"), object.GetName())
	}
	expectScrapedAndShown(t, objects, components)
}

// expectScrapedAndShown checks, among the objects of monitoring and of
// the manager's installation, that the ServiceMonitor scrapes the
// manager's metrics port through the Service, in the manager's namespace,
// with the role Prometheus needs installed, and that the dashboard's
// ConfigMap holds dashboard.json for Grafana's sidecar.
func expectScrapedAndShown(t *testing.T, monitoringObjects, installation []*unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	// Read field by field: the release's Deployment has clusterctl
	// variables where quantities go.
	deployment := find(t, installation, "Deployment", "capi-autoscaler-controller-manager")
	podLabels, _, _ := unstructured.NestedStringMap(deployment.Object, "spec", "template", "metadata", "labels")
	containers, _, _ := unstructured.NestedFieldNoCopy(deployment.Object, "spec", "template", "spec", "containers")
	g.Expect(containers).NotTo(BeEmpty())
	var containerPorts []string
	ports, _, _ := unstructured.NestedFieldNoCopy(containers.([]any)[0].(map[string]any), "ports")
	for _, port := range ports.([]any) {
		containerPorts = append(containerPorts, port.(map[string]any)["name"].(string))
	}
	g.Expect(find(t, installation, "ClusterRole", "capi-autoscaler-metrics-reader")).NotTo(BeNil())

	var service corev1.Service
	convert(t, find(t, monitoringObjects, "Service", "capi-autoscaler-controller-manager-metrics"), &service)
	g.Expect(service.Namespace).To(Equal(deployment.GetNamespace()))
	g.Expect(podLabels).To(haveEntries(service.Spec.Selector), "the Service selects the manager's pods")
	g.Expect(service.Spec.Ports).To(HaveLen(1))
	g.Expect(containerPorts).To(ContainElement(service.Spec.Ports[0].TargetPort.StrVal))

	monitor := find(t, monitoringObjects, "ServiceMonitor", "capi-autoscaler-controller-manager-metrics")
	g.Expect(monitor.GetNamespace()).To(Equal(deployment.GetNamespace()))
	selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	g.Expect(service.Labels).To(haveEntries(selector), "the ServiceMonitor selects the Service")
	endpoints, _, _ := unstructured.NestedFieldNoCopy(monitor.Object, "spec", "endpoints")
	g.Expect(endpoints).To(ConsistOf(And(
		HaveKeyWithValue("port", service.Spec.Ports[0].Name),
		HaveKeyWithValue("scheme", "https"),
		HaveKeyWithValue("honorLabels", true),
	)))

	rule := find(t, monitoringObjects, "PrometheusRule", "capi-autoscaler-alerts")
	g.Expect(rule.GetNamespace()).To(Equal(deployment.GetNamespace()))

	var dashboard corev1.ConfigMap
	convert(t, find(t, monitoringObjects, "ConfigMap", "capi-autoscaler-dashboard"), &dashboard)
	g.Expect(dashboard.Labels).To(HaveKeyWithValue("grafana_dashboard", "1"))
	source, err := os.ReadFile("dashboard.json")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dashboard.Data).To(Equal(map[string]string{"capi-autoscaler.json": string(source)}))
}

// haveEntries matches a map that has every key and value of subset, which
// must not be empty.
func haveEntries(subset map[string]string) OmegaMatcher {
	matchers := make([]OmegaMatcher, 0, len(subset))
	for key, value := range subset {
		matchers = append(matchers, HaveKeyWithValue(key, value))
	}
	return And(append(matchers, Not(BeEmpty()))...)
}

func find(t *testing.T, objects []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, object := range objects {
		if object.GetKind() == kind && object.GetName() == name {
			return object
		}
	}
	t.Fatalf("no %s %s", kind, name)
	return nil
}

func convert(t *testing.T, object *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(object.Object, into); err != nil {
		t.Fatal(err)
	}
}
