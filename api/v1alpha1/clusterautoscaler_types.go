package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Expander names a strategy that picks among scale-up options.
// +kubebuilder:validation:Enum=random;most-pods;least-waste;priority;price
type Expander string

const (
	// RandomExpander picks an option at random.
	RandomExpander Expander = "random"
	// MostPodsExpander picks the option that schedules the most pods.
	MostPodsExpander Expander = "most-pods"
	// LeastWasteExpander picks the option that leaves the least idle cpu and memory.
	LeastWasteExpander Expander = "least-waste"
	// PriorityExpander picks the option whose node group has the highest priority.
	PriorityExpander Expander = "priority"
	// PriceExpander picks the option whose new nodes cost least for the
	// pods they help (docs/cost.md).
	PriceExpander Expander = "price"
)

// InstanceTypePrice is the price of the nodes of one instance type.
type InstanceTypePrice struct {
	// instanceType is a value of the node.kubernetes.io/instance-type label.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	InstanceType string `json:"instanceType"`

	// price is what a node of the type costs per hour, as a decimal such
	// as "0.192", in the currency of the other prices: up to 9 digits,
	// then optionally a point and up to 6 more.
	// +required
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]{1,9}(\.[0-9]{1,6})?$`
	Price string `json:"price"`
}

// PriceSource says where the price of a node group comes from.
// +kubebuilder:validation:Enum=NodeGroup;InstanceType;Default
type PriceSource string

const (
	// NodeGroupPriceSource: the group's
	// capacity.cluster-autoscaler.kubernetes.io/price annotation.
	NodeGroupPriceSource PriceSource = "NodeGroup"
	// InstanceTypePriceSource: spec.instanceTypePrices, by the instance
	// type of the group's nodes.
	InstanceTypePriceSource PriceSource = "InstanceType"
	// DefaultPriceSource: the default, proportional to the capacity of the
	// group's nodes (docs/cost.md).
	DefaultPriceSource PriceSource = "Default"
)

// Mode says whether the autoscaler acts on the cluster or only says what it
// would do.
// +kubebuilder:validation:Enum=Active;DryRun
type Mode string

const (
	// ActiveMode: the autoscaler scales the cluster.
	ActiveMode Mode = "Active"
	// DryRunMode: the autoscaler runs every loop and plans as in Active
	// mode, but writes nothing to the workload cluster or its Machines (no
	// replicas, marks, taints, cordons, evictions or pod events). What it
	// would have done is published in WouldScaleUp, WouldScaleDown and
	// WouldAnswerProvisioningRequest events, status.dryRunDecisions and
	// metrics with mode="DryRun".
	DryRunMode Mode = "DryRun"
)

// ClusterAutoscalerSpec configures autoscaling of one workload cluster.
// +kubebuilder:validation:XValidation:rule="!has(self.expanders) || !self.expanders.exists(e, e == 'priority') || (has(self.expanderPriorities) && size(self.expanderPriorities) > 0)",message="expanderPriorities must be set when the priority expander is used"
// +kubebuilder:validation:XValidation:rule="!has(self.minLoopInterval) || !has(self.scanInterval) || duration(self.minLoopInterval) <= duration(self.scanInterval)",message="minLoopInterval must not exceed scanInterval"
type ClusterAutoscalerSpec struct {
	// clusterName is the name of the Cluster, in the same namespace, to
	// autoscale; it cannot change.
	// The controller makes that Cluster an owner of the ClusterAutoscaler:
	// clusterctl move takes the ClusterAutoscaler along with the Cluster, and
	// deleting the Cluster deletes the ClusterAutoscaler.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterName is immutable"
	ClusterName string `json:"clusterName"`

	// mode is Active (the default) to scale the cluster, or DryRun to run
	// beside another autoscaler, such as the upstream cluster-autoscaler,
	// and only publish what this one would do. A DryRun ClusterAutoscaler
	// does not own its Cluster: another ClusterAutoscaler of the same
	// Cluster may be Active beside it. It neither refuses to plan because
	// another autoscaler acts on the cluster, nor touches that one's
	// taints. A change of mode takes effect at the next loop; leaving
	// Active gives back the drains in progress.
	// +optional
	// +kubebuilder:default=Active
	Mode Mode `json:"mode,omitempty"`

	// workloadKubeconfigSecretRef names a Secret, in the namespace of the
	// ClusterAutoscaler, holding the kubeconfig the autoscaler reaches the
	// workload cluster with: typically for a ServiceAccount of the workload
	// cluster bound to the role of config/workload-rbac, narrower than the
	// administrator credentials of the Cluster's <cluster>-kubeconfig
	// Secret, which is used when this is unset. While the Secret is missing
	// or holds no usable kubeconfig, nothing is autoscaled: the Cluster's
	// kubeconfig is never used instead. A changed Secret is picked up
	// without a restart.
	// +optional
	WorkloadKubeconfigSecretRef *WorkloadKubeconfigSecretReference `json:"workloadKubeconfigSecretRef,omitempty"`

	// upstreamAutoscaler says where an upstream cluster-autoscaler that may
	// run in the workload cluster, as during a switch, keeps its leader
	// election Lease and its status ConfigMap: while it renewed the one or
	// wrote the other within two minutes, this autoscaler does not scale.
	// Unset fields take upstream's defaults (kube-system,
	// cluster-autoscaler, cluster-autoscaler-status); its deletion taints
	// on nodes tell wherever it runs. kubectl capi-autoscaler convert
	// writes what the upstream flags say.
	// +optional
	UpstreamAutoscaler *UpstreamAutoscalerLocation `json:"upstreamAutoscaler,omitempty"`

	// podPriorityThreshold is the priority cutoff: pods with a lower priority
	// never trigger a scale-up and never block a scale-down.
	// +optional
	// +kubebuilder:default=-10
	PodPriorityThreshold *int32 `json:"podPriorityThreshold,omitempty"`

	// resourceLimits bound the size of the whole cluster. Totals count every
	// node of the cluster, control plane included.
	// +optional
	ResourceLimits *ResourceLimits `json:"resourceLimits,omitempty"`

	// scaleDown configures the removal of underutilized nodes.
	// +optional
	// +kubebuilder:default={}
	ScaleDown *ScaleDownConfig `json:"scaleDown,omitempty"`

	// consolidation removes, on top of the underutilized nodes scale-down
	// removes, the nodes whose removal saves money while their pods fit on
	// the nodes that remain (docs/cost.md). Off by default. It runs only
	// while scale-down is enabled.
	// +optional
	// +kubebuilder:default={}
	Consolidation *ConsolidationConfig `json:"consolidation,omitempty"`

	// balanceSimilarNodeGroups spreads new nodes evenly over node groups with
	// the same capacity and labels, e.g. one MachineDeployment per zone.
	// +optional
	// +kubebuilder:default=false
	BalanceSimilarNodeGroups *bool `json:"balanceSimilarNodeGroups,omitempty"`

	// balancingIgnoredLabels are node labels that may differ between node
	// groups that are otherwise similar, in addition to zone and hostname.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=317
	BalancingIgnoredLabels []string `json:"balancingIgnoredLabels,omitempty"`

	// expanders choose among the node groups able to help pending pods,
	// applied in order: each one passes its ties to the next, and ties left
	// at the end go to the first group by ID. The default, least-waste, is
	// the upstream cluster-autoscaler's since 1.33 (kubernetes/autoscaler#7631;
	// it was random before).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:default={"least-waste"}
	Expanders []Expander `json:"expanders,omitempty"`

	// CEL has no "is a regular expression" function, but matches() fails to
	// evaluate on an invalid pattern, and a rule that fails to evaluate
	// rejects the object with the parse error. CEL compiles patterns with
	// Go's regexp package, as the engine does, so both accept the same syntax.
	// The API server does not ratchet evaluation errors, so the rule passes
	// an unchanged list itself: an object stored before the rule existed
	// can still have its status and finalizers written.
	// The rule's cost grows with the pattern length: 512 characters keep it
	// within the API server's budget, and a longer alternation can be split
	// into several patterns.

	// expanderPriorities configure the priority expander: node groups whose
	// ID (Kind/namespace/name) matches a pattern get its priority; the
	// highest priority wins.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="(oldSelf.hasValue() && oldSelf.value() == self) || self.all(p, p.nodeGroupIDPatterns.all(pattern, type(''.matches(pattern)) == bool))",message="nodeGroupIDPatterns must be regular expressions in RE2 syntax",optionalOldSelf=true
	ExpanderPriorities []ExpanderPriority `json:"expanderPriorities,omitempty"`

	// instanceTypePrices give what a node costs per hour by its instance
	// type: the node.kubernetes.io/instance-type label of the node a group's
	// new nodes are built from (one of its nodes, or, at zero nodes, the
	// labels of its capacity annotation). A group's
	// capacity.cluster-autoscaler.kubernetes.io/price annotation wins over
	// them; a group priced by neither costs a default proportional to its
	// nodes' capacity. The price expander weighs these prices.
	// +optional
	// +listType=map
	// +listMapKey=instanceType
	// +kubebuilder:validation:MaxItems=256
	InstanceTypePrices []InstanceTypePrice `json:"instanceTypePrices,omitempty"`

	// The rule's minimum is nodegroups.MinMaxNodeProvisionTime, which the
	// engine and the per-group annotation enforce; a test ties the two.

	// maxNodeProvisionTime is how long a new node may take to register before
	// its scale-up counts as failed, and how long a Machine may be without a
	// registered node, from when the autoscaler first saw it so, before it
	// is deleted, but never below the group's min size (a
	// BrokenInstancesAtMinSize problem on its status row says it is kept,
	// for a MachineHealthCheck to replace). At least 1m: a shorter time
	// deletes Machines that are still booting.
	// +optional
	// +kubebuilder:default="15m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="maxNodeProvisionTime must be at least 1m: a shorter time deletes Machines that are still booting"
	MaxNodeProvisionTime *metav1.Duration `json:"maxNodeProvisionTime,omitempty"`

	// maxNodesPerScaleUp caps the nodes added by one scale-up.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	MaxNodesPerScaleUp *int32 `json:"maxNodesPerScaleUp,omitempty"`

	// maxPendingPodsPerLoop bounds the pending pods one loop plans a
	// scale-up for, so that a huge backlog cannot hold a loop past its
	// timeout. The others wait for the next loop, the highest priority and
	// then those that waited longest first; status.podsLeftForNextLoop
	// counts them. Pods already given a node on its way do not count. 0
	// means no bound.
	// +optional
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=0
	MaxPendingPodsPerLoop *int32 `json:"maxPendingPodsPerLoop,omitempty"`

	// newPodScaleUpDelay is how old an unschedulable pod must be before it
	// is considered for a scale-up, so that short bursts can settle.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="newPodScaleUpDelay must not be negative"
	NewPodScaleUpDelay *metav1.Duration `json:"newPodScaleUpDelay,omitempty"`

	// scanInterval is how often the cluster is re-evaluated when nothing
	// else triggers a loop.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="scanInterval must be at least 1s"
	ScanInterval *metav1.Duration `json:"scanInterval,omitempty"`

	// minLoopInterval is the least time between the starts of two loops
	// that pods turning unschedulable start. Such a pod starts a loop once
	// no other did for 200ms; under pod churn, where they keep coming,
	// loops start at most once per minLoopInterval instead of every half
	// second. A pod that turns unschedulable minLoopInterval after the
	// last such loop started is not held back, nor are the loops of
	// scanInterval. 0s turns the bound off; at most scanInterval.
	// +optional
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="minLoopInterval must not be negative"
	MinLoopInterval *metav1.Duration `json:"minLoopInterval,omitempty"`

	// backoff configures how long a node group that failed to scale up is
	// left out of scale-ups.
	// +optional
	// +kubebuilder:default={}
	Backoff *BackoffConfig `json:"backoff,omitempty"`

	// clusterHealth says when the cluster has too many unready nodes to be
	// autoscaled safely.
	// +optional
	// +kubebuilder:default={}
	ClusterHealth *ClusterHealthConfig `json:"clusterHealth,omitempty"`

	// logVerbosity is the log level of this cluster's autoscaling loop.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	LogVerbosity *int32 `json:"logVerbosity,omitempty"`

	// startupTaints are keys of taints that nodes carry until they have
	// started, as the upstream autoscaler's --startup-taint: a node with one
	// counts as starting (upcoming), not as ready capacity, and templates
	// leave them out. Taints whose key starts with
	// startup-taint.cluster-autoscaler.kubernetes.io/ or
	// ignore-taint.cluster-autoscaler.kubernetes.io/, and Cluster API's
	// node.cluster.x-k8s.io/uninitialized, always are startup taints.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	StartupTaints []TaintKey `json:"startupTaints,omitempty"`

	// statusTaints are keys of taints that report a node's status, as the
	// upstream autoscaler's --status-taint: templates leave them out, but a
	// node with one is ready. Taints whose key starts with
	// status-taint.cluster-autoscaler.kubernetes.io/ always are status taints.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	StatusTaints []TaintKey `json:"statusTaints,omitempty"`

	// scheduledMinimums change the minimum size of node groups during the
	// windows of a schedule: 0 to put a group to sleep at night, more to
	// warm it up for office hours. The engine reaches a raised minimum by
	// scaling up, and a lowered one only through the normal scale-down
	// (unneeded time, drains, PodDisruptionBudgets), never by writing the
	// replicas. Where windows that disagree are in effect for a group at
	// once, the highest minimum applies, and the group's status row says
	// so (docs/capacity.md, "Scheduled minimums and sleep").
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	ScheduledMinimums []ScheduledMinimum `json:"scheduledMinimums,omitempty"`
}

// ScheduledMinimum is a minimum size that node groups take during the
// windows of a schedule: a window opens at each time the cron expression
// names, in the time zone, and stays open for the duration.
type ScheduledMinimum struct {
	// name names the window in the status, events and DryRun decisions.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="must be a lowercase RFC 1123 label"
	Name string `json:"name"`

	// nodeGroups select the node groups the minimum applies to.
	// +required
	NodeGroups ScheduledNodeGroups `json:"nodeGroups"`

	// schedule is a cron expression of five fields (minute, hour, day of
	// month, month, day of week), e.g. "0 8 * * 1-5" for 08:00 on
	// weekdays: each time it names opens a window.
	// +required
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^\s*[0-9A-Za-z*?,/-]+(\s+[0-9A-Za-z*?,/-]+){4}\s*$`
	Schedule string `json:"schedule"`

	// timeZone is the IANA time zone the schedule is read in, such as
	// Europe/Paris; UTC when unset. A zone the manager does not know is
	// reported on the status, and the window ignored.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone must name a time zone, not Local"
	TimeZone string `json:"timeZone,omitempty"`

	// duration is how long each window stays open, e.g. 10h.
	// +required
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="duration must be positive"
	Duration metav1.Duration `json:"duration"`

	// leadTime is how early a minimum is raised: a window that raises the
	// minimum takes effect leadTime before it opens, and one that lowers
	// it ends leadTime before it closes, so that the nodes are Ready when
	// they are needed. Unset, the group's maxNodeProvisionTime.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="leadTime must not be negative"
	LeadTime *metav1.Duration `json:"leadTime,omitempty"`

	// minSize is the groups' minimum size while the window is open: 0
	// lets scale-down empty them ("sleep"), a number above the min-size
	// annotation has them scaled up to it. It is capped at each group's
	// max size.
	// +required
	// +kubebuilder:validation:Minimum=0
	MinSize int32 `json:"minSize"`
}

