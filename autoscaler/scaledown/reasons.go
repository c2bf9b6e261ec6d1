package scaledown

// Reason says, in one CamelCase word, why a node is kept. The names are
// the upstream cluster-autoscaler's where one exists, because users see
// them in status and events.
type Reason string

// Reasons a node is kept.
const (
	// ReasonNotAutoscaled: the node belongs to no node group.
	ReasonNotAutoscaled Reason = "NotAutoscaled"
	// ReasonScaleDownDisabledAnnotation: the node opted out.
	ReasonScaleDownDisabledAnnotation Reason = "ScaleDownDisabledAnnotation"
	// ReasonNotStarted: the node has not become ready, or still carries a
	// startup taint, since it was created.
	ReasonNotStarted Reason = "NodeNotStarted"
	// ReasonAwaitingPendingPods: pending pods fit on the node and wait for
	// the scheduler to bind them there.
	ReasonAwaitingPendingPods Reason = "AwaitingPendingPods"
	// ReasonCurrentlyBeingDeleted: the node is already being removed.
	ReasonCurrentlyBeingDeleted Reason = "CurrentlyBeingDeleted"
	// ReasonNodeGroupScaleDownBlocked: the node group must not lose nodes
	// now, e.g. during a rollout.
	ReasonNodeGroupScaleDownBlocked Reason = "NodeGroupScaleDownBlocked"
	// ReasonNotUnderutilized: utilization is at or above the threshold.
	ReasonNotUnderutilized Reason = "NotUnderutilized"
	// ReasonNodeGroupMinSizeReached: removing it would take the group below
	// its minimum size.
	ReasonNodeGroupMinSizeReached Reason = "NodeGroupMinSizeReached"
	// ReasonMinimalResourceLimitExceeded: removing it would take the
	// cluster below its minimum cores or memory.
	ReasonMinimalResourceLimitExceeded Reason = "MinimalResourceLimitExceeded"
	// ReasonBlockedByPod: a pod on the node must not be evicted.
	ReasonBlockedByPod Reason = "BlockedByPod"
	// ReasonNoPlaceToMovePods: some pods fit on no other node.
	ReasonNoPlaceToMovePods Reason = "NoPlaceToMovePods"
	// ReasonNotUnneededLongEnough and ReasonNotUnreadyLongEnough: the node
	// is unneeded but its unneeded (or unready) time has not passed.
	ReasonNotUnneededLongEnough Reason = "NotUnneededLongEnough"
	ReasonNotUnreadyLongEnough  Reason = "NotUnreadyLongEnough"
	// ReasonScaleDownInCooldown: a recent scale-up, deletion or failure
	// pauses removals.
	ReasonScaleDownInCooldown Reason = "ScaleDownInCooldown"
	// ReasonParallelismLimitReached: the node could go but as many nodes as
	// allowed are already being removed.
	ReasonParallelismLimitReached Reason = "ParallelismLimitReached"
	// ReasonAwaitingReplacement: consolidation replaces the node, and its
	// replacement is not Ready yet.
	ReasonAwaitingReplacement Reason = "AwaitingReplacement"
	// ReasonReplacementUnderWay: the node is a new node of a replacement
	// under way, which the nodes it replaces are waiting for.
	ReasonReplacementUnderWay Reason = "ReplacementUnderWay"
	// ReasonConsolidationBudget: consolidation could consider the node,
	// but a disruption budget of its group allows no node now, e.g. inside
	// a window of nodes "0"; the message names the budget.
	ReasonConsolidationBudget Reason = "ConsolidationBudget"
)

// BlockingReason says why a pod must not be evicted, with the upstream
// drain rules' names.
type BlockingReason string

// Reasons a pod blocks the removal of its node.
const (
	// BlockingNotReplicated: the pod has no controller to recreate it.
	BlockingNotReplicated BlockingReason = "NotReplicated"
	// BlockingUnmovableKubeSystemPod: a kube-system pod without a PDB.
	BlockingUnmovableKubeSystemPod BlockingReason = "UnmovableKubeSystemPod"
	// BlockingLocalStorageRequested: the pod has local volumes that are not
	// declared safe to lose.
	BlockingLocalStorageRequested BlockingReason = "LocalStorageRequested"
	// BlockingNotSafeToEvictAnnotation: the pod says it must not be evicted.
	BlockingNotSafeToEvictAnnotation BlockingReason = "NotSafeToEvictAnnotation"
	// BlockingNotEnoughPdb: a PodDisruptionBudget allows no more disruptions.
	BlockingNotEnoughPdb BlockingReason = "NotEnoughPdb"
)

// Decision is why a node is kept, for status and logs.
type Decision struct {
	Reason Reason
	// Message says it in words, e.g. which pod blocks and why.
	Message string
}
