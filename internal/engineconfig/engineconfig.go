// Package engineconfig is the one way a ClusterAutoscaler's spec becomes
// the configuration of its engine: the manager configures engines with it,
// and `kubectl capi-autoscaler convert` checks what it writes with it, so
// that convert accepts only what the manager would.
package engineconfig

import (
	"cmp"
	"fmt"
	"regexp"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/schedule"
)

// bytesPerGiB converts the GiB of spec.resourceLimits.memory to bytes.
const bytesPerGiB = 1 << 30

// disruptionBudget is what spec.consolidation.budget.nodes is written as.
var disruptionBudget = regexp.MustCompile(autoscalingv1alpha1.DisruptionBudgetPattern)

// Settings are the engine settings a ClusterAutoscaler asks for, for an
// engine on clk, or what the manager refuses in it: the spec converted
// (FromSpec) and checked (autoscaler.NewSettings).
func Settings(spec autoscalingv1alpha1.ClusterAutoscalerSpec, clk clock.PassiveClock) (*autoscaler.Settings, error) {
	config, err := FromSpec(spec)
	if err != nil {
		return nil, err
	}
	return autoscaler.NewSettings(config, clk)
}

// FromSpec is the engine configuration a ClusterAutoscaler asks for:
// the engine defaults, overridden by every field that is set. The defaults
// belong to the engine (autoscaler.DefaultConfig); the CRD schema repeats
// them so that users see them on the object, and a test fails when the two
// disagree. The schema also validates the spec, so an error here means the
// object was written around it (e.g. with validation off).
func FromSpec(spec autoscalingv1alpha1.ClusterAutoscalerSpec) (autoscaler.Config, error) {
	config := autoscaler.DefaultConfig()

	config.DryRun = spec.Mode == autoscalingv1alpha1.DryRunMode
	config.PodPriorityThreshold = ptr.Deref(spec.PodPriorityThreshold, config.PodPriorityThreshold)
	config.MaxNodesPerScaleUp = int(ptr.Deref(spec.MaxNodesPerScaleUp, int32(config.MaxNodesPerScaleUp)))
	config.MaxPendingPodsPerLoop = int(ptr.Deref(spec.MaxPendingPodsPerLoop, int32(config.MaxPendingPodsPerLoop)))
	config.MaxNodeProvisionTime = duration(spec.MaxNodeProvisionTime, config.MaxNodeProvisionTime)
	config.NewPodScaleUpDelay = duration(spec.NewPodScaleUpDelay, config.NewPodScaleUpDelay)
	config.ScanInterval = duration(spec.ScanInterval, config.ScanInterval)
	config.MinLoopInterval = duration(spec.MinLoopInterval, config.MinLoopInterval)
	config.BalanceSimilarNodeGroups = ptr.Deref(spec.BalanceSimilarNodeGroups, config.BalanceSimilarNodeGroups)
	config.BalancingIgnoredLabels = spec.BalancingIgnoredLabels
	if upstream := spec.UpstreamAutoscaler; upstream != nil {
		config.Upstream.Namespace = cmp.Or(upstream.Namespace, config.Upstream.Namespace)
		// As upstream defaults its --leader-elect-resource-namespace.
		config.Upstream.LeaseNamespace = cmp.Or(upstream.LeaseNamespace, config.Upstream.Namespace)
		config.Upstream.LeaseName = cmp.Or(upstream.LeaseName, config.Upstream.LeaseName)
		config.Upstream.StatusConfigMap = cmp.Or(upstream.StatusConfigMapName, config.Upstream.StatusConfigMap)
	}

	if len(spec.Expanders) > 0 {
		config.Expanders = make([]string, 0, len(spec.Expanders))
		for _, expander := range spec.Expanders {
			config.Expanders = append(config.Expanders, string(expander))
		}
	}
	if len(spec.ExpanderPriorities) > 0 {
		config.ExpanderPriorities = map[int32][]string{}
		for _, priority := range spec.ExpanderPriorities {
			config.ExpanderPriorities[priority.Priority] = append(config.ExpanderPriorities[priority.Priority], priority.NodeGroupIDPatterns...)
		}
	}

	if len(spec.InstanceTypePrices) > 0 {
		config.InstanceTypePrices = pricing.Table{}
		for _, entry := range spec.InstanceTypePrices {
			price, err := pricing.Parse(entry.Price)
			if err != nil {
				return config, fmt.Errorf("spec.instanceTypePrices: the price %q of %s: %w", entry.Price, entry.InstanceType, err)
			}
			config.InstanceTypePrices[entry.InstanceType] = price
		}
	}

	if limits := spec.ResourceLimits; limits != nil {
		config.Limits.MaxNodesTotal = int(ptr.Deref(limits.MaxNodesTotal, 0))
		if cores := limits.Cores; cores != nil {
			config.Limits.MinCores = int64(ptr.Deref(cores.Min, 0))
			config.Limits.MaxCores = int64(ptr.Deref(cores.Max, 0))
		}
		if memory := limits.Memory; memory != nil {
			config.Limits.MinMemory = int64(ptr.Deref(memory.Min, 0)) * bytesPerGiB
			config.Limits.MaxMemory = int64(ptr.Deref(memory.Max, 0)) * bytesPerGiB
		}
		if len(limits.GPUs) > 0 {
			config.Limits.GPUs = map[corev1.ResourceName]autoscaler.Range{}
			for _, gpu := range limits.GPUs {
				config.Limits.GPUs[corev1.ResourceName(gpu.Type)] = autoscaler.Range{Min: int64(gpu.Min), Max: int64(gpu.Max)}
			}
		}
	}

	if scaleDown := spec.ScaleDown; scaleDown != nil {
		sd := &config.ScaleDown
		sd.Enabled = ptr.Deref(scaleDown.Enabled, sd.Enabled)
		sd.DelayAfterAdd = duration(scaleDown.DelayAfterAdd, sd.DelayAfterAdd)
		sd.DelayAfterDelete = duration(scaleDown.DelayAfterDelete, sd.DelayAfterDelete)
		sd.DelayAfterFailure = duration(scaleDown.DelayAfterFailure, sd.DelayAfterFailure)
		sd.UnneededTime = duration(scaleDown.UnneededTime, sd.UnneededTime)
		sd.UnreadyTime = duration(scaleDown.UnreadyTime, sd.UnreadyTime)
		sd.MaxEmptyBulkDelete = int(ptr.Deref(scaleDown.MaxEmptyBulkDelete, int32(sd.MaxEmptyBulkDelete)))
		sd.MaxParallelDrains = int(ptr.Deref(scaleDown.MaxDrainParallelism, int32(sd.MaxParallelDrains)))
		sd.IgnoreDaemonSetsUtilization = ptr.Deref(scaleDown.IgnoreDaemonSetsUtilization, sd.IgnoreDaemonSetsUtilization)
		sd.SkipNodesWithLocalStorage = ptr.Deref(scaleDown.SkipNodesWithLocalStorage, sd.SkipNodesWithLocalStorage)
		sd.SkipNodesWithSystemPods = ptr.Deref(scaleDown.SkipNodesWithSystemPods, sd.SkipNodesWithSystemPods)
		sd.SkipNodesWithCustomControllerPods = ptr.Deref(scaleDown.SkipNodesWithCustomControllerPods, sd.SkipNodesWithCustomControllerPods)
		sd.CordonNodeBeforeTerminating = ptr.Deref(scaleDown.CordonNodeBeforeTerminating, sd.CordonNodeBeforeTerminating)
		sd.NodeDeletionTimeout = duration(scaleDown.NodeDeletionTimeout, sd.NodeDeletionTimeout)
		if seconds := scaleDown.MaxGracefulTerminationSeconds; seconds != nil {
			sd.MaxGracefulTermination = time.Duration(*seconds) * time.Second
		}
		if threshold := scaleDown.UtilizationThreshold; threshold != nil {
			value, err := strconv.ParseFloat(*threshold, 64)
			if err != nil {
				return config, fmt.Errorf("spec.scaleDown.utilizationThreshold %q is not a decimal number: %w", *threshold, err)
			}
			sd.UtilizationThreshold = value
		}
	}

	if consolidation := spec.Consolidation; consolidation != nil {
		c := &config.Consolidation
		if consolidation.Policy != "" {
			c.Policy = scaledown.ConsolidationPolicy(consolidation.Policy)
		}
		c.ConsolidateAfter = duration(consolidation.ConsolidateAfter, c.ConsolidateAfter)
		if threshold := consolidation.BalancedThreshold; threshold != nil {
			value, err := strconv.ParseFloat(*threshold, 64)
			if err != nil || value <= 0 {
				return config, fmt.Errorf("spec.consolidation.balancedThreshold %q is not a positive decimal number", *threshold)
			}
			c.BalancedThreshold = value
		}
		if budget := consolidation.Budget; budget != nil && budget.Nodes != nil {
			if !disruptionBudget.MatchString(*budget.Nodes) {
				return config, fmt.Errorf("spec.consolidation.budget.nodes %q is neither a number of nodes nor a percentage from 0%% to 100%%", *budget.Nodes)
			}
			c.Budget = intstr.Parse(*budget.Nodes)
		}
		budgets, err := scheduledBudgets(consolidation.Budgets)
		if err != nil {
			return config, err
		}
		c.Budgets = budgets
	}

	if backoff := spec.Backoff; backoff != nil {
		config.Backoff.Initial = duration(backoff.Initial, config.Backoff.Initial)
		config.Backoff.Max = duration(backoff.Max, config.Backoff.Max)
		config.Backoff.ResetAfter = duration(backoff.ResetAfter, config.Backoff.ResetAfter)
	}

	if health := spec.ClusterHealth; health != nil {
		config.Health.OkTotalUnreadyCount = int(ptr.Deref(health.OkTotalUnreadyCount, int32(config.Health.OkTotalUnreadyCount)))
		if percentage := health.MaxTotalUnreadyPercentage; percentage != nil {
			config.Health.MaxTotalUnreadyPercentage = float64(*percentage)
		}
	}
	config.Taints.StartupTaints = taintKeys(spec.StartupTaints)
	config.Taints.StatusTaints = taintKeys(spec.StatusTaints)
	config.ScheduledMinimums = ScheduledMinimums(spec.ScheduledMinimums)
	return config, nil
}