// ScheduledNodeGroups select node groups: the MachineDeployments,
// standalone MachineSets and MachinePools of the Cluster that carry the
// autoscaler's size annotations. A group is selected when it matches
// every field that is set.
// +kubebuilder:validation:XValidation:rule="has(self.names) || has(self.labelSelector)",message="name node groups, or select them by label"
type ScheduledNodeGroups struct {
	// names are names of MachineDeployments, standalone MachineSets and
	// MachinePools.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=253
	Names []string `json:"names,omitempty"`

	// labelSelector selects MachineDeployments, standalone MachineSets
	// and MachinePools by their own labels.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// WorkloadKubeconfigSecretReference names a kubeconfig in a Secret of the
// ClusterAutoscaler's namespace.
type WorkloadKubeconfigSecretReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be the name of a Secret: a lowercase RFC 1123 subdomain"
	Name string `json:"name"`

	// key of the kubeconfig in the Secret's data; "value", the key of
	// Cluster API's kubeconfig Secrets, when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key,omitempty"`
}

// UpstreamAutoscalerLocation is where the upstream cluster-autoscaler keeps
// what shows it runs, as its flags set it.
type UpstreamAutoscalerLocation struct {
	// namespace is upstream's --namespace, where its status ConfigMap is;
	// kube-system when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="must be the name of a namespace"
	Namespace string `json:"namespace,omitempty"`

	// leaseNamespace is upstream's --leader-elect-resource-namespace, where
	// its Lease is; namespace when unset, as upstream defaults it.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Label().validate(self).hasValue()",message="must be the name of a namespace"
	LeaseNamespace string `json:"leaseNamespace,omitempty"`

	// leaseName is upstream's --leader-elect-resource-name;
	// cluster-autoscaler when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be the name of a Lease"
	LeaseName string `json:"leaseName,omitempty"`

	// statusConfigMapName is upstream's --status-config-map-name;
	// cluster-autoscaler-status when unset.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be the name of a ConfigMap"
	StatusConfigMapName string `json:"statusConfigMapName,omitempty"`
}

