package autoscaler

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
)

// Settings are a Config checked and turned into what the parts of a loop
// take. NewSettings is the one check a configuration gets: an engine takes
// Settings whole (Options.Settings, Engine.Apply), so that a configuration
// is applied entirely or not at all.
type Settings struct {
	config       Config
	scaleUp      *scaleup.ScaleUp
	scaleDown    scaledown.Options
	actuator     scaledown.ActuatorOptions
	clusterstate clusterstate.Options
	// minimums are the scheduled minimums, read.
	minimums *minimums.Set
}

// NewSettings checks config and builds its settings, or says what is
// wrong with it. clk is the clock of the engine that will take them.
func NewSettings(config Config, clk clock.PassiveClock) (*Settings, error) {
	if config.ScanInterval <= 0 {
		return nil, fmt.Errorf("scan interval must be positive, got %s", config.ScanInterval)
	}
	if config.MinLoopInterval < 0 || config.MinLoopInterval > config.ScanInterval {
		return nil, fmt.Errorf("minimum loop interval must be between 0 and the scan interval %s, got %s", config.ScanInterval, config.MinLoopInterval)
	}
	if config.MaxNodeProvisionTime < nodegroups.MinMaxNodeProvisionTime {
		return nil, fmt.Errorf("max node provision time must be at least %s, got %s: a shorter one deletes Machines that are still booting",
			nodegroups.MinMaxNodeProvisionTime, config.MaxNodeProvisionTime)
	}
	if t := config.ScaleDown.UtilizationThreshold; t <= 0 || t >= 1 {
		return nil, fmt.Errorf("scale-down utilization threshold must be strictly between 0 and 1, got %v", t)
	}
	settings := &Settings{
		config:       config,
		scaleDown:    scaleDownOptions(config),
		actuator:     actuatorOptions(config, clk),
		clusterstate: clusterstateOptions(config),
		minimums:     minimums.New(config.ScheduledMinimums),
	}
	if err := settings.scaleDown.Validate(); err != nil {
		return nil, fmt.Errorf("invalid scale-down configuration: %w", err)
	}
	if err := settings.actuator.Validate(); err != nil {
		return nil, fmt.Errorf("invalid scale-down configuration: %w", err)
	}
	scaleUp, err := scaleup.New(scaleUpOptions(config, clk))
	if err != nil {
		return nil, fmt.Errorf("invalid scale-up configuration: %w", err)
	}
	settings.scaleUp = scaleUp
	return settings, nil
}

// Config is the configuration the settings were built from.
func (s *Settings) Config() Config { return s.config }

// The options of each part under a configuration.

func scaleUpOptions(config Config, clk clock.PassiveClock) scaleup.Options {
	return scaleup.Options{
		PriorityCutoff:           config.PodPriorityThreshold,
		NewPodScaleUpDelay:       config.NewPodScaleUpDelay,
		MaxNodesPerScaleUp:       config.MaxNodesPerScaleUp,
		MaxPendingPodsPerLoop:    config.MaxPendingPodsPerLoop,
		Limits:                   scaleUpLimits(config),
		Expanders:                config.Expanders,
		Priorities:               config.ExpanderPriorities,
		InstanceTypePrices:       config.InstanceTypePrices,
		BalanceSimilarNodeGroups: config.BalanceSimilarNodeGroups,
		BalancingIgnoredLabels:   config.BalancingIgnoredLabels,
		NodeRules:                config.Taints.rules(),
		Clock:                    clk,
		Workers:                  config.PlanningWorkers,
		MinParallelWork:          scaleup.DefaultMinParallelWork,
	}
}

// scaleUpLimits are the cluster-wide limits that new nodes must respect.
func scaleUpLimits(config Config) scaleup.ResourceLimits {
	limits := scaleup.ResourceLimits{
		MaxNodesTotal: config.Limits.MaxNodesTotal,
		Cores:         scaleup.Range{Min: config.Limits.MinCores, Max: config.Limits.MaxCores},
		MemoryBytes:   scaleup.Range{Min: config.Limits.MinMemory, Max: config.Limits.MaxMemory},
	}
	if len(config.Limits.GPUs) > 0 {
		limits.GPUs = map[corev1.ResourceName]scaleup.Range{}
		for name, r := range config.Limits.GPUs {
			limits.GPUs[name] = scaleup.Range{Min: r.Min, Max: r.Max}
		}
	}
	return limits
}

func scaleDownOptions(config Config) scaledown.Options {
	sd := config.ScaleDown
	opts := scaledown.Options{
		Groups:                            config.groupSettings(),
		DelayAfterAdd:                     sd.DelayAfterAdd,
		DelayAfterDelete:                  sd.DelayAfterDelete,
		DelayAfterFailure:                 sd.DelayAfterFailure,
		PriorityCutoff:                    config.PodPriorityThreshold,
		IgnoreDaemonSetsUtilization:       sd.IgnoreDaemonSetsUtilization,
		SkipNodesWithLocalStorage:         sd.SkipNodesWithLocalStorage,
		SkipNodesWithSystemPods:           sd.SkipNodesWithSystemPods,
		SkipNodesWithCustomControllerPods: sd.SkipNodesWithCustomControllerPods,
		MaxEmptyBulkDelete:                sd.MaxEmptyBulkDelete,
		MaxParallelDrains:                 sd.MaxParallelDrains,
		Minimums:                          scaledown.ClusterMinimums{Cores: config.Limits.MinCores, MemoryBytes: config.Limits.MinMemory},
		NodeRules:                         config.Taints.rules(),
		Consolidation: scaledown.ConsolidationOptions{
			Policy:            config.Consolidation.Policy,
			ConsolidateAfter:  config.Consolidation.ConsolidateAfter,
			Budget:            config.Consolidation.Budget,
			Budgets:           config.Consolidation.Budgets,
			Prices:            config.InstanceTypePrices,
			MaxSimulations:    config.Consolidation.MaxSimulations,
			BalancedThreshold: config.Consolidation.BalancedThreshold,
			Limits:            scaleUpLimits(config),
		},
		Workers:         config.PlanningWorkers,
		MinParallelWork: scaledown.DefaultMinParallelWork,
	}
	for name, r := range config.Limits.GPUs {
		if r.Min > 0 {
			if opts.Minimums.GPUs == nil {
				opts.Minimums.GPUs = map[corev1.ResourceName]int64{}
			}
			opts.Minimums.GPUs[name] = r.Min
		}
	}
	return opts
}

func actuatorOptions(config Config, clk clock.PassiveClock) scaledown.ActuatorOptions {
	return scaledown.ActuatorOptions{
		MaxPodEvictionTime:          config.ScaleDown.MaxPodEvictionTime,
		MaxGracefulTermination:      config.ScaleDown.MaxGracefulTermination,
		CordonNodeBeforeTerminating: config.ScaleDown.CordonNodeBeforeTerminating,
		NodeDeletionTimeout:         config.ScaleDown.NodeDeletionTimeout,
		Clock:                       clk,
	}
}

func clusterstateOptions(config Config) clusterstate.Options {
	return clusterstate.Options{
		Groups:                    config.groupSettings(),
		NodeRules:                 config.Taints.rules(),
		Backoff:                   clusterstate.BackoffOptions(config.Backoff),
		OkTotalUnreadyCount:       config.Health.OkTotalUnreadyCount,
		MaxTotalUnreadyPercentage: config.Health.MaxTotalUnreadyPercentage,
	}
}
