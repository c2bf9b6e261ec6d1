package engineconfig

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
)

func TestFromSpec(t *testing.T) {
	tests := []struct {
		name    string
		spec    autoscalingv1alpha1.ClusterAutoscalerSpec
		want    func(*autoscaler.Config)
		wantErr bool
	}{
		{
			name: "an empty spec keeps the engine defaults",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "c"},
			want: func(*autoscaler.Config) {},
		},
		{
			name: "scheduled minimums, with and without a lead time",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ScheduledMinimums: []autoscalingv1alpha1.ScheduledMinimum{
				{Name: "night", NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}},
					Schedule: "0 20 * * *", TimeZone: "Europe/Paris", Duration: metav1.Duration{Duration: 11 * time.Hour}, MinSize: 0},
				{Name: "office", NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{"md-web"}},
					Schedule: "0 8 * * 1-5", Duration: metav1.Duration{Duration: 10 * time.Hour}, LeadTime: &metav1.Duration{Duration: 10 * time.Minute}, MinSize: 5},
			}},
			want: func(c *autoscaler.Config) {
				c.ScheduledMinimums = []minimums.Spec{
					{Name: "night", Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}},
						Schedule: "0 20 * * *", TimeZone: "Europe/Paris", Duration: 11 * time.Hour},
					{Name: "office", Names: []string{"md-web"}, Schedule: "0 8 * * 1-5", Duration: 10 * time.Hour, LeadTime: ptr.To(10 * time.Minute), MinSize: 5},
				}
			},
		},
		{
			name: "where the upstream autoscaler keeps its Lease and status: the Lease in its namespace unless said otherwise",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{UpstreamAutoscaler: &autoscalingv1alpha1.UpstreamAutoscalerLocation{
				Namespace: "autoscaling", LeaseName: "ca-leader",
			}},
			want: func(c *autoscaler.Config) {
				c.Upstream = autoscaler.UpstreamLocation{Namespace: "autoscaling", LeaseNamespace: "autoscaling", LeaseName: "ca-leader", StatusConfigMap: "cluster-autoscaler-status"}
			},
		},
		{
			name: "memory limits in GiB become bytes, GPUs a map by type",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ResourceLimits: &autoscalingv1alpha1.ResourceLimits{
				MaxNodesTotal: ptr.To[int32](50),
				Cores:         &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](8), Max: ptr.To[int32](256)},
				Memory:        &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](16), Max: ptr.To[int32](1024)},
				GPUs:          []autoscalingv1alpha1.GPULimit{{Type: "nvidia.com/gpu", Min: 1, Max: 4}},
			}},
			want: func(c *autoscaler.Config) {
				c.Limits = autoscaler.ResourceLimits{
					MaxNodesTotal: 50,
					MinCores:      8,
					MaxCores:      256,
					MinMemory:     16 << 30,
					MaxMemory:     1024 << 30,
					GPUs:          map[corev1.ResourceName]autoscaler.Range{"nvidia.com/gpu": {Min: 1, Max: 4}},
				}
			},
		},
		{
			name: "scale-down durations, threshold and grace period",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				Enabled:                       ptr.To(false),
				DelayAfterAdd:                 &metav1.Duration{Duration: time.Minute},
				UnneededTime:                  &metav1.Duration{Duration: 2 * time.Minute},
				UtilizationThreshold:          ptr.To("0.65"),
				MaxGracefulTerminationSeconds: ptr.To[int32](30),
			}},
			want: func(c *autoscaler.Config) {
				c.ScaleDown.Enabled = false
				c.ScaleDown.DelayAfterAdd = time.Minute
				c.ScaleDown.UnneededTime = 2 * time.Minute
				c.ScaleDown.UtilizationThreshold = 0.65
				c.ScaleDown.MaxGracefulTermination = 30 * time.Second
			},
		},
		{
			name: "scale-down drain parallelism, blocking pods and cordoning",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				IgnoreDaemonSetsUtilization:       ptr.To(true),
				SkipNodesWithLocalStorage:         ptr.To(false),
				SkipNodesWithSystemPods:           ptr.To(false),
				SkipNodesWithCustomControllerPods: ptr.To(false),
				MaxDrainParallelism:               ptr.To[int32](5),
				CordonNodeBeforeTerminating:       ptr.To(true),
			}},
			want: func(c *autoscaler.Config) {
				c.ScaleDown.IgnoreDaemonSetsUtilization = true
				c.ScaleDown.SkipNodesWithLocalStorage = false
				c.ScaleDown.SkipNodesWithSystemPods = false
				c.ScaleDown.SkipNodesWithCustomControllerPods = false
				c.ScaleDown.MaxParallelDrains = 5
				c.ScaleDown.CordonNodeBeforeTerminating = true
			},
		},
		{
			name: "expanders in order, priorities merged by priority",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				Expanders: []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander, autoscalingv1alpha1.LeastWasteExpander},
				ExpanderPriorities: []autoscalingv1alpha1.ExpanderPriority{
					{Priority: 10, NodeGroupIDPatterns: []string{"a"}},
					{Priority: 20, NodeGroupIDPatterns: []string{"b"}},
					{Priority: 10, NodeGroupIDPatterns: []string{"c"}},
				},
			},
			want: func(c *autoscaler.Config) {
				c.Expanders = []string{"priority", "least-waste"}
				c.ExpanderPriorities = map[int32][]string{10: {"a", "c"}, 20: {"b"}}
			},
		},
		{
			name: "the price expander and the prices by instance type",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				Expanders: []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriceExpander, autoscalingv1alpha1.LeastWasteExpander},
				InstanceTypePrices: []autoscalingv1alpha1.InstanceTypePrice{
					{InstanceType: "m5.xlarge", Price: "0.192"},
					{InstanceType: "g5.xlarge", Price: "1.006"},
				},
			},
			want: func(c *autoscaler.Config) {
				c.Expanders = []string{"price", "least-waste"}
				c.InstanceTypePrices = pricing.Table{"m5.xlarge": 192_000, "g5.xlarge": 1_006_000}
			},
		},
		{
			name: "scan and loop intervals, health and backoff",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				ScanInterval:    &metav1.Duration{Duration: 30 * time.Second},
				MinLoopInterval: &metav1.Duration{Duration: 5 * time.Second},
				ClusterHealth:   &autoscalingv1alpha1.ClusterHealthConfig{OkTotalUnreadyCount: ptr.To[int32](1), MaxTotalUnreadyPercentage: ptr.To[int32](20)},
				Backoff:         &autoscalingv1alpha1.BackoffConfig{Initial: &metav1.Duration{Duration: time.Minute}},
			},
			want: func(c *autoscaler.Config) {
				c.ScanInterval = 30 * time.Second
				c.MinLoopInterval = 5 * time.Second
				c.Health = autoscaler.HealthConfig{OkTotalUnreadyCount: 1, MaxTotalUnreadyPercentage: 20}
				c.Backoff.Initial = time.Minute
			},
		},
		{
			name: "startup and status taint keys",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				StartupTaints: []autoscalingv1alpha1.TaintKey{"example.com/cni-not-ready"},
				StatusTaints:  []autoscalingv1alpha1.TaintKey{"example.com/gpu-health"},
			},
			want: func(c *autoscaler.Config) {
				c.Taints = autoscaler.TaintConfig{StartupTaints: []string{"example.com/cni-not-ready"}, StatusTaints: []string{"example.com/gpu-health"}}
			},
		},
		{
			name: "delete consolidation, its wait and a budget in nodes",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Policy:           autoscalingv1alpha1.ConsolidationDelete,
				ConsolidateAfter: &metav1.Duration{Duration: 30 * time.Minute},
				Budget:           &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("2")},
			}},
			want: func(c *autoscaler.Config) {
				c.Consolidation.Policy = scaledown.ConsolidationDelete
				c.Consolidation.ConsolidateAfter = 30 * time.Minute
				c.Consolidation.Budget = intstr.FromInt32(2)
			},
		},
		{
			name: "balanced consolidation and its threshold",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Policy: autoscalingv1alpha1.ConsolidationBalanced, BalancedThreshold: ptr.To("1.5"),
			}},
			want: func(c *autoscaler.Config) {
				c.Consolidation.Policy = scaledown.ConsolidationBalanced
				c.Consolidation.BalancedThreshold = 1.5
			},
		},
		{
			name:    "a balanced threshold of 0",
			spec:    autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{BalancedThreshold: ptr.To("0")}},
			wantErr: true,
		},
		{
			name: "a budget in percent of a group",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("25%")},
			}},
			want: func(c *autoscaler.Config) { c.Consolidation.Budget = intstr.FromString("25%") },
		},
		{
			name:    "a budget that is neither nodes nor a percentage",
			spec:    autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("half")}}},
			wantErr: true,
		},
		{
			name: "budgets at all times and in the windows of a schedule, beside the budget",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budget: &autoscalingv1alpha1.DisruptionBudget{Nodes: ptr.To("20%")},
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{
					{Nodes: "3"},
					{Nodes: "0", Schedule: "0 9 * * 1-5", TimeZone: "UTC", Duration: &metav1.Duration{Duration: 8 * time.Hour}},
				},
			}},
			want: func(c *autoscaler.Config) {
				officeHours, err := schedule.New("0 9 * * 1-5", "UTC", 8*time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				c.Consolidation.Budget = intstr.FromString("20%")
				c.Consolidation.Budgets = []scaledown.ScheduledBudget{
					{Name: "spec.consolidation.budgets[0]", Nodes: intstr.FromInt32(3)},
					{Name: "spec.consolidation.budgets[1]", Nodes: intstr.FromInt32(0), Schedule: officeHours},
				}
			},
		},
		{
			name: "a budget in a time zone the manager does not know refuses the spec",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 * * *", TimeZone: "Mars/Olympus_Mons", Duration: &metav1.Duration{Duration: time.Hour}}},
			}},
			wantErr: true,
		},
		{
			name: "a budget whose schedule names no time that exists refuses the spec",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 30 2 *", Duration: &metav1.Duration{Duration: time.Hour}}},
			}},
			wantErr: true,
		},
		{
			name: "a budget of the node groups it names",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", NodeGroups: &autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{"md-gpu"}}}},
			}},
			want: func(c *autoscaler.Config) {
				c.Consolidation.Budgets = []scaledown.ScheduledBudget{
					{Name: "spec.consolidation.budgets[0]", Nodes: intstr.FromInt32(0), Groups: &scaledown.GroupSelector{Names: map[string]bool{"md-gpu": true}}},
				}
			},
		},
		{
			name: "a budget whose node groups' label selector cannot be read refuses the spec",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", NodeGroups: &autoscalingv1alpha1.ScheduledNodeGroups{
					LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn}}},
				}}},
			}},
			wantErr: true,
		},
		{
			name: "a budget with a schedule but no duration refuses the spec",
			spec: autoscalingv1alpha1.ClusterAutoscalerSpec{Consolidation: &autoscalingv1alpha1.ConsolidationConfig{
				Budgets: []autoscalingv1alpha1.ScheduledDisruptionBudget{{Nodes: "0", Schedule: "0 9 * * *"}},
			}},
			wantErr: true,
		},
		{
			name:    "a price that is not a decimal",
			spec:    autoscalingv1alpha1.ClusterAutoscalerSpec{InstanceTypePrices: []autoscalingv1alpha1.InstanceTypePrice{{InstanceType: "m5.xlarge", Price: "cheap"}}},
			wantErr: true,
		},
		{
			name:    "a threshold that is not a number",
			spec:    autoscalingv1alpha1.ClusterAutoscalerSpec{ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("half")}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := FromSpec(tt.spec)
			if tt.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			want := autoscaler.DefaultConfig()
			tt.want(&want)
			g.Expect(got).To(Equal(want))
		})
	}
}

func TestSettingsAcceptEveryExpander(t *testing.T) {
	expanders := []autoscalingv1alpha1.Expander{
		autoscalingv1alpha1.RandomExpander, autoscalingv1alpha1.MostPodsExpander, autoscalingv1alpha1.LeastWasteExpander,
		autoscalingv1alpha1.PriorityExpander, autoscalingv1alpha1.PriceExpander,
	}
	for _, expander := range expanders {
		t.Run(string(expander), func(t *testing.T) {
			spec := autoscalingv1alpha1.ClusterAutoscalerSpec{
				ClusterName:        "c",
				Expanders:          []autoscalingv1alpha1.Expander{expander},
				ExpanderPriorities: []autoscalingv1alpha1.ExpanderPriority{{Priority: 10, NodeGroupIDPatterns: []string{".*"}}},
			}
			_, err := Settings(spec, clocktesting.NewFakePassiveClock(time.Now()))
			NewWithT(t).Expect(err).NotTo(HaveOccurred())
		})
	}
}