// TaintKey is the key of a node taint, a qualified name such as
// example.com/cni-not-ready.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=317
// +kubebuilder:validation:XValidation:rule="!format.qualifiedName().validate(self).hasValue()",message="must be a taint key: a qualified name such as example.com/cni-not-ready"
type TaintKey string

// ResourceLimits bound the resources of the whole cluster.
type ResourceLimits struct {
	// maxNodesTotal is the most nodes the cluster may have.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxNodesTotal *int32 `json:"maxNodesTotal,omitempty"`

	// cores bounds the total cpu cores of the cluster.
	// +optional
	Cores *ResourceRange `json:"cores,omitempty"`

	// memory bounds the total memory of the cluster, in GiB.
	// +optional
	Memory *ResourceRange `json:"memory,omitempty"`

	// gpus bounds the total GPUs of the cluster, per GPU type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	GPUs []GPULimit `json:"gpus,omitempty"`
}

// ResourceRange is an inclusive range of a countable resource.
// +kubebuilder:validation:XValidation:rule="!has(self.min) || !has(self.max) || self.min <= self.max",message="min must be less than or equal to max"
type ResourceRange struct {
	// min is the least the cluster keeps; scale-down stops there.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Min *int32 `json:"min,omitempty"`

	// max is the most the cluster may have; scale-up stops there.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Max *int32 `json:"max,omitempty"`
}

// GPULimit bounds the GPUs of one type.
// +kubebuilder:validation:XValidation:rule="self.min <= self.max",message="min must be less than or equal to max"
type GPULimit struct {
	// type is the extended resource name of the GPU, e.g. nvidia.com/gpu,
	// which counts the nodes' capacity of that resource, or the name of a
	// DRA driver, e.g. gpu.nvidia.com, which counts the devices the driver
	// publishes in the node-local ResourceSlices of each node (for a node
	// group at zero, the gpu-count of its dra-driver annotation). An
	// extended resource name always has a slash, a driver name never.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Type string `json:"type"`

	// min is the least GPUs of this type the cluster keeps.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	Min int32 `json:"min,omitempty"`

	// max is the most GPUs of this type the cluster may have.
	// +required
	// +kubebuilder:validation:Minimum=0
	Max int32 `json:"max"`
}

// ExpanderPriority gives node groups matching any of the patterns a priority.
type ExpanderPriority struct {
	// priority is higher for preferred node groups.
	// +required
	Priority int32 `json:"priority"`

	// nodeGroupIDPatterns are regular expressions (RE2 syntax) matched
	// against node group IDs such as MachineDeployment/default/workers-spot.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	NodeGroupIDPatterns []string `json:"nodeGroupIDPatterns"`
}

