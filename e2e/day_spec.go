//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// DaySpecInput is the input of DaySpec.
type DaySpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
	// Hour is how long one hour of the compressed day lasts.
	Hour time.Duration
	// ManagerLog is the log of the manager: the nodes consolidation
	// removed are read from it.
	ManagerLog string
	// ReportPath, when set, is a file the figures are written to.
	ReportPath string
	// Runs are the days to live, one after the other: "off" (no
	// consolidation), "Balanced" (its defaults), "Replace" (to see what
	// Balanced's threshold holds back), or the budget.nodes of a Balanced
	// one, e.g. "50%", to see what the default budget holds back.
	Runs []string
}

// dayLoad is the share of its peak replicas each workload runs, hour by
// hour from 6:00 to 5:00 the next day: the night's level, a ramp up, a
// peak with dips, a ramp down, the night. The night runs half the peak,
// as services that other time zones use still do: the ReplicaSets, which
// take their pods off the nodes that run most of them, spread the ramp
// down's removals over the peak's nodes and leave them partly used, most
// above the scale-down utilization threshold (0.5, upstream's default),
// where scale-down keeps them: the fragmented cluster upstream's
// scale-down efficiency benchmark starts from. The day starts at the
// night's level, as the day after this one would.
var dayLoad = [24]float64{
	0.5, 0.65, 0.85, 1, 0.9, 1, 0.95, 0.85, 0.9, 1, 0.9, 0.8, // 6:00-17:00
	0.65, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, // 18:00-5:00
}

// dayGroup is a node group of the day: its machines' cpus and price.
type dayGroup struct {
	name, cpu, price string
	minSize, maxSize int
	replicas         int32
}

// Larger machines cost a little less per cpu, as cloud families often do.
var dayGroups = []dayGroup{
	{name: "small", cpu: "2", price: "0.1", minSize: 1, maxSize: 12, replicas: 1},
	{name: "medium", cpu: "4", price: "0.19", minSize: 1, maxSize: 10, replicas: 1},
	{name: "large", cpu: "8", price: "0.36", minSize: 0, maxSize: 6},
}

// dayWorkload is a Deployment of the day: pods of one size, on any node
// group or on one (pool), from min replicas at no load to max at the peak.
type dayWorkload struct {
	name, cpu, pool string
	min, max        int32
}

var dayWorkloads = []dayWorkload{
	{name: "web", cpu: "500m", min: 2, max: 24},
	{name: "api", cpu: "1", min: 1, max: 10},
	{name: "worker", cpu: "1500m", pool: "medium", min: 1, max: 8},
	{name: "batch", cpu: "3", pool: "large", min: 0, max: 5},
	{name: "edge", cpu: "250m", pool: "small", min: 1, max: 10},
}

// replicasAt is the fixed number of pods a workload runs at an hour of
// the day.
func (w dayWorkload) replicasAt(hour int) int32 {
	return w.min + int32(math.Round(float64(w.max-w.min)*dayLoad[hour]))
}

// dayRun is one Cluster living through the day.
type dayRun struct {
	name          string
	consolidation *autoscalingv1alpha1.ConsolidationConfig
	// Measured at the end of the day and once it settled.
	seconds     map[string]float64
	cost        float64
	evictions   []framework.Eviction
	violations  []string
	utilization float64
	nodes       int
	layout      string
	// consolidated are the nodes consolidation removed.
	consolidated map[string]bool
}

