package v1alpha1

import "time"

// Bounds and defaults of ClusterAutoscalerSpec that Go code needs, such as
// `kubectl capi-autoscaler convert`. The kubebuilder markers of the fields
// cannot name Go constants, so they repeat these values; a test holds the
// generated CRD to them.
const (
	// DefaultLogVerbosity is the default of spec.logVerbosity.
	DefaultLogVerbosity = 1
	// MaxLogVerbosity is the highest spec.logVerbosity.
	MaxLogVerbosity = 10
	// MaxDrainParallelism is the highest spec.scaleDown.maxDrainParallelism.
	MaxDrainParallelism = 1000
	// MaxTaintKeys is the most keys of spec.startupTaints and spec.statusTaints.
	MaxTaintKeys = 64
	// MaxBalancingIgnoredLabels is the most labels of spec.balancingIgnoredLabels.
	MaxBalancingIgnoredLabels = 64
	// MaxLabelKeyLength is the longest label or taint key: a 253-character
	// prefix, a slash and a 63-character name.
	MaxLabelKeyLength = 317
	// MaxGPULimits is the most GPU types of spec.resourceLimits.gpus.
	MaxGPULimits = 32
	// MaxExpanderPriorities is the most priorities of spec.expanderPriorities.
	MaxExpanderPriorities = 100
	// MaxNodeGroupIDPatterns is the most patterns of a priority.
	MaxNodeGroupIDPatterns = 100
	// MaxNodeGroupIDPatternLength is the longest pattern of a priority.
	MaxNodeGroupIDPatternLength = 512
	// MaxClusterNameLength is the longest spec.clusterName.
	MaxClusterNameLength = 63
	// DisruptionBudgetPattern is what spec.consolidation.budget.nodes is
	// written as: a number of nodes, or a percentage from 0% to 100%.
	DisruptionBudgetPattern = `^((100|[0-9]{1,2})%|[0-9]{1,9})$`
)

// MinScanInterval is the shortest spec.scanInterval.
const MinScanInterval = time.Second