// ScaleDownConfig configures the removal of underutilized nodes.
type ScaleDownConfig struct {
	// enabled turns scale-down on.
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// delayAfterAdd is how long after a scale-up scale-down resumes.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="delayAfterAdd must not be negative"
	DelayAfterAdd *metav1.Duration `json:"delayAfterAdd,omitempty"`

	// delayAfterDelete is how long after a node deletion scale-down resumes.
	// +optional
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="delayAfterDelete must not be negative"
	DelayAfterDelete *metav1.Duration `json:"delayAfterDelete,omitempty"`

	// delayAfterFailure is how long after a failed scale-down it resumes.
	// +optional
	// +kubebuilder:default="3m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="delayAfterFailure must not be negative"
	DelayAfterFailure *metav1.Duration `json:"delayAfterFailure,omitempty"`

	// unneededTime is how long a node must stay unneeded before it is removed.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="unneededTime must not be negative"
	UnneededTime *metav1.Duration `json:"unneededTime,omitempty"`

	// unreadyTime is how long an unready node must stay unneeded before it
	// is removed.
	// +optional
	// +kubebuilder:default="20m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="unreadyTime must not be negative"
	UnreadyTime *metav1.Duration `json:"unreadyTime,omitempty"`

	// utilizationThreshold is the utilization (the larger of cpu and memory
	// requests over allocatable) below which a node may be removed, written
	// as a decimal strictly between 0 and 1, e.g. "0.5".
	// +optional
	// +kubebuilder:default="0.5"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]*\.?[0-9]+$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0 && double(self) < 1.0",message="utilizationThreshold must be strictly between 0 and 1"
	UtilizationThreshold *string `json:"utilizationThreshold,omitempty"`

	// maxEmptyBulkDelete is the most empty nodes removed at once.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	MaxEmptyBulkDelete *int32 `json:"maxEmptyBulkDelete,omitempty"`

	// maxGracefulTerminationSeconds caps the grace period given to evicted pods.
	// +optional
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	MaxGracefulTerminationSeconds *int32 `json:"maxGracefulTerminationSeconds,omitempty"`

	// ignoreDaemonSetsUtilization leaves the requests of DaemonSet pods out
	// of a node's utilization.
	// +optional
	// +kubebuilder:default=false
	IgnoreDaemonSetsUtilization *bool `json:"ignoreDaemonSetsUtilization,omitempty"`

	// skipNodesWithLocalStorage keeps nodes running pods with local storage
	// (hostPath, or emptyDir not in memory) that the pods do not list in the
	// cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes annotation.
	// +optional
	// +kubebuilder:default=true
	SkipNodesWithLocalStorage *bool `json:"skipNodesWithLocalStorage,omitempty"`

	// skipNodesWithSystemPods keeps nodes running kube-system pods, other than
	// DaemonSet and mirror pods, that no PodDisruptionBudget covers.
	// +optional
	// +kubebuilder:default=true
	SkipNodesWithSystemPods *bool `json:"skipNodesWithSystemPods,omitempty"`

	// skipNodesWithCustomControllerPods keeps nodes running pods whose
	// controller is not a ReplicaSet, StatefulSet, Job or
	// ReplicationController; when false, any controller counts as able to
	// recreate its pods.
	// +optional
	// +kubebuilder:default=true
	SkipNodesWithCustomControllerPods *bool `json:"skipNodesWithCustomControllerPods,omitempty"`

	// maxDrainParallelism is the most non-empty nodes drained at once.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxDrainParallelism *int32 `json:"maxDrainParallelism,omitempty"`

	// cordonNodeBeforeTerminating cordons nodes (spec.unschedulable) on top
	// of the ToBeDeletedByClusterAutoscaler taint before removing them. A
	// node given back is uncordoned only when the autoscaler cordoned it,
	// whatever this says by then.
	// +optional
	// +kubebuilder:default=false
	CordonNodeBeforeTerminating *bool `json:"cordonNodeBeforeTerminating,omitempty"`

	// nodeDeletionTimeout is how long a node handed to Cluster API for
	// deletion (its Machine marked, its group's replicas lowered) may stay
	// while its Machine is not being deleted, e.g. because another writer
	// set the replicas back. Then the autoscaler gives it back: it removes
	// its taint, its cordon and the Machine's mark, and says so in a
	// NodeNotDeleted Warning event on the group and on the group's status
	// row. At least 10s.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="nodeDeletionTimeout must be at least 10s"
	NodeDeletionTimeout *metav1.Duration `json:"nodeDeletionTimeout,omitempty"`
}

// ConsolidationPolicy says what consolidation may do.
// +kubebuilder:validation:Enum=Disabled;Delete;Replace;Balanced
type ConsolidationPolicy string

const (
	// ConsolidationDisabled: nodes go only when scale-down finds them
	// unneeded, as with the upstream cluster-autoscaler.
	ConsolidationDisabled ConsolidationPolicy = "Disabled"
	// ConsolidationDelete: nodes also go, several at once and whatever
	// their utilization, when all their pods fit on the nodes that remain;
	// the set that saves the most is chosen.
	ConsolidationDelete ConsolidationPolicy = "Delete"
	// ConsolidationReplace: on top of Delete, nodes are replaced by fewer
	// or cheaper nodes of any node group when the new nodes cost less than
	// those they replace; the new nodes are created, and Ready, before the
	// nodes they replace are drained.
	ConsolidationReplace ConsolidationPolicy = "Replace"
	// ConsolidationBalanced: Replace, but only the consolidations whose
	// share of the cost saved, over their share of the pods evicted,
	// reaches balancedThreshold, as Karpenter's Balanced policy.
	ConsolidationBalanced ConsolidationPolicy = "Balanced"
)

// ConsolidationConfig configures consolidation.
type ConsolidationConfig struct {
	// policy is Disabled (the default), Delete, Replace or Balanced.
	// +optional
	// +kubebuilder:default=Disabled
	Policy ConsolidationPolicy `json:"policy,omitempty"`

	// balancedThreshold is, under the Balanced policy, the least score of a
	// consolidation: the share of the cost of the node groups' nodes it
	// saves over the share of their pods it evicts, written as a positive
	// decimal, e.g. "0.5" (Karpenter's: savings worth at least half the
	// disruption). Higher values consolidate less.
	// +optional
	// +kubebuilder:default="0.5"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]*\.?[0-9]+$`
	// +kubebuilder:validation:XValidation:rule="double(self) > 0.0",message="balancedThreshold must be positive"
	BalancedThreshold *string `json:"balancedThreshold,omitempty"`

	// consolidateAfter is how long the cluster's nodes, and the pods of a
	// node, must have stayed the same before consolidation considers the
	// node: a cluster that is still changing is left to settle, and no pod
	// is moved twice within it.
	// +optional
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="consolidateAfter must not be negative"
	ConsolidateAfter *metav1.Duration `json:"consolidateAfter,omitempty"`

	// budget bounds the disruption consolidation causes, at all times.
	// +optional
	// +kubebuilder:default={}
	Budget *DisruptionBudget `json:"budget,omitempty"`

	// budgets bound it further, each at all times or only inside the
	// windows of a schedule, as Karpenter's disruption budgets: where
	// several apply to a group at once (budget and the group's annotation
	// included), the smallest wins. {nodes: "0", schedule: "0 9 * * 1-5",
	// duration: 8h} stops consolidation during office hours. They only
	// restrict: to allow more outside a window, raise budget.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Budgets []ScheduledDisruptionBudget `json:"budgets,omitempty"`
}