// ScheduledMinimums are the engine's specs of the scheduled minimums; the
// engine reads them, and ignores and reports those it cannot read.
func ScheduledMinimums(in []autoscalingv1alpha1.ScheduledMinimum) []minimums.Spec {
	if len(in) == 0 {
		return nil
	}
	out := make([]minimums.Spec, 0, len(in))
	for _, m := range in {
		spec := minimums.Spec{
			Name: m.Name, Names: m.NodeGroups.Names, Selector: m.NodeGroups.LabelSelector,
			Schedule: m.Schedule, TimeZone: m.TimeZone, Duration: m.Duration.Duration, MinSize: int(m.MinSize),
		}
		if m.LeadTime != nil {
			spec.LeadTime = ptr.To(m.LeadTime.Duration)
		}
		out = append(out, spec)
	}
	return out
}

// scheduledBudgets are the engine's spec.consolidation.budgets. A budget
// it cannot read (a time zone the manager does not know, a cron expression
// that names no time) refuses the spec, unlike a scheduled minimum, which
// is ignored: a budget is a limit the user relies on, and the engine keeps
// the configuration it has rather than consolidate without it.
func scheduledBudgets(in []autoscalingv1alpha1.ScheduledDisruptionBudget) ([]scaledown.ScheduledBudget, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]scaledown.ScheduledBudget, 0, len(in))
	for i, b := range in {
		name := fmt.Sprintf("spec.consolidation.budgets[%d]", i)
		if !disruptionBudget.MatchString(b.Nodes) {
			return nil, fmt.Errorf("%s.nodes %q is neither a number of nodes nor a percentage from 0%% to 100%%", name, b.Nodes)
		}
		budget := scaledown.ScheduledBudget{Name: name, Nodes: intstr.Parse(b.Nodes)}
		if b.Schedule != "" || b.Duration != nil {
			if b.Duration == nil {
				return nil, fmt.Errorf("%s has a schedule but no duration", name)
			}
			windows, err := schedule.New(b.Schedule, b.TimeZone, b.Duration.Duration)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			budget.Schedule = windows
		}
		if b.NodeGroups != nil {
			groups, err := groupSelector(*b.NodeGroups)
			if err != nil {
				return nil, fmt.Errorf("%s.nodeGroups: %w", name, err)
			}
			budget.Groups = groups
		}
		out = append(out, budget)
	}
	return out, nil
}

