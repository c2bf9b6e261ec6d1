package manager

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	deprecatederrors "sigs.k8s.io/cluster-api/api/deprecated/errors" //nolint:staticcheck // SA1019: the failure a provider of the v1beta1 contract reports.
	"sigs.k8s.io/cluster-api/util/flags"
	"sigs.k8s.io/cluster-api/util/kubeconfig"
	ctrl "sigs.k8s.io/controller-runtime"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/config/monitoring"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// Every metric, label and label value the alerting rules and the dashboard
// of config/monitoring select is one the manager serves: the manager runs
// here as Main runs it, against envtest, autoscaling the API server
// itself as a workload cluster, until each selector of every query selects
// at least one series of its /metrics. The cluster is made to show what
// the queries look for: resource limits, a node group with a failed
// Machine (a failed scale-up and a backoff), a ClusterAutoscaler refused
// because another owns its Cluster, and one whose workload cluster cannot
// be reached.
func TestMonitoringQueriesSelectTheManagersMetrics(t *testing.T) {
	// The fixtures assert with the default Gomega.
	RegisterTestingT(t)
	g := NewWithT(t)
	queries, err := monitoring.Queries()
	g.Expect(err).NotTo(HaveOccurred())
	env, err := testenv.Start(testenv.Options{
		CRDs:         []*apiextensionsv1.CustomResourceDefinition{testenv.InfrastructureMachineTemplateCRD()},
		AddToScheme:  []func(*runtime.Scheme) error{autoscalingv1alpha1.AddToScheme},
		WorkloadCRDs: true,
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	address := startManager(ctx, t, g, env)
	createMonitoredClusters(ctx, g, env)

	promql := parser.NewParser(parser.Options{})
	g.Eventually(func(g Gomega) {
		series := scrape(ctx, g, "http://"+address+"/metrics")
		var problems []string
		for _, query := range queries {
			expr, err := promql.ParseExpr(query.Expr)
			g.Expect(err).NotTo(HaveOccurred(), query.Where)
			for _, problem := range unmetSelections(expr, query.Labels, series) {
				problems = append(problems, query.Where+": "+problem)
			}
		}
		g.Expect(problems).To(BeEmpty())
	}, 2*time.Minute, time.Second).Should(Succeed())
}

// startManager runs the manager as run does, with its metrics over plain
// HTTP, until the test ends, and returns the address of its metrics.
func startManager(ctx context.Context, t *testing.T, g Gomega, env *testenv.Environment) string {
	t.Helper()
	ctrl.SetLogger(klog.Background())
	address := freeLocalAddress(g)
	opts := &commandLine{
		diagnostics:             flags.ManagerOptions{DiagnosticsAddress: address, InsecureDiagnostics: true, TLSMinVersion: "VersionTLS12"},
		healthProbeBindAddress:  "0",
		gracefulShutdownTimeout: 5 * time.Second,
		syncPeriod:              10 * time.Minute,
		concurrency:             2,
		clusterCacheConcurrency: 2,
	}
	mgrOpts, err := managerOptions(opts)
	g.Expect(err).NotTo(HaveOccurred())
	mgr, err := ctrl.NewManager(env.Config, mgrOpts)
	g.Expect(err).NotTo(HaveOccurred())
	recorder, stopRecording, err := controller.NewEventRecorder(ctx, mgr)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(stopRecording)
	reconciler, err := setupControllers(ctx, mgr, opts, recorder, nil)
	g.Expect(err).NotTo(HaveOccurred())
	managerCtx, stop := context.WithCancel(ctx)
	stopped := make(chan error)
	go func() { stopped <- mgr.Start(managerCtx) }()
	t.Cleanup(func() {
		stop()
		g.Expect(<-stopped).To(Succeed())
		// The workload cluster caches outlive the manager; their watches
		// would hold up the API server's shutdown.
		reconciler.ClusterCache.(interface{ Shutdown() }).Shutdown()
	})
	return address
}

// createMonitoredClusters creates what makes the manager export the series
// the queries select.
func createMonitoredClusters(ctx context.Context, g Gomega, env *testenv.Environment) {
	// A Cluster whose workload cluster is the API server itself, with a
	// node group whose Machine failed.
	reachable := testenv.NewFixture(ctx, env.Client)
	provision(ctx, g, env, reachable, env.Config.Host)
	group := reachable.MachineDeployment("md-0", 1, map[string]string{
		scalable.MinSizeAnnotation: "0",
		scalable.MaxSizeAnnotation: "3",
		template.CPUAnnotation:     "2",
		template.MemoryAnnotation:  "4Gi",
	})
	reachable.Create(ctx, group)
	machineSet := reachable.MachineSet("md-0-abc", 1, nil, group)
	reachable.Create(ctx, machineSet)
	failed := reachable.Machine("md-0-failed", machineSet)
	//nolint:staticcheck // SA1019: the failure a provider of the v1beta1 contract reports.
	failed.Status.Deprecated = &clusterv1.MachineDeprecatedStatus{V1Beta1: &clusterv1.MachineV1Beta1DeprecatedStatus{
		FailureReason:  ptr.To(deprecatederrors.CreateMachineError),
		FailureMessage: ptr.To("out of capacity"),
	}}
	reachable.Create(ctx, failed)
	g.Expect(env.Client.Create(ctx, clusterAutoscaler(reachable, "autoscaler", &autoscalingv1alpha1.ResourceLimits{
		MaxNodesTotal: ptr.To[int32](10),
		Cores:         &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](1), Max: ptr.To[int32](100)},
		Memory:        &autoscalingv1alpha1.ResourceRange{Max: ptr.To[int32](1000)},
		GPUs:          []autoscalingv1alpha1.GPULimit{{Type: "nvidia.com/gpu", Max: 4}},
	}))).To(Succeed())
	// The oldest owns the Cluster, the first by name within a second
	// ("autoscaler" before "second"): this one is refused.
	g.Expect(env.Client.Create(ctx, clusterAutoscaler(reachable, "second", nil))).To(Succeed())

	// A Cluster whose API server does not answer.
	unreachable := testenv.NewFixture(ctx, env.Client)
	provision(ctx, g, env, unreachable, "https://127.0.0.1:1")
	g.Expect(env.Client.Create(ctx, clusterAutoscaler(unreachable, "autoscaler", nil))).To(Succeed())
}