// DaySpec runs a compressed day on a Cluster for each of the runs, one
// after the other (the Clusters of a local stack share its workload API
// server: side by side, each engine would see the others' nodes and
// taints), and compares what their nodes cost, the pods each disrupted and
// the utilization each is left with.
func DaySpec(ctx context.Context, inputGetter func() DaySpecInput) {
	var input DaySpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DaySpec needs a stack")
		Expect(input.Hour).To(BeNumerically(">", 0))
		Expect(input.Runs).NotTo(BeEmpty())
	})

	It("costs less with consolidation, without moving a pod again within consolidateAfter", func() {
		consolidateAfter := input.Hour / 2
		prices := map[string]float64{}
		for _, g := range dayGroups {
			price, err := strconv.ParseFloat(g.price, 64)
			Expect(err).NotTo(HaveOccurred())
			prices[g.name] = price
		}
		var runs []*dayRun
		for _, name := range input.Runs {
			run := &dayRun{name: name}
			if name != "off" {
				run.consolidation = &autoscalingv1alpha1.ConsolidationConfig{
					Policy:           autoscalingv1alpha1.ConsolidationBalanced,
					ConsolidateAfter: &metav1.Duration{Duration: consolidateAfter},
				}
				switch name {
				case "Balanced":
				case "Replace":
					run.consolidation.Policy = autoscalingv1alpha1.ConsolidationReplace
				default:
					run.consolidation.Budget = &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To(name)}
					run.name = "Balanced, budget " + name
				}
			}
			runs = append(runs, run)
		}
		for i, run := range runs {
			liveTheDay(ctx, input, run, fmt.Sprintf("run%d", i), prices)
		}

		By("Reporting what the days cost")
		report := dayReport(runs, input.Hour, consolidateAfter)
		AddReportEntry("a day on the local stack", report)
		GinkgoWriter.Println(report)
		if input.ReportPath != "" {
			Expect(os.WriteFile(input.ReportPath, []byte(report), 0o644)).To(Succeed())
		}
		for _, run := range runs {
			Expect(run.violations).To(BeEmpty(), "%s", run.name)
			if run.consolidation == nil {
				Expect(run.consolidated).To(BeEmpty())
				continue
			}
			Expect(run.consolidated).NotTo(BeEmpty(), "%s consolidated nothing", run.name)
			Expect(youngEvictions(run.evictions, run.consolidated, consolidateAfter)).To(BeEmpty(),
				"%s: consolidation evicted pods bound less than consolidateAfter before:\n%s", run.name, report)
			if runs[0].consolidation == nil {
				Expect(run.cost).To(BeNumerically("<", runs[0].cost), "%s made the day no cheaper:\n%s", run.name, report)
			}
		}
	})
}

// liveTheDay creates a Cluster of the day's groups and workloads, lives
// through the day, measures it once it settled, and deletes the Cluster.
func liveTheDay(ctx context.Context, input DaySpecInput, run *dayRun, prefix string, prices map[string]float64) {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	By("Creating a Cluster of three priced node groups, consolidation " + run.name)
	namespace := framework.CreateSpecNamespace(ctx, input.Stack, "day-"+prefix)
	cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
	DeferCleanup(func() {
		if err := mgmt.Get(ctx, client.ObjectKeyFromObject(cluster), &clusterv1.Cluster{}); err == nil {
			framework.DeleteCluster(ctx, mgmt, cluster)
		}
	})
	invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, CheckEvictions: true})
	evictions := framework.RecordEvictions(ctx, input.Stack, namespace.Name)
	for _, g := range dayGroups {
		annotations := framework.SizeAnnotations(g.minSize, g.maxSize)
		annotations[template.PriceAnnotation] = g.price
		md := framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
			Client: mgmt, Cluster: cluster, Name: g.name, Replicas: ptr.To(g.replicas), Annotations: annotations,
			Labels:  map[string]string{framework.ClusterLabel: cluster.Name, poolLabel: g.name},
			Machine: framework.SimMachine(g.cpu),
		})
		framework.WaitForTemplateCapacity(ctx, mgmt, md)
		framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: int(g.replicas)})
	}
	var workloads []*appsv1.Deployment
	for _, w := range dayWorkloads {
		nodeSelector := map[string]string{framework.ClusterLabel: cluster.Name}
		if w.pool != "" {
			nodeSelector[poolLabel] = w.pool
		}
		// At zero replicas until the day starts.
		workloads = append(workloads, framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: w.name, Replicas: 0,
			Requests: framework.CPURequest(w.cpu), NodeSelector: nodeSelector,
		}))
	}
	spec := framework.FastClusterAutoscalerSpec(cluster.Name)
	spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriceExpander, autoscalingv1alpha1.LeastWasteExpander}
	spec.Consolidation = run.consolidation
	ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
	meter := framework.StartCostMeter(ctx, framework.CostMeterInput{Client: mgmt, Cluster: cluster, Prices: prices, Interval: time.Second})

	By(fmt.Sprintf("Living through the day, one hour every %s", input.Hour))
	dayStart := time.Now()
	for hour := range dayLoad {
		for i, w := range dayWorkloads {
			framework.PatchObject(ctx, workload, workloads[i], false, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To(w.replicasAt(hour)) })
		}
		GinkgoWriter.Printf("%s %02d:00 load %.2f: %d nodes, %.2f so far\n", run.name, (hour+6)%24, dayLoad[hour],
			len(framework.ClusterNodes(ctx, Default, workload, cluster)), meter.Cost(input.Hour))
		select {
		case <-ctx.Done():
			Fail("the suite ended in the middle of the day")
		case <-time.After(time.Until(dayStart.Add(time.Duration(hour+1) * input.Hour))):
		}
	}
	run.seconds = meter.MachineSeconds()
	run.cost = meter.Cost(input.Hour)

	By("Waiting for the Cluster to settle at the night's load: every pod Running, its nodes the same for two hours")
	stableSince, last := time.Now(), ""
	Eventually(func(g Gomega) {
		var names []string
		for _, node := range framework.ClusterNodes(ctx, g, workload, cluster) {
			names = append(names, node.Name)
		}
		slices.Sort(names)
		if key := strings.Join(names, ","); key != last {
			last, stableSince = key, time.Now()
		}
		for _, d := range workloads {
			running := 0
			for _, pod := range framework.PodsOf(ctx, g, workload, d) {
				if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning {
					running++
				}
			}
			g.Expect(running).To(BeEquivalentTo(*d.Spec.Replicas), "pods of %s Running", d.Name)
		}
		g.Expect(time.Since(stableSince)).To(BeNumerically(">=", 2*input.Hour), "the nodes changed %s ago", time.Since(stableSince))
	}, 20*input.Hour, framework.AutoscalerPoll).Should(Succeed())
	run.utilization = framework.CPUUtilization(ctx, Default, workload, cluster)
	run.nodes = len(framework.ClusterNodes(ctx, Default, workload, cluster))
	run.layout = framework.NodeLayout(ctx, Default, workload, cluster, poolLabel)
	run.consolidated = consolidatedNodes(input.ManagerLog, cluster)
	framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
	// Before the Cluster's deletion, whose removals are neither
	// violations nor evictions of the day.
	run.evictions = evictions.Evictions()
	Expect(invariants.Events()).To(BeNumerically(">", 0), "the invariant watches saw nothing")
	run.violations = invariants.Violations()

	framework.DeleteAutoscaledCluster(ctx, framework.DeleteAutoscaledClusterInput{Management: mgmt, Workload: workload, ClusterAutoscaler: ca, Cluster: cluster})
	Eventually(func(g Gomega) {
		g.Expect(framework.ClusterNodes(ctx, g, workload, cluster)).To(BeEmpty())
	}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Succeed(), "the Nodes of %s are not gone", cluster.Name)
}