// ScheduledDisruptionBudget bounds how many nodes of one node group
// consolidation removes at once, at all times or only inside the windows
// of a schedule: a window opens at each time the cron expression names, in
// the time zone, and stays open for the duration.
// +kubebuilder:validation:XValidation:rule="has(self.schedule) == has(self.duration)",message="schedule and duration go together"
// +kubebuilder:validation:XValidation:rule="!has(self.timeZone) || has(self.schedule)",message="timeZone needs a schedule"
type ScheduledDisruptionBudget struct {
	// nodes is the most nodes of one node group that one consolidation
	// removes while the budget applies: a number such as "2", or a
	// percentage of the group's nodes such as "10%", rounded up. "0"
	// stops consolidation.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^((100|[0-9]{1,2})%|[0-9]{1,9})$`
	Nodes string `json:"nodes"`

	// schedule is a cron expression of five fields (minute, hour, day of
	// month, month, day of week), e.g. "0 9 * * 1-5" for 09:00 on
	// weekdays: each time it names opens a window in which the budget
	// applies. Unset, the budget applies at all times.
	// +optional
	// +kubebuilder:validation:MinLength=9
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^\s*[0-9A-Za-z*?,/-]+(\s+[0-9A-Za-z*?,/-]+){4}\s*$`
	Schedule string `json:"schedule,omitempty"`

	// timeZone is the IANA time zone the schedule is read in, such as
	// Europe/Paris; UTC when unset. A zone the manager does not know
	// makes the configuration invalid, as a schedule that names no time
	// that exists: the engine keeps the configuration it had rather than
	// consolidate without the budget.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$`
	// +kubebuilder:validation:XValidation:rule="self != 'Local'",message="timeZone must name a time zone, not Local"
	TimeZone string `json:"timeZone,omitempty"`

	// duration is how long each window stays open, e.g. 8h; it goes with
	// schedule.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="duration must be positive"
	Duration *metav1.Duration `json:"duration,omitempty"`

	// nodeGroups select the node groups the budget applies to, as those
	// of scheduledMinimums; unset, it applies to every group.
	// +optional
	NodeGroups *ScheduledNodeGroups `json:"nodeGroups,omitempty"`
}

// DisruptionBudget bounds how many nodes consolidation removes at once.
type DisruptionBudget struct {
	// nodes is the most nodes of one node group that one consolidation
	// removes: a number such as "2", or a percentage of the group's nodes
	// such as "10%", rounded up. "0" stops consolidation, but for the groups
	// with a budget of their own (the annotation
	// autoscaling.cluster.x-k8s.io/consolidation-budget, which replaces
	// this one for its group).
	// +optional
	// +kubebuilder:default="10%"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^((100|[0-9]{1,2})%|[0-9]{1,9})$`
	Nodes *string `json:"nodes,omitempty"`
}

// BackoffConfig configures the backoff of node groups that failed to scale up.
// +kubebuilder:validation:XValidation:rule="!has(self.initial) || !has(self.max) || duration(self.initial) <= duration(self.max)",message="initial backoff must not exceed max backoff"
type BackoffConfig struct {
	// initial is the first backoff after a failure.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="initial backoff must not be negative"
	Initial *metav1.Duration `json:"initial,omitempty"`

	// max caps the backoff, which doubles with each failure.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="max backoff must not be negative"
	Max *metav1.Duration `json:"max,omitempty"`

	// resetAfter forgets earlier failures of a group after this long without one.
	// +optional
	// +kubebuilder:default="3h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="resetAfter must not be negative"
	ResetAfter *metav1.Duration `json:"resetAfter,omitempty"`
}

// ClusterHealthConfig says when a cluster is too unhealthy to autoscale: when
// both more than okTotalUnreadyCount nodes and more than
// maxTotalUnreadyPercentage percent of the nodes are unready.
type ClusterHealthConfig struct {
	// okTotalUnreadyCount is the number of unready nodes always tolerated.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	OkTotalUnreadyCount *int32 `json:"okTotalUnreadyCount,omitempty"`

	// maxTotalUnreadyPercentage is the share of unready nodes tolerated.
	// +optional
	// +kubebuilder:default=45
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	MaxTotalUnreadyPercentage *int32 `json:"maxTotalUnreadyPercentage,omitempty"`
}