// groupSelector is the engine's selector of the node groups in.
func groupSelector(in autoscalingv1alpha1.ScheduledNodeGroups) (*scaledown.GroupSelector, error) {
	out := &scaledown.GroupSelector{}
	if in.Names != nil {
		out.Names = make(map[string]bool, len(in.Names))
		for _, name := range in.Names {
			out.Names[name] = true
		}
	}
	if in.LabelSelector != nil {
		selector, err := metav1.LabelSelectorAsSelector(in.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
		out.Labels = selector
	}
	return out, nil
}

func taintKeys(keys []autoscalingv1alpha1.TaintKey) []string {
	if len(keys) == 0 {
		return nil
	}
	out := make([]string, 0, len(keys))
	for _, key := range keys {
		out = append(out, string(key))
	}
	return out
}

// LogVerbosity is the log level of the loop a ClusterAutoscaler asks for.
// It is the controller's setting, not the engine's: its default is the
// API's.
func LogVerbosity(spec autoscalingv1alpha1.ClusterAutoscalerSpec) int32 {
	return ptr.Deref(spec.LogVerbosity, autoscalingv1alpha1.DefaultLogVerbosity)
}

// duration is d, or fallback when d is unset.
func duration(d *metav1.Duration, fallback time.Duration) time.Duration {
	if d == nil {
		return fallback
	}
	return d.Duration
}