// dayReport is the table of the day's figures, a column per run.
func dayReport(runs []*dayRun, hour, consolidateAfter time.Duration) string {
	var b strings.Builder
	row := func(name string, value func(*dayRun) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, run := range runs {
			fmt.Fprintf(&b, " %s |", value(run))
		}
		b.WriteString("\n")
	}
	row("consolidation", func(r *dayRun) string { return r.name })
	b.WriteString("| --- |" + strings.Repeat(" ---: |", len(runs)) + "\n")
	for _, g := range dayGroups {
		row(fmt.Sprintf("node-hours %s (%s cpu, %s/h)", g.name, g.cpu, g.price), func(r *dayRun) string {
			return fmt.Sprintf("%.1f", r.seconds[g.name]/hour.Seconds())
		})
	}
	row("cost of the day", func(r *dayRun) string {
		return fmt.Sprintf("%.2f (%+.0f%%)", r.cost, 100*(r.cost-runs[0].cost)/runs[0].cost)
	})
	row("nodes removed by consolidation", func(r *dayRun) string { return strconv.Itoa(len(r.consolidated)) })
	row("pods evicted (by consolidation)", func(r *dayRun) string {
		return fmt.Sprintf("%d (%d)", len(r.evictions), len(consolidationEvictions(r.evictions, r.consolidated)))
	})
	row("pods evicted less than consolidateAfter after they were bound (by consolidation)", func(r *dayRun) string {
		all := r.evictions
		return fmt.Sprintf("%d (%d)", len(youngEvictions(all, nil, consolidateAfter)), len(youngEvictions(all, r.consolidated, consolidateAfter)))
	})
	row("owners whose pods were evicted again within consolidateAfter (by consolidation)", func(r *dayRun) string {
		all := r.evictions
		return fmt.Sprintf("%s (%s)", againText(framework.DisruptedAgainWithin(all, consolidateAfter, 2*time.Second)),
			againText(framework.DisruptedAgainWithin(consolidationEvictions(all, r.consolidated), consolidateAfter, 2*time.Second)))
	})
	row("nodes once settled", func(r *dayRun) string { return strconv.Itoa(r.nodes) })
	row("cpu utilization once settled", func(r *dayRun) string { return fmt.Sprintf("%.0f%%", 100*r.utilization) })
	row("invariant violations", func(r *dayRun) string { return strconv.Itoa(len(r.violations)) })
	fmt.Fprintf(&b, "\nThe cheapest nodes for each hour's pods, bought and let go on the hour, cost %.2f.\n", idealDayCost())
	for _, run := range runs {
		fmt.Fprintf(&b, "\nNodes of %s once settled:\n%s", run.name, run.layout)
	}
	return b.String()
}