// provision gives the fixture's Cluster a kubeconfig Secret for server and
// reports its infrastructure provisioned, which is when the ClusterCache
// connects.
func provision(ctx context.Context, g Gomega, env *testenv.Environment, fixture *testenv.Fixture, server string) {
	config := rest.CopyConfig(env.Config)
	config.Host = server
	g.Expect(env.Client.Create(ctx, kubeconfig.GenerateSecret(fixture.Cluster, kubeconfig.FromEnvTestConfig(config, fixture.Cluster)))).To(Succeed())
	fixture.Cluster.Status.Initialization.InfrastructureProvisioned = ptr.To(true)
	g.Expect(env.Client.Status().Update(ctx, fixture.Cluster)).To(Succeed())
}

func clusterAutoscaler(fixture *testenv.Fixture, name string, limits *autoscalingv1alpha1.ResourceLimits) *autoscalingv1alpha1.ClusterAutoscaler {
	return &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: name},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:    fixture.Cluster.Name,
			ScanInterval:   &metav1.Duration{Duration: time.Second},
			ResourceLimits: limits,
		},
	}
}

// scrape returns the series the metrics endpoint serves, by name, as
// Prometheus stores them: a histogram as its _bucket, _count and _sum
// series, a summary as its quantiles, _count and _sum.
func scrape(ctx context.Context, g Gomega, url string) map[string][]labels.Labels {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	response, err := http.DefaultClient.Do(request)
	g.Expect(err).NotTo(HaveOccurred())
	defer response.Body.Close()
	g.Expect(response.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(response.Body)
	g.Expect(err).NotTo(HaveOccurred())
	textParser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := textParser.TextToMetricFamilies(strings.NewReader(string(body)))
	g.Expect(err).NotTo(HaveOccurred())

	series := map[string][]labels.Labels{}
	add := func(name string, metric *dto.Metric, extra ...string) {
		builder := labels.NewScratchBuilder(len(metric.GetLabel()) + 1)
		for _, label := range metric.GetLabel() {
			builder.Add(label.GetName(), label.GetValue())
		}
		for i := 0; i+1 < len(extra); i += 2 {
			builder.Add(extra[i], extra[i+1])
		}
		builder.Sort()
		series[name] = append(series[name], builder.Labels())
	}
	for name, family := range families {
		for _, metric := range family.GetMetric() {
			switch family.GetType() {
			case dto.MetricType_HISTOGRAM:
				for _, bucket := range metric.GetHistogram().GetBucket() {
					add(name+"_bucket", metric, model.BucketLabel, fmt.Sprint(bucket.GetUpperBound()))
				}
				add(name+"_count", metric)
				add(name+"_sum", metric)
			case dto.MetricType_SUMMARY:
				for _, quantile := range metric.GetSummary().GetQuantile() {
					add(name, metric, model.QuantileLabel, fmt.Sprint(quantile.GetQuantile()))
				}
				add(name+"_count", metric)
				add(name+"_sum", metric)
			default:
				add(name, metric)
			}
		}
	}
	return series
}

// unmetSelections says what of expr the series do not have: a metric whose
// selector selects none of them, a label of a by () or on () clause, or
// one of read, that some metric below it does not have.
func unmetSelections(expr parser.Expr, read []string, series map[string][]labels.Labels) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			if !slices.ContainsFunc(series[n.Name], func(s labels.Labels) bool { return matchesAll(n.LabelMatchers, s) }) {
				problems = append(problems, fmt.Sprintf("%s selects no series", n))
			}
			for _, label := range read {
				problems = append(problems, missingLabel(label, n, series)...)
			}
		case *parser.AggregateExpr:
			if !n.Without {
				for _, label := range n.Grouping {
					problems = append(problems, missingLabelBelow(label, n.Expr, series)...)
				}
			}
		case *parser.BinaryExpr:
			if matching := n.VectorMatching; matching != nil && matching.On {
				for _, label := range matching.MatchingLabels {
					problems = append(problems, missingLabelBelow(label, n.LHS, series)...)
					problems = append(problems, missingLabelBelow(label, n.RHS, series)...)
				}
			}
		}
		return nil
	})
	return problems
}

func matchesAll(matchers []*labels.Matcher, s labels.Labels) bool {
	for _, matcher := range matchers {
		if matcher.Name != model.MetricNameLabel && !matcher.Matches(s.Get(matcher.Name)) {
			return false
		}
	}
	return true
}

// missingLabelBelow reports the metrics under expr without label.
func missingLabelBelow(label string, expr parser.Expr, series map[string][]labels.Labels) []string {
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if selector, ok := node.(*parser.VectorSelector); ok {
			problems = append(problems, missingLabel(label, selector, series)...)
		}
		return nil
	})
	return problems
}

func missingLabel(label string, selector *parser.VectorSelector, series map[string][]labels.Labels) []string {
	if slices.ContainsFunc(series[selector.Name], func(s labels.Labels) bool { return s.Has(label) }) {
		return nil
	}
	return []string{fmt.Sprintf("%s has no label %s", selector.Name, label)}
}