// Condition types and reasons of a ClusterAutoscaler.
const (
	// ReadyCondition is True while the autoscaler runs a loop for the cluster.
	ReadyCondition = "Ready"
	// ScalingActiveCondition is True while the autoscaler may scale the cluster.
	ScalingActiveCondition = "ScalingActive"
	// ClusterHealthyCondition is False while too many nodes are unready.
	ClusterHealthyCondition = "ClusterHealthy"
	// ConfigurationAppliedCondition is True while the autoscaler runs with
	// the current spec, and False while the spec cannot be applied; the
	// autoscaler then goes on with the last spec it applied, whose
	// generation is status.observedGeneration.
	ConfigurationAppliedCondition = "ConfigurationApplied"
	// AtomicScaleUpsRolledBackCondition is False while instances that the
	// rollback of a failed atomic scale-up of a ProvisioningRequest could
	// not remove within 10 minutes are still there: the message names the
	// request, the instances and why (e.g. their group refused the removal
	// all along); the request failed, and they are left to scale-down,
	// which goes on meanwhile. It turns True once they are gone. It appears
	// with the first rollback that gives up; an engine restarted since
	// then no longer knows what that rollback left.
	AtomicScaleUpsRolledBackCondition = "AtomicScaleUpsRolledBack"
	// ScheduledMinimumsValidCondition is False while windows of
	// spec.scheduledMinimums are ignored, because the manager cannot read
	// their schedule (a cron expression that names no time, a time zone it
	// does not know) or their label selector; the message names them and
	// says why. It appears once the spec has scheduled minimums.
	ScheduledMinimumsValidCondition = "ScheduledMinimumsValid"

	// RunningReason: the loop ran successfully.
	RunningReason = "Running"
	// RollbackIncompleteReason: see AtomicScaleUpsRolledBackCondition.
	RollbackIncompleteReason = "RollbackIncomplete"
	// RolledBackReason: what the rollbacks of failed atomic scale-ups left
	// is gone.
	RolledBackReason = "RolledBack"
	// AppliedReason: the autoscaler runs with the current spec.
	AppliedReason = "Applied"
	// ClusterNotFoundReason: the Cluster named by spec.clusterName does not exist.
	ClusterNotFoundReason = "ClusterNotFound"
	// ClusterPausedReason: the Cluster is paused; nothing is scaled.
	ClusterPausedReason = "ClusterPaused"
	// WorkloadClusterUnreachableReason: the workload cluster API cannot be reached.
	WorkloadClusterUnreachableReason = "WorkloadClusterUnreachable"
	// LoopFailedReason: the last loop ended with an error.
	LoopFailedReason = "LoopFailed"
	// EnginePanickedReason: the autoscaling loop of the cluster panicked and
	// its engine stopped, having given back its drains; a new engine starts
	// after a delay that doubles with each panic in a row. The condition
	// message says what the loop panicked with and when the new engine
	// starts. Other clusters are not affected.
	EnginePanickedReason = "EnginePanicked"
	// InformerPanickedReason, of a Warning event: an event handler of the
	// workload cluster's informers panicked. The panic was recovered; the
	// engine goes on. Other clusters are not affected.
	InformerPanickedReason = "InformerPanicked"
	// LoopStalledReason: the autoscaling loop of the cluster has not
	// finished by the time it was due (a scan interval, the trigger batch
	// window and the loop timeout after the last one); it is stuck where no
	// timeout reaches it. The condition clears when a loop finishes. Other
	// clusters are not affected.
	LoopStalledReason = "LoopStalled"
	// InvalidConfigurationReason: the spec cannot be applied; the running
	// engine, if any, keeps the last configuration it applied.
	InvalidConfigurationReason = "InvalidConfiguration"
	// ClusterUnhealthyReason: too many nodes are unready to scale safely.
	ClusterUnhealthyReason = "ClusterUnhealthy"
	// HealthyReason: the share of unready nodes is within bounds.
	HealthyReason = "Healthy"
	// NoNodeGroupsReason: no MachineDeployment, MachineSet or MachinePool of the cluster is annotated.
	NoNodeGroupsReason = "NoNodeGroups"
	// ClusterAlreadyAutoscaledReason: another ClusterAutoscaler owns the
	// Cluster, and this one runs no engine; the condition message names the
	// owner. Of the ClusterAutoscalers that name a Cluster, the oldest by
	// creation time owns it, ties broken by name; the next takes over when
	// the owner is deleted.
	ClusterAlreadyAutoscaledReason = "ClusterAlreadyAutoscaled"
	// ClusterLeaseHeldElsewhereReason, of an event: another manager
	// (another install, or one with other watch filters or namespaces)
	// holds the Cluster's Lease (coordination.k8s.io,
	// capi-autoscaler-<cluster> in the Cluster's namespace), and only the
	// holder's engine acts on the Cluster, and writes the status; the
	// message names the holder. This one takes over once the holder stops
	// renewing it.
	ClusterLeaseHeldElsewhereReason = "ClusterLeaseHeldElsewhere"
	// WorkloadKubeconfigNotFoundReason: the Secret that
	// spec.workloadKubeconfigSecretRef names, or its key, does not exist;
	// nothing is autoscaled until it does, and the Cluster's kubeconfig is
	// not used instead.
	WorkloadKubeconfigNotFoundReason = "WorkloadKubeconfigNotFound"
	// InvalidWorkloadKubeconfigReason: the Secret that
	// spec.workloadKubeconfigSecretRef names holds no kubeconfig the
	// autoscaler can use (it does not parse, or it runs a credential
	// plugin, which Cluster API's ClusterCache refuses); nothing is
	// autoscaled until it does, and the Cluster's kubeconfig is not used
	// instead. The condition message says what is wrong.
	InvalidWorkloadKubeconfigReason = "InvalidWorkloadKubeconfig"
	// WorkloadKubeconfigForbiddenReason: the manager may not read the
	// kubeconfig Secret in the ClusterAutoscaler's namespace, where the
	// install did not grant it its namespace role (manager-namespace-role);
	// nothing is autoscaled there until it does.
	WorkloadKubeconfigForbiddenReason = "WorkloadKubeconfigForbidden"
	// OtherAutoscalerActiveReason: another cluster autoscaler, such as the
	// upstream one, acts on the workload cluster (its deletion taint on a
	// node, its Lease or status ConfigMap recently written); nothing is
	// scaled until it is gone. The condition message names the evidence.
	OtherAutoscalerActiveReason = "OtherAutoscalerActive"
	// CapacityBuffersUnreadableReason, of a Warning event: the
	// CapacityBuffers of the workload cluster could not be read (the role
	// there lacks config/workload-rbac's rules for them); autoscaling goes
	// on without them and tries again every 5 minutes.
	CapacityBuffersUnreadableReason = "CapacityBuffersUnreadable"
	// DryRunReason: the ClusterAutoscaler is in DryRun mode; it plans every
	// loop and publishes what it would do, and scales nothing.
	DryRunReason = "DryRun"
	// WouldScaleUpReason, of a Normal event: a DryRun ClusterAutoscaler
	// would have added nodes; the message names the groups, how many nodes
	// each, and how many pending pods they were for.
	WouldScaleUpReason = "WouldScaleUp"
	// WouldScaleDownReason, of a Normal event: a DryRun ClusterAutoscaler
	// would have started removing the nodes the message names.
	WouldScaleDownReason = "WouldScaleDown"
	// WouldAnswerProvisioningRequestReason, of a Normal event: a DryRun
	// ClusterAutoscaler would have set the condition the message names on
	// a ProvisioningRequest.
	WouldAnswerProvisioningRequestReason = "WouldAnswerProvisioningRequest"
	// WouldReseatReason, of a Normal event: a DryRun ClusterAutoscaler
	// would have evicted the pods the message names from a node bought for
	// another pod, to move them to the nodes planned for them.
	WouldReseatReason = "WouldReseat"
	// ProvisioningRequestsUnreadableReason, of a Warning event: the
	// ProvisioningRequests of the workload cluster could not be read;
	// autoscaling goes on without answering them and tries again every 5
	// minutes.
	ProvisioningRequestsUnreadableReason = "ProvisioningRequestsUnreadable"
	// InvalidScheduledMinimumReason: see ScheduledMinimumsValidCondition.
	InvalidScheduledMinimumReason = "InvalidScheduledMinimum"
	// ScheduledMinimumsReadReason: every window of spec.scheduledMinimums
	// is read.
	ScheduledMinimumsReadReason = "ScheduledMinimumsRead"
	// ScheduledMinimumWindowOpenedReason and
	// ScheduledMinimumWindowClosedReason, of Normal events on a node
	// group's MachineDeployment or MachineSet: a window of
	// spec.scheduledMinimums starts, or stops, setting the group's minimum
	// size (a raising window starts its lead time early, a lowering one
	// stops its lead time early).
	ScheduledMinimumWindowOpenedReason = "ScheduledMinimumWindowOpened"
	ScheduledMinimumWindowClosedReason = "ScheduledMinimumWindowClosed"
	// ConflictingScheduledMinimumsReason: windows of spec.scheduledMinimums
	// that set different minimums are in effect for a node group at once;
	// the highest applies. A problem of the group's status row, and a
	// Warning event on its object.
	ConflictingScheduledMinimumsReason = "ConflictingScheduledMinimums"
)