// againText is what framework.DisruptedAgainWithin found, "0" for nothing.
func againText(again map[string]int) string {
	if len(again) == 0 {
		return "0"
	}
	return fmt.Sprint(again)
}

// consolidationEvictions are the evictions from the nodes consolidation
// removed.
func consolidationEvictions(evictions []framework.Eviction, consolidated map[string]bool) []framework.Eviction {
	var out []framework.Eviction
	for _, e := range evictions {
		if consolidated[e.Node] {
			out = append(out, e)
		}
	}
	return out
}

// youngEvictions are the evictions of pods bound less than window before,
// from the nodes consolidation removed, or from any node when nil.
func youngEvictions(evictions []framework.Eviction, consolidated map[string]bool, window time.Duration) []framework.Eviction {
	if consolidated != nil {
		evictions = consolidationEvictions(evictions, consolidated)
	}
	var out []framework.Eviction
	for _, e := range evictions {
		if !e.Bound.IsZero() && e.Evicted.Sub(e.Bound) < window {
			out = append(out, e)
		}
	}
	return out
}

// consolidatedNodes are the nodes of cluster that consolidation removed,
// as the manager's log tells its decisions: a deletion when it decides it
// ("Consolidating"), a replacement once its new nodes are Ready and it
// drains the nodes it replaces (an abandoned one drains nothing).
func consolidatedNodes(managerLog string, cluster *clusterv1.Cluster) map[string]bool {
	data, err := os.ReadFile(managerLog)
	Expect(err).NotTo(HaveOccurred())
	nodes := map[string]bool{}
	deletion := regexp.MustCompile(`"Consolidating".* message="consolidation: removing nodes ([^ ,]+(?:, [^ ,]+)*) saves`)
	replacement := regexp.MustCompile(`outcome="Consolidation" message="consolidation: replacing nodes ([^ ,]+(?:, [^ ,]+)*) with .*: the new nodes are Ready, draining`)
	of := fmt.Sprintf(`Cluster="%s/%s"`, cluster.Namespace, cluster.Name)
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.Contains(line, of) {
			continue
		}
		m := deletion.FindStringSubmatch(line)
		if m == nil {
			m = replacement.FindStringSubmatch(line)
		}
		if m != nil {
			for _, node := range strings.Split(m[1], ", ") {
				nodes[node] = true
			}
		}
	}
	return nodes
}

// idealDayCost is what the day would cost with the cheapest nodes that
// hold each hour's pods, bought and let go at once on the hour: for each
// hour, the cheapest counts of nodes of each group within their sizes on
// which the pods fit, placed largest first (pinned pods before the others)
// on the node they leave the least room on. No autoscaler can do better
// than about this, whatever it consolidates.
func idealDayCost() float64 {
	type node struct {
		group string
		free  int64
	}
	cpus := map[string]int64{}
	prices := map[string]float64{}
	for _, g := range dayGroups {
		cpu := resource.MustParse(g.cpu)
		cpus[g.name] = cpu.MilliValue()
		price, _ := strconv.ParseFloat(g.price, 64)
		prices[g.name] = price
	}
	type pod struct {
		milli int64
		pool  string
	}
	fits := func(counts []int, pods []pod) bool {
		var nodes []*node
		for i, g := range dayGroups {
			for range counts[i] {
				nodes = append(nodes, &node{group: g.name, free: cpus[g.name]})
			}
		}
		for _, p := range pods {
			var best *node
			for _, n := range nodes {
				if (p.pool == "" || n.group == p.pool) && n.free >= p.milli && (best == nil || n.free < best.free) {
					best = n
				}
			}
			if best == nil {
				return false
			}
			best.free -= p.milli
		}
		return true
	}
	var total float64
	for hour := range dayLoad {
		var pods []pod
		for _, w := range dayWorkloads {
			cpu := resource.MustParse(w.cpu)
			for range w.replicasAt(hour) {
				pods = append(pods, pod{milli: cpu.MilliValue(), pool: w.pool})
			}
		}
		slices.SortStableFunc(pods, func(a, b pod) int {
			if (a.pool == "") != (b.pool == "") {
				if a.pool != "" {
					return -1
				}
				return 1
			}
			return int(b.milli - a.milli)
		})
		best := math.Inf(1)
		counts := make([]int, len(dayGroups))
		var try func(i int, cost float64)
		try = func(i int, cost float64) {
			if cost >= best {
				return
			}
			if i == len(dayGroups) {
				if fits(counts, pods) {
					best = cost
				}
				return
			}
			for n := dayGroups[i].minSize; n <= dayGroups[i].maxSize; n++ {
				counts[i] = n
				try(i+1, cost+float64(n)*prices[dayGroups[i].name])
			}
		}
		try(0, 0)
		total += best
	}
	return total
}
