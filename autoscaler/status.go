package autoscaler

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Status is what one loop observed and did, published after every loop.
type Status struct {
	// Time is when the loop ran.
	Time time.Time
	// Err is why the loop could not run, e.g. the cluster was unreachable.
	Err error

	// ClusterHealthy is false while too many nodes are unready to scale.
	ClusterHealthy bool
	// HealthMessage says how many nodes are unready.
	HealthMessage string
	// ScalingActive is false while the engine will not scale at all.
	ScalingActive bool
	// ScalingMessage says why scaling is not active.
	ScalingMessage string
	// OtherAutoscaler names another cluster autoscaler acting on the
	// cluster, which keeps this one from scaling unless it runs dry; ""
	// when there is none.
	OtherAutoscaler string
	// DryRun is set when the loop ran in DryRun mode: it changed nothing.
	DryRun bool
	// Decisions are the last decisions of the engine in DryRun mode
	// (at most 50), oldest first; none in Active mode.
	Decisions []Decision
	// AtomicScaleUps are the atomic scale-ups of ProvisioningRequests in
	// progress, by request UID, for the management cluster to keep: an
	// engine that starts later takes them (Options.AtomicScaleUps) to
	// follow them and roll them back, and trusts no other record.
	AtomicScaleUps map[types.UID]provisioning.ScaleUp
	// UnfinishedRollbacks say, one per request, what the rollbacks of
	// failed atomic scale-ups that gave up (after 10 minutes) left, while
	// it is still there: those instances are left to scale-down.
	UnfinishedRollbacks []string

	Nodes      int
	ReadyNodes int
	NodeGroups []NodeGroupStatus
	// Capacity is the sum of the capacities of the cluster's nodes, as the
	// cluster-wide limits count them (snapshot.NodeInfo.LimitCapacity: the
	// devices of a DRA driver under its name): the control plane's
	// included, the nodes on their way not.
	Capacity snapshot.Resources

	// UnneededNodes are the nodes that could be removed, now or once they
	// have been unneeded long enough.
	UnneededNodes int

	// UnschedulablePods is the number of pods the scheduler could not place.
	UnschedulablePods int
	// NotTriggerScaleUpReasons count why pending pods did not trigger a
	// scale-up, most frequent first.
	NotTriggerScaleUpReasons []ReasonCount

	// Buffers are the capacity buffers of the cluster and where their room
	// is; BuffersError is why they could not be read, or "".
	Buffers      []BufferStatus
	BuffersError string
	// Requests are the answers the loop gave the ProvisioningRequests, or
	// would have given in DryRun mode.
	Requests []provisioning.Answer
	// RequestsError is why the check-capacity ProvisioningRequests could
	// not be read, or "".
	RequestsError string

	LastScaleUp   time.Time
	LastScaleDown time.Time

	// Explanation is what the loop decided for pending pods and nodes.
	Explanation Explanation
}

// NodeGroupStatus is the state of one node group in a loop.
type NodeGroupStatus struct {
	ID string
	// Autoscaled is false for a group left out because of its Problem; its
	// other fields are then unknown.
	Autoscaled bool
	// MinSize is the effective bound: 0 when the group does not set one.
	MinSize    int
	MaxSize    int
	TargetSize int
	Registered int
	Ready      int
	Unready    int
	NotStarted int
	Deleting   int
	// Upcoming is target minus registered: nodes requested, not yet there.
	Upcoming int
	// LongUnregistered are instances that have had no registered node for
	// the provision time, since the engine first saw them without one.
	LongUnregistered int
	// BackoffUntil is non-zero while the group is left out of scale-ups;
	// BackoffReason says why, for users, and BackoffCode is the cause in
	// one word (e.g. ScaleUpTimedOut, IncreaseSizeFailed, or the reason a
	// Machine failed with), for metrics.
	BackoffUntil  time.Time
	BackoffReason string
	BackoffCode   string
	// Problem says why the group is not autoscaled, or what it cannot do
	// (e.g. a bad annotation).
	Problem string
}

// ReasonCount counts pods that share a reason.
type ReasonCount struct {
	Reason string
	Pods   int
}
