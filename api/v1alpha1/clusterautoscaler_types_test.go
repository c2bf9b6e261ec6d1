package v1alpha1_test

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// newClusterAutoscaler returns the smallest valid object, changed by mutate.
func newClusterAutoscaler(mutate func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec)) *autoscalingv1alpha1.ClusterAutoscaler {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ca-", Namespace: "default"},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload"},
	}
	if mutate != nil {
		mutate(&ca.Spec)
	}
	return ca
}

func duration(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	Expect(err).NotTo(HaveOccurred())
	return &metav1.Duration{Duration: d}
}

var _ = Describe("ClusterAutoscaler schema", func() {
	It("fills in the documented defaults", func() {
		ca := newClusterAutoscaler(nil)
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })

		spec := ca.Spec
		Expect(spec.PodPriorityThreshold).To(HaveValue(BeEquivalentTo(-10)))
		Expect(spec.Expanders).To(Equal([]autoscalingv1alpha1.Expander{autoscalingv1alpha1.LeastWasteExpander}))
		Expect(spec.BalanceSimilarNodeGroups).To(HaveValue(BeFalse()))
		Expect(spec.MaxNodeProvisionTime).To(Equal(duration("15m")))
		Expect(spec.MaxNodesPerScaleUp).To(HaveValue(BeEquivalentTo(1000)))
		Expect(spec.NewPodScaleUpDelay).To(Equal(duration("0s")))
		Expect(spec.ScanInterval).To(Equal(duration("10s")))
		Expect(spec.MinLoopInterval).To(Equal(duration("1s")))
		Expect(spec.LogVerbosity).To(HaveValue(BeEquivalentTo(1)))
		Expect(spec.ResourceLimits).To(BeNil(), "no limits unless asked for")

		Expect(spec.ScaleDown).NotTo(BeNil())
		Expect(spec.ScaleDown.Enabled).To(HaveValue(BeTrue()))
		Expect(spec.ScaleDown.DelayAfterAdd).To(Equal(duration("10m")))
		Expect(spec.ScaleDown.DelayAfterDelete).To(Equal(duration("0s")))
		Expect(spec.ScaleDown.DelayAfterFailure).To(Equal(duration("3m")))
		Expect(spec.ScaleDown.UnneededTime).To(Equal(duration("10m")))
		Expect(spec.ScaleDown.UnreadyTime).To(Equal(duration("20m")))
		Expect(spec.ScaleDown.UtilizationThreshold).To(HaveValue(Equal("0.5")))
		Expect(spec.ScaleDown.MaxEmptyBulkDelete).To(HaveValue(BeEquivalentTo(10)))
		Expect(spec.ScaleDown.MaxGracefulTerminationSeconds).To(HaveValue(BeEquivalentTo(600)))
		Expect(spec.ScaleDown.IgnoreDaemonSetsUtilization).To(HaveValue(BeFalse()))
		Expect(spec.ScaleDown.SkipNodesWithLocalStorage).To(HaveValue(BeTrue()))
		Expect(spec.ScaleDown.SkipNodesWithSystemPods).To(HaveValue(BeTrue()))
		Expect(spec.ScaleDown.SkipNodesWithCustomControllerPods).To(HaveValue(BeTrue()))
		Expect(spec.ScaleDown.MaxDrainParallelism).To(HaveValue(BeEquivalentTo(1)))
		Expect(spec.ScaleDown.CordonNodeBeforeTerminating).To(HaveValue(BeFalse()))

		Expect(spec.Consolidation).NotTo(BeNil())
		Expect(spec.Consolidation.Policy).To(Equal(autoscalingv1alpha1.ConsolidationDisabled), "off, as upstream has none")
		Expect(spec.Consolidation.ConsolidateAfter).To(Equal(duration("10m")))
		Expect(spec.Consolidation.Budget).NotTo(BeNil())
		Expect(spec.Consolidation.Budget.Nodes).To(HaveValue(Equal("10%")))
		Expect(spec.Consolidation.BalancedThreshold).To(HaveValue(Equal("0.5")), "Karpenter's")

		Expect(spec.Backoff).NotTo(BeNil())
		Expect(spec.Backoff.Initial).To(Equal(duration("5m")))
		Expect(spec.Backoff.Max).To(Equal(duration("30m")))
		Expect(spec.Backoff.ResetAfter).To(Equal(duration("3h")))

		Expect(spec.ClusterHealth).NotTo(BeNil())
		Expect(spec.ClusterHealth.OkTotalUnreadyCount).To(HaveValue(BeEquivalentTo(3)))
		Expect(spec.ClusterHealth.MaxTotalUnreadyPercentage).To(HaveValue(BeEquivalentTo(45)))
	})

	It("accepts a fully specified configuration", func() {
		ca := newClusterAutoscaler(func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{
				MaxNodesTotal: ptr.To[int32](50),
				Cores:         &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](8), Max: ptr.To[int32](64)},
				Memory:        &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](8), Max: ptr.To[int32](8)},
				GPUs:          []autoscalingv1alpha1.GPULimit{{Type: "nvidia.com/gpu", Min: 0, Max: 8}},
			}
			spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander, autoscalingv1alpha1.PriceExpander,
				autoscalingv1alpha1.LeastWasteExpander, autoscalingv1alpha1.MostPodsExpander, autoscalingv1alpha1.RandomExpander}
			spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{{Priority: 10, NodeGroupIDPatterns: []string{"MachineDeployment/default/spot-.*", `(?i)^machineset/[^/]+/GPU-\d+$`}}}
			spec.InstanceTypePrices = []autoscalingv1alpha1.InstanceTypePrice{{InstanceType: "m5.xlarge", Price: "0.192"}, {InstanceType: "g5.xlarge", Price: "1.006"}}
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{
				UtilizationThreshold: ptr.To("0.65"), UnneededTime: duration("1m30s"),
				SkipNodesWithLocalStorage: ptr.To(false), SkipNodesWithSystemPods: ptr.To(false), SkipNodesWithCustomControllerPods: ptr.To(false),
				IgnoreDaemonSetsUtilization: ptr.To(true), MaxDrainParallelism: ptr.To[int32](10), CordonNodeBeforeTerminating: ptr.To(true),
			}
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{
				Policy: autoscalingv1alpha1.ConsolidationDelete, ConsolidateAfter: duration("0s"),
				Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("100%")},
			}
			spec.StartupTaints = []autoscalingv1alpha1.TaintKey{"example.com/cni-not-ready", "NodeNotInitialized"}
			spec.StatusTaints = []autoscalingv1alpha1.TaintKey{"example.com/gpu-health"}
			spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "workload-autoscaler-kubeconfig", Key: "autoscaler.kubeconfig"}
		})
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })
		Expect(ca.Spec.ScaleDown.DelayAfterAdd).To(Equal(duration("10m")), "unset fields of a given section are defaulted")
		Expect(ca.Spec.ScaleDown.SkipNodesWithLocalStorage).To(HaveValue(BeFalse()), "a false switch is kept, not defaulted")
	})

	DescribeTable("rejects invalid configuration with a message that says what is wrong",
		func(mutate func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec), message string) {
			err := k8sClient.Create(ctx, newClusterAutoscaler(mutate))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("cores min above max", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{Cores: &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](64), Max: ptr.To[int32](8)}}
		}, "spec.resourceLimits.cores: Invalid value: min must be less than or equal to max"),
		Entry("memory min above max", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{Memory: &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](2), Max: ptr.To[int32](1)}}
		}, "spec.resourceLimits.memory: Invalid value: min must be less than or equal to max"),
		Entry("gpu min above max", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{GPUs: []autoscalingv1alpha1.GPULimit{{Type: "nvidia.com/gpu", Min: 4, Max: 2}}}
		}, "min must be less than or equal to max"),
		Entry("negative node total", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{MaxNodesTotal: ptr.To[int32](-1)}
		}, "spec.resourceLimits.maxNodesTotal: Invalid value: -1: spec.resourceLimits.maxNodesTotal in body should be greater than or equal to 0"),
		Entry("utilization threshold above 1", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("1.5")}
		}, "utilizationThreshold must be strictly between 0 and 1"),
		Entry("utilization threshold of 0", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("0")}
		}, "utilizationThreshold must be strictly between 0 and 1"),
		Entry("utilization threshold that is not a number", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("half")}
		}, "spec.scaleDown.utilizationThreshold in body should match"),
		Entry("negative scale-down delay", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{DelayAfterAdd: duration("-5m")}
		}, "delayAfterAdd must not be negative"),
		Entry("negative unneeded time", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{UnneededTime: duration("-1s")}
		}, "unneededTime must not be negative"),
		Entry("no drain at all", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{MaxDrainParallelism: ptr.To[int32](0)}
		}, "spec.scaleDown.maxDrainParallelism in body should be greater than or equal to 1"),
		Entry("more drains than nodes a cluster is expected to have", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{MaxDrainParallelism: ptr.To[int32](1001)}
		}, "spec.scaleDown.maxDrainParallelism in body should be less than or equal to 1000"),
		Entry("negative provision time", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MaxNodeProvisionTime = duration("-15m")
		}, "maxNodeProvisionTime must be at least 1m"),
		Entry("provision time of 0s", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MaxNodeProvisionTime = duration("0s")
		}, "maxNodeProvisionTime must be at least 1m"),
		Entry("provision time a second under the engine's minimum", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MaxNodeProvisionTime = &metav1.Duration{Duration: nodegroups.MinMaxNodeProvisionTime - time.Second}
		}, "maxNodeProvisionTime must be at least 1m"),
		Entry("negative minimum loop interval", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MinLoopInterval = duration("-1s")
		}, "minLoopInterval must not be negative"),
		Entry("minimum loop interval above the scan interval", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MinLoopInterval = duration("20s")
		}, "minLoopInterval must not exceed scanInterval"),
		Entry("initial backoff above max backoff", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Backoff = &autoscalingv1alpha1.BackoffConfig{Initial: duration("1h"), Max: duration("30m")}
		}, "initial backoff must not exceed max backoff"),
		Entry("unknown expander", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Expanders = []autoscalingv1alpha1.Expander{"cheapest"}
		}, "spec.expanders[0]: Unsupported value: \"cheapest\": supported values: \"random\", \"most-pods\", \"least-waste\", \"priority\", \"price\""),
		Entry("instance type price that is negative", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.InstanceTypePrices = []autoscalingv1alpha1.InstanceTypePrice{{InstanceType: "m5.xlarge", Price: "-0.192"}}
		}, "spec.instanceTypePrices[0].price in body should match"),
		Entry("instance type price with a unit", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.InstanceTypePrices = []autoscalingv1alpha1.InstanceTypePrice{{InstanceType: "m5.xlarge", Price: "192m"}}
		}, "spec.instanceTypePrices[0].price in body should match"),
		Entry("an instance type priced twice", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.InstanceTypePrices = []autoscalingv1alpha1.InstanceTypePrice{{InstanceType: "m5.xlarge", Price: "0.192"}, {InstanceType: "m5.xlarge", Price: "0.2"}}
		}, "spec.instanceTypePrices[1]: Duplicate value"),
		Entry("unknown consolidation policy", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Policy: "Shrink"}
		}, "spec.consolidation.policy: Unsupported value: \"Shrink\": supported values: \"Disabled\", \"Delete\", \"Replace\", \"Balanced\""),
		Entry("a balanced threshold of 0", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Policy: autoscalingv1alpha1.ConsolidationBalanced, BalancedThreshold: ptr.To("0")}
		}, "balancedThreshold must be positive"),
		Entry("a balanced threshold that is no number", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{BalancedThreshold: ptr.To("half")}
		}, "spec.consolidation.balancedThreshold in body should match"),
		Entry("negative consolidateAfter", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{ConsolidateAfter: duration("-1m")}
		}, "consolidateAfter must not be negative"),
		Entry("disruption budget over 100%", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("101%")}}
		}, "spec.consolidation.budget.nodes in body should match"),
		Entry("disruption budget that is no number", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("-1")}}
		}, "spec.consolidation.budget.nodes in body should match"),
		Entry("scheduled disruption budget over 100%", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "101%"}}}
		}, "spec.consolidation.budgets[0].nodes in body should match"),
		Entry("scheduled disruption budget without nodes", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Schedule: "0 9 * * 1-5", Duration: duration("8h")}}}
		}, "spec.consolidation.budgets[0].nodes"),
		Entry("scheduled disruption budget whose cron expression has six fields", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 0 9 * * 1-5", Duration: duration("8h")}}}
		}, "spec.consolidation.budgets[0].schedule in body should match"),
		Entry("scheduled disruption budget with a schedule but no duration", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 * * 1-5"}}}
		}, "schedule and duration go together"),
		Entry("scheduled disruption budget with a duration but no schedule", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Duration: duration("8h")}}}
		}, "schedule and duration go together"),
		Entry("scheduled disruption budget with a time zone but no schedule", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", TimeZone: "Europe/Paris"}}}
		}, "timeZone needs a schedule"),
		Entry("scheduled disruption budget in the Local time zone", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 * * 1-5", TimeZone: "Local", Duration: duration("8h")}}}
		}, "timeZone must name a time zone, not Local"),
		Entry("scheduled disruption budget whose windows last 0s", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 * * 1-5", Duration: duration("0s")}}}
		}, "duration must be positive"),
		Entry("priority expander without priorities", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Expanders = []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander}
		}, "expanderPriorities must be set when the priority expander is used"),
		Entry("node group pattern that is not a regular expression", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{
				{Priority: 10, NodeGroupIDPatterns: []string{"MachineDeployment/default/spot-.*"}},
				{Priority: 20, NodeGroupIDPatterns: []string{"MachineDeployment/default/gpu-.*", "MachineDeployment/default/(on-demand"}},
			}
		}, "spec.expanderPriorities: Invalid value: \"array\": error parsing regexp: missing closing ): `MachineDeployment/default/(on-demand` evaluating rule: nodeGroupIDPatterns must be regular expressions in RE2 syntax"),
		Entry("node group pattern with syntax Go's regexp does not accept", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			// A lookahead is Perl syntax, not RE2.
			spec.ExpanderPriorities = []autoscalingv1alpha1.ExpanderPriority{{Priority: 10, NodeGroupIDPatterns: []string{"MachineDeployment/default/(?!spot-).*"}}}
		}, "invalid or unsupported Perl syntax: `(?!` evaluating rule: nodeGroupIDPatterns must be regular expressions in RE2 syntax"),
		Entry("missing cluster name", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ClusterName = ""
		}, "spec.clusterName"),
		Entry("startup taint that is not a taint key", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.StartupTaints = []autoscalingv1alpha1.TaintKey{"cni not ready"}
		}, "spec.startupTaints[0]: Invalid value: \"cni not ready\": must be a taint key"),
		Entry("workload kubeconfig Secret that is not a Secret name", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "Workload_Kubeconfig"}
		}, "spec.workloadKubeconfigSecretRef.name: Invalid value: \"Workload_Kubeconfig\": must be the name of a Secret"),
		Entry("workload kubeconfig key that is not a Secret key", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "workload-kubeconfig", Key: "config/value"}
		}, "spec.workloadKubeconfigSecretRef.key in body should match"),
		Entry("status taint whose name is longer than 63 characters", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.StatusTaints = []autoscalingv1alpha1.TaintKey{autoscalingv1alpha1.TaintKey("example.com/" + strings.Repeat("a", 64))}
		}, "spec.statusTaints[0]: Invalid value: \"example.com/"+strings.Repeat("a", 64)+"\": must be a taint key"),
		Entry("scheduled minimum whose cron expression has six fields", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) { m.Schedule = "0 0 8 * * 1-5" })}
		}, "spec.scheduledMinimums[0].schedule in body should match"),
		Entry("scheduled minimum whose cron expression names its time zone", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) { m.Schedule = "CRON_TZ=UTC 0 8 * * 1-5" })}
		}, "spec.scheduledMinimums[0].schedule in body should match"),
		Entry("scheduled minimum in the Local time zone", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) { m.TimeZone = "Local" })}
		}, "timeZone must name a time zone, not Local"),
		Entry("scheduled minimum without a duration", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) { m.Duration = metav1.Duration{} })}
		}, "duration must be positive"),
		Entry("scheduled minimum that selects no node group", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) {
				m.NodeGroups = autoscalingv1alpha1.ScheduledNodeGroups{}
			})}
		}, "name node groups, or select them by label"),
		Entry("scheduled minimum below zero", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(func(m *autoscalingv1alpha1.ScheduledMinimum) { m.MinSize = -1 })}
		}, "spec.scheduledMinimums[0].minSize: Invalid value: -1"),
		Entry("two scheduled minimums of one name", func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{scheduledMinimum(nil), scheduledMinimum(nil)}
		}, "spec.scheduledMinimums[1]: Duplicate value"),
	)

	It("accepts scheduled minimums by name and by label, with a time zone and a lead time", func() {
		ca := newClusterAutoscaler(func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.ScheduledMinimums = []autoscalingv1alpha1.ScheduledMinimum{
				scheduledMinimum(nil),
				{Name: "night", Schedule: "0 20 * * *", TimeZone: "America/Argentina/Buenos_Aires", Duration: *duration("11h"), LeadTime: duration("30m"), MinSize: 0,
					NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}},
			}
		})
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })
	})

	It("accepts disruption budgets at all times and in windows, beside the budget", func() {
		ca := newClusterAutoscaler(func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.Consolidation = &autoscalingv1alpha1.ConsolidationConfig{
				Policy: autoscalingv1alpha1.ConsolidationReplace,
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{
					{Nodes: "5"},
					{Nodes: "0", Schedule: "0 9 * * 1-5", TimeZone: "Europe/Paris", Duration: duration("8h")},
					{Nodes: "50%", Schedule: "0 22 * * *", Duration: duration("6h")},
				},
			}
		})
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })
		Expect(ca.Spec.Consolidation.Budget.Nodes).To(HaveValue(Equal("10%")), "budget keeps its default beside budgets")
		Expect(ca.Spec.Consolidation.Budgets).To(HaveLen(3))
	})

	It("accepts the engine's minimum provision time", func() {
		// With the entry a second under it, this ties the CEL rule to
		// nodegroups.MinMaxNodeProvisionTime.
		ca := newClusterAutoscaler(func(spec *autoscalingv1alpha1.ClusterAutoscalerSpec) {
			spec.MaxNodeProvisionTime = &metav1.Duration{Duration: nodegroups.MinMaxNodeProvisionTime}
		})
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })
	})

	It("keeps the cluster name immutable", func() {
		ca := newClusterAutoscaler(nil)
		Expect(k8sClient.Create(ctx, ca)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ca))).To(Succeed()) })

		ca.Spec.ClusterName = "another"
		err := k8sClient.Update(ctx, ca)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("clusterName is immutable"))
	})
})

// scheduledMinimum is a valid scheduled minimum, changed by mutate.
func scheduledMinimum(mutate func(*autoscalingv1alpha1.ScheduledMinimum)) autoscalingv1alpha1.ScheduledMinimum {
	m := autoscalingv1alpha1.ScheduledMinimum{
		Name: "office-hours", Schedule: "0 8 * * 1-5", TimeZone: "Europe/Paris", Duration: *duration("10h"), MinSize: 5,
		NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{"md-0"}},
	}
	if mutate != nil {
		mutate(&m)
	}
	return m
}