// ClusterAutoscalerStatus is what the autoscaler observed and did.
type ClusterAutoscalerStatus struct {
	// conditions: Ready, ScalingActive, ClusterHealthy and ConfigurationApplied,
	// and AtomicScaleUpsRolledBack once a rollback of an atomic scale-up
	// gave up.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=32
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec the status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nodeGroupCount is the number of autoscaled node groups.
	// +optional
	NodeGroupCount int32 `json:"nodeGroupCount,omitempty"`

	// nodeGroups has one row per MachineDeployment, MachineSet or
	// MachinePool with autoscaler annotations, including those that are
	// misconfigured.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=1000
	NodeGroups []NodeGroupStatus `json:"nodeGroups,omitempty"`

	// nodes is the number of nodes in the workload cluster.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`

	// readyNodes is the number of Ready nodes in the workload cluster.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`

	// unschedulablePods is the number of pods the scheduler could not place.
	// +optional
	UnschedulablePods int32 `json:"unschedulablePods,omitempty"`

	// podsLeftForNextLoop is the number of pending pods the last loop left
	// for the next one because there were more than
	// spec.maxPendingPodsPerLoop.
	// +optional
	PodsLeftForNextLoop int32 `json:"podsLeftForNextLoop,omitempty"`

	// notTriggerScaleUpReasons are the most common reasons pending pods did
	// not trigger a scale-up, most frequent first.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=10
	NotTriggerScaleUpReasons []PodReasonCount `json:"notTriggerScaleUpReasons,omitempty"`

	// capacityBuffers are the CapacityBuffers of the workload cluster whose
	// room the autoscaler keeps, and where that room is, by namespace and
	// name (at most 50).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	CapacityBuffers []CapacityBufferRoom `json:"capacityBuffers,omitempty"`

	// dryRunDecisions are the last decisions of a DryRun ClusterAutoscaler,
	// oldest first (at most 50, of which at most 25 answers to
	// ProvisioningRequests): what it would have scaled up or down or
	// answered, and when. A decision is recorded when it differs from the last of its
	// kind; the list is emptied when the mode becomes Active.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=50
	DryRunDecisions []DryRunDecision `json:"dryRunDecisions,omitempty"`

	// atomicScaleUps are the atomic scale-ups of best-effort-atomic-scale-up
	// ProvisioningRequests in progress, as the engine records them here, in
	// the management cluster: what each added, for the engine of a
	// restarted manager or a new leader to follow and roll back. A rollback
	// trusts no other record: what a request's status in the workload
	// cluster says, which its tenants may write, names nothing to remove.
	// +optional
	// +listType=map
	// +listMapKey=requestUID
	// +kubebuilder:validation:MaxItems=100
	AtomicScaleUps []AtomicScaleUpRecord `json:"atomicScaleUps,omitempty"`

	// lastScaleUpTime is when nodes were last added.
	// +optional
	LastScaleUpTime *metav1.Time `json:"lastScaleUpTime,omitempty"`

	// lastScaleDownTime is when nodes were last removed.
	// +optional
	LastScaleDownTime *metav1.Time `json:"lastScaleDownTime,omitempty"`

	// lastLoopTime is when a loop that wrote this status started. Loops
	// that change nothing else in the status are not written, so that a
	// steady cluster costs no writes: lastLoopTime moves with every other
	// change of the status, with the first loop of a new engine (after a
	// restart or a change of leader), and at least once a minute while
	// loops run. A lastLoopTime more than a minute and a scan interval
	// behind means that loops stopped.
	// +optional
	LastLoopTime *metav1.Time `json:"lastLoopTime,omitempty"`
}

// NodeGroupStatus is the state of one node group.
type NodeGroupStatus struct {
	// id is Kind/namespace/name of the MachineDeployment, MachineSet or
	// MachinePool.
	// +required
	// +kubebuilder:validation:MaxLength=512
	ID string `json:"id"`

	// minSize is the group's lower bound: the min-size annotation, or 0 when
	// only the max-size annotation is set. Unset when the group is not
	// autoscaled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinSize *int32 `json:"minSize,omitempty"`

	// maxSize is the group's upper bound, from the max-size annotation.
	// Unset when the group is not autoscaled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxSize *int32 `json:"maxSize,omitempty"`

	// targetSize is the replica count the group is asked to have.
	// +optional
	TargetSize int32 `json:"targetSize,omitempty"`

	// registered is the number of the group's nodes that joined the cluster.
	// +optional
	Registered int32 `json:"registered,omitempty"`

	// ready is the number of the group's Ready nodes.
	// +optional
	Ready int32 `json:"ready,omitempty"`

	// upcoming is the number of nodes requested but not registered yet.
	// +optional
	Upcoming int32 `json:"upcoming,omitempty"`

	// backoffUntil is set while the group is left out of scale-ups.
	// +optional
	BackoffUntil *metav1.Time `json:"backoffUntil,omitempty"`

	// backoffReason says why the group is backing off.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	BackoffReason string `json:"backoffReason,omitempty"`

	// price is what the autoscaler believes a node of the group costs per
	// hour, as a decimal; unset while it knows neither a price annotation
	// of the group nor the node its new nodes are built from, as for a
	// group at zero nodes before pods are first pending.
	// +optional
	// +kubebuilder:validation:MaxLength=24
	Price string `json:"price,omitempty"`

	// priceSource says where price comes from.
	// +optional
	PriceSource PriceSource `json:"priceSource,omitempty"`

	// problem says why the group is not autoscaled, or what it cannot do,
	// e.g. a bad annotation.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Problem string `json:"problem,omitempty"`

	// scheduledMinimum is set for a group that spec.scheduledMinimums
	// select: minSize is then the effective minimum, which the windows in
	// effect set.
	// +optional
	ScheduledMinimum *NodeGroupScheduledMinimum `json:"scheduledMinimum,omitempty"`
}

// NodeGroupScheduledMinimum is where a node group stands in the windows of
// the scheduled minimums that select it.
type NodeGroupScheduledMinimum struct {
	// annotatedMinSize is the minimum of the group's min-size annotation,
	// which applies while no window is in effect.
	// +required
	// +kubebuilder:validation:Minimum=0
	AnnotatedMinSize int32 `json:"annotatedMinSize"`

	// active are the windows in effect now, which set the minimum: open,
	// or within their lead time before opening for a raise.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	Active []ScheduledWindow `json:"active,omitempty"`

	// next is the next window to take effect after those in effect.
	// +optional
	Next *ScheduledWindow `json:"next,omitempty"`
}

// ScheduledWindow is one window of a scheduled minimum.
type ScheduledWindow struct {
	// name is the scheduled minimum's name.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// minSize is the minimum the window sets, capped at the group's max
	// size.
	// +required
	// +kubebuilder:validation:Minimum=0
	MinSize int32 `json:"minSize"`

	// opens and closes are when the window opens and closes; the minimum
	// takes effect from opens less the lead time when it raises it, and
	// ends at closes less the lead time when it lowers it.
	// +required
	Opens metav1.Time `json:"opens"`
	// +required
	Closes metav1.Time `json:"closes"`
}

