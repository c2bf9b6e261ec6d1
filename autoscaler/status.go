package autoscaler

import (
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
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
	// DryRun is set when the loop ran in DryRun mode: it changed nothing
	// but what an Active run of the engine before had placed.
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
	// PodsLeftForNextLoop counts the pending pods the scale-up left for
	// the next loop (Config.MaxPendingPodsPerLoop).
	PodsLeftForNextLoop int
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

	// ScheduledMinimumProblems say which scheduled minimums are ignored,
	// and why (e.g. a time zone the manager does not know).
	ScheduledMinimumProblems []string
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
	// Price is what a node of the group costs per hour, as the price
	// expander prices it; zero while the engine knows neither the group's
	// own price nor the node a new member would be.
	Price pricing.Quote
	// ScheduledMinimum is, for a group that scheduled minimums select,
	// where it stands in their windows: MinSize is its Minimum.MinSize.
	ScheduledMinimum *minimums.Minimum
}

// ReasonCount counts pods that share a reason.
type ReasonCount struct {
	Reason string
	Pods   int
}

// pricedNodes are, by group ID, the node a new member of each group would
// be, as the status prices it: a group at zero nodes has a template only in
// loops with pending pods, and its row keeps its price in the others.
type pricedNodes struct {
	byGroup map[string]*corev1.Node
}

// remember returns, by group ID, the node a new member of each group would
// be: the group's template, or, when this loop built none, the member it
// would be built from, else the node an earlier loop knew. It forgets the
// groups that are gone.
func (p *pricedNodes) remember(snap *snapshot.Snapshot, groups []nodegroups.NodeGroup) map[string]*corev1.Node {
	known := make(map[string]*corev1.Node, len(groups))
	for _, group := range groups {
		template := snap.Template(group.ID())
		if template == nil {
			template = simulator.TemplateMember(snap, group)
		}
		switch {
		case template != nil:
			known[group.ID()] = template.Node()
		case p.byGroup[group.ID()] != nil:
			known[group.ID()] = p.byGroup[group.ID()]
		}
	}
	p.byGroup = known
	return known
}

// fillStatus completes the loop's status from the cluster state.
func (s *steps) fillStatus(l *loop) {
	status := &l.status
	total := s.state.Total()
	status.Nodes = len(l.nodes)
	status.ReadyNodes = total.Ready
	for _, node := range l.snapshot.NodeInfos() {
		status.Capacity.Add(node.LimitCapacity())
	}
	status.LastScaleUp = s.history.lastScaleUp
	progress := s.actuator.Progress()
	status.LastScaleDown = progress.LastDeletion
	last := s.history.scaleDownProgress
	consolidated := progress.ConsolidatedNodes - last.ConsolidatedNodes
	s.metrics().recordScaleDown(s.opts.ClusterName, scaleDownUnderutilized, modeActive, progress.DeletedNodes-last.DeletedNodes-consolidated)
	s.metrics().recordScaleDown(s.opts.ClusterName, scaleDownConsolidation, modeActive, consolidated)
	s.metrics().recordEvictions(s.opts.ClusterName, progress.EvictedPods-s.history.scaleDownProgress.EvictedPods)
	s.history.scaleDownProgress = progress
	for _, pod := range l.snapshot.PendingPods() {
		if scaleup.IsUnschedulable(pod.Status.Conditions) && !buffers.IsBufferPod(pod) {
			status.UnschedulablePods++
		}
	}
	newNodes := s.priced.remember(l.snapshot, l.groups.Groups)
	problems := s.givenBack.shown(l.now)
	for _, problem := range l.problems {
		if problem.Kept {
			problems[problem.ID] = strings.Join(slices.DeleteFunc([]string{problem.Message, problems[problem.ID]}, func(m string) bool { return m == "" }), "; ")
		} else {
			status.NodeGroups = append(status.NodeGroups, NodeGroupStatus{ID: problem.ID, Problem: problem.Message})
		}
	}
	for _, state := range s.state.Groups() {
		group := state.Group
		backoff := s.state.BackoffOf(group.ID(), l.now)
		status.NodeGroups = append(status.NodeGroups, NodeGroupStatus{
			ID:               group.ID(),
			Autoscaled:       true,
			MinSize:          group.MinSize(),
			MaxSize:          group.MaxSize(),
			TargetSize:       state.Target + l.increased[group.ID()],
			Registered:       state.Registered,
			Ready:            state.Ready,
			Unready:          state.Unready,
			NotStarted:       state.NotStarted,
			Deleting:         state.Deleting,
			Upcoming:         state.Upcoming + l.increased[group.ID()],
			LongUnregistered: len(state.LongUnregistered),
			BackoffUntil:     backoff.Until,
			BackoffReason:    backoff.Message,
			BackoffCode:      backoff.Reason,
			Problem:          problems[group.ID()],
			Price:            s.settings.config.InstanceTypePrices.NodePrice(group.Options().Price, newNodes[group.ID()]),
			ScheduledMinimum: scheduledMinimum(l.minimums, group.ID()),
		})
	}
	status.Decisions = slices.Clone(s.decisions.list)
	status.AtomicScaleUps = s.atomic.records()
	status.UnfinishedRollbacks = s.atomic.unfinishedRollbackMessages(l.groups.Groups)
	if status.DryRun {
		status.ScalingActive = false
		status.ScalingMessage = "DryRun mode: the autoscaler plans every loop and publishes what it would do, but changes nothing in the cluster"
		status.OtherAutoscaler = l.otherAutoscaler
	} else if l.otherAutoscaler != "" {
		status.ScalingActive = false
		status.OtherAutoscaler = l.otherAutoscaler
		status.ScalingMessage = "Another cluster autoscaler acts on the cluster, so this one does not scale it until it is gone: " + l.otherAutoscaler
	}
	if status.ScalingActive && len(l.groups.Groups) == 0 {
		status.ScalingActive = false
		status.ScalingMessage = "No MachineDeployment, MachineSet or MachinePool of the cluster has the autoscaler max size annotation"
	}
}

// scheduledMinimum is where group id stands in its scheduled minimums, or
// nil when none selects it.
func scheduledMinimum(byGroup map[string]minimums.Minimum, id string) *minimums.Minimum {
	minimum, ok := byGroup[id]
	if !ok {
		return nil
	}
	return &minimum
}