// CapacityBufferRoom is where the room of one CapacityBuffer is.
type CapacityBufferRoom struct {
	// name is the buffer's namespace/name in the workload cluster.
	// +required
	// +kubebuilder:validation:MaxLength=317
	Name string `json:"name"`

	// replicas are the pods the buffer keeps room for.
	// +required
	Replicas int32 `json:"replicas"`

	// held are those whose room is on nodes that exist.
	// +optional
	Held int32 `json:"held,omitempty"`

	// upcoming are those whose room is on nodes on their way.
	// +optional
	Upcoming int32 `json:"upcoming,omitempty"`

	// unplaceable are those no node group can make room for; message says
	// why.
	// +optional
	Unplaceable int32 `json:"unplaceable,omitempty"`

	// message says why some pods of the buffer have no room, the most
	// frequent reason first; otherwise, for a buffer on a schedule, where
	// its window stands.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// DecisionKind is what a DryRun decision would have done.
// +kubebuilder:validation:Enum=ScaleUp;ScaleDown;Answer;Reseat
type DecisionKind string

const (
	// ScaleUpDecision would have added nodes to node groups.
	ScaleUpDecision DecisionKind = "ScaleUp"
	// ScaleDownDecision would have started removing nodes.
	ScaleDownDecision DecisionKind = "ScaleDown"
	// AnswerDecision would have set a condition on a ProvisioningRequest.
	AnswerDecision DecisionKind = "Answer"
	// ReseatDecision would have evicted pods from a node bought for
	// another pod, whose room they took before the nodes planned for them
	// started, to move them to those nodes.
	ReseatDecision DecisionKind = "Reseat"
)

// DryRunDecision is one decision a DryRun ClusterAutoscaler did not carry out.
type DryRunDecision struct {
	// time is when the loop that made the decision started.
	// +required
	Time metav1.Time `json:"time"`

	// kind is ScaleUp, ScaleDown, Answer or Reseat.
	// +required
	Kind DecisionKind `json:"kind"`

	// provisioningRequest is namespace/name, in the workload cluster, of
	// the ProvisioningRequest the decision was made for: the request whose
	// atomic scale-up a ScaleUp was, or the request an Answer was for.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=317
	ProvisioningRequest string `json:"provisioningRequest,omitempty"`

	// answer is, for an Answer, the condition it would have set on the
	// ProvisioningRequest: the one that tells the answer.
	// +optional
	Answer *ProvisioningRequestAnswer `json:"answer,omitempty"`

	// nodeGroups are the groups it would have changed, and by how many
	// nodes each (positive for a scale-up, negative for a scale-down).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	NodeGroups []NodeGroupDelta `json:"nodeGroups,omitempty"`

	// nodes are the nodes a scale-down would have removed.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=100
	Nodes []string `json:"nodes,omitempty"`

	// pods are namespace/name of the pending pods a scale-up was for (at
	// most 20; podCount tells how many there were).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Pods []string `json:"pods,omitempty"`

	// scheduledMinimum names, for a ScaleUp that raises node groups to the
	// minimum that windows of spec.scheduledMinimums set, those windows.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	ScheduledMinimum string `json:"scheduledMinimum,omitempty"`

	// podCount is the number of pending pods a scale-up was for.
	// +optional
	PodCount int32 `json:"podCount,omitempty"`

	// oldestPodCreationTime is when the oldest of those pods was created:
	// the decision came time - oldestPodCreationTime after it.
	// +optional
	OldestPodCreationTime *metav1.Time `json:"oldestPodCreationTime,omitempty"`
}

// ProvisioningRequestAnswer is a condition a DryRun ClusterAutoscaler
// would have set on a ProvisioningRequest.
type ProvisioningRequestAnswer struct {
	// conditionType is the type of the condition: Provisioned, Failed or
	// BookingExpired.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	ConditionType string `json:"conditionType"`

	// status is the status of the condition.
	// +required
	// +kubebuilder:validation:Enum=True;False;Unknown
	Status metav1.ConditionStatus `json:"status"`

	// reason is the reason of the condition, as upstream sets it (e.g.
	// CapacityIsFound, CapacityIsNotFound, ScaleUpInProgress).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// message is the message of the condition.
	// +optional
	// +kubebuilder:validation:MaxLength=10240
	Message string `json:"message,omitempty"`
}

// AtomicScaleUpRecord is an atomic scale-up in progress for a
// ProvisioningRequest: the nodes it asked of each node group, and the
// instances that appeared for them.
type AtomicScaleUpRecord struct {
	// requestUID is the UID of the ProvisioningRequest in the workload
	// cluster.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	RequestUID string `json:"requestUID"`

	// started is when the scale-up started.
	// +required
	Started metav1.Time `json:"started"`

	// nodeGroups are the nodes added to each node group.
	// +required
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	NodeGroups []NodeGroupDelta `json:"nodeGroups"`

	// instances are, by node group, the instances that appeared for the
	// scale-up: their Machines' names, or their IDs when they have none.
	// +optional
	// +listType=map
	// +listMapKey=id
	// +kubebuilder:validation:MaxItems=100
	Instances []NodeGroupInstances `json:"instances,omitempty"`
}

// NodeGroupInstances are instances of one node group.
type NodeGroupInstances struct {
	// id is Kind/namespace/name of the node group.
	// +required
	ID string `json:"id"`

	// instances are the instances' Machine names, or IDs.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=512
	Instances []string `json:"instances"`
}

// NodeGroupDelta is a change of one node group's size.
type NodeGroupDelta struct {
	// id is Kind/namespace/name of the node group.
	// +required
	ID string `json:"id"`

	// delta is the number of nodes added (positive) or removed (negative).
	// +required
	Delta int32 `json:"delta"`
}

// PodReasonCount counts the pending pods that share a reason.
type PodReasonCount struct {
	// reason is why the pods did not trigger a scale-up.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason"`

	// pods is how many pods have this reason.
	// +required
	Pods int32 `json:"pods"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ca,categories=cluster-api
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Node Groups",type=integer,JSONPath=`.status.nodeGroupCount`
// +kubebuilder:printcolumn:name="Unschedulable Pods",type=integer,JSONPath=`.status.unschedulablePods`
// +kubebuilder:printcolumn:name="Last Scale-Up",type=date,JSONPath=`.status.lastScaleUpTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// ClusterAutoscaler turns on autoscaling for one Cluster API workload cluster.
type ClusterAutoscaler struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired autoscaling behaviour.
	// +required
	Spec ClusterAutoscalerSpec `json:"spec"`

	// status is what the autoscaler observed and did.
	// +optional
	Status ClusterAutoscalerStatus `json:"status,omitempty"`
}

// GetConditions returns the conditions, for the Cluster API condition helpers.
func (c *ClusterAutoscaler) GetConditions() []metav1.Condition {
	return c.Status.Conditions
}

// SetConditions sets the conditions, for the Cluster API condition helpers.
func (c *ClusterAutoscaler) SetConditions(conditions []metav1.Condition) {
	c.Status.Conditions = conditions
}

// +kubebuilder:object:root=true

// ClusterAutoscalerList is a list of ClusterAutoscalers.
type ClusterAutoscalerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterAutoscaler `json:"items"`
}
