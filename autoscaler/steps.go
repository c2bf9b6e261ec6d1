package autoscaler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Event reasons, the upstream cluster-autoscaler's.
const (
	EventTriggeredScaleUp     = "TriggeredScaleUp"
	EventNotTriggerScaleUp    = "NotTriggerScaleUp"
	EventScaledUpGroup        = "ScaledUpGroup"
	EventFailedToScaleUpGroup = "FailedToScaleUpGroup"
	EventScaleUpTimedOut      = "ScaleUpTimedOut"
	EventDeleteUnregistered   = "DeleteUnregistered"
	// EventNodeNotDeleted says that a group did not remove a node it was
	// handed for deletion, which was given back.
	EventNodeNotDeleted = "NodeNotDeleted"
	// EventBufferWindowOpened and EventBufferWindowClosed say, on a
	// scheduled capacity buffer, that it holds its room from now (its
	// window opens, less the lead time), or holds none from now.
	EventBufferWindowOpened = "CapacityBufferWindowOpened"
	EventBufferWindowClosed = "CapacityBufferWindowClosed"
	// EventInvalidBufferSchedule says that a capacity buffer's schedule
	// is ignored.
	EventInvalidBufferSchedule = "InvalidCapacityBufferSchedule"
	// EventConsolidation, on the groups of the nodes consolidation
	// removes, names them and what removing them saves.
	EventConsolidation = "Consolidation"
	// EventConsolidationAbandoned, on the groups of a replacement, says
	// that it was given up, and why: the nodes it was to replace stay.
	EventConsolidationAbandoned = "ConsolidationAbandoned"
)

// steps are the parts of a loop, built for one configuration. What must
// outlive a configuration (lasting) belongs to the Engine and is shared.
type steps struct {
	opts     Options
	settings *Settings
	*lasting
	clock clock.PassiveClock
	// act carries out what the steps decide, or records it in DryRun mode.
	act actuation
}

// lasting are the parts of an engine that outlive a configuration: what it
// knows of the cluster (backoffs, scale-ups on their way), the scale-down
// timers and drains in progress, and what each part of the loop remembers
// across loops, with its owner. They take each new configuration's
// settings.
type lasting struct {
	state    *clusterstate.Registry
	planner  *scaledown.Planner
	actuator *scaledown.Actuator
	// history is the loop's own.
	history history
	// atomic is the request tracker's: the atomic scale-ups of
	// ProvisioningRequests and the increases their instances are
	// credited to.
	atomic atomicScaleUps
	// told is the event publisher's: what the loops told, in events and
	// in the log.
	told told
	// givenBack are the actuations': the nodes handed over that their
	// group did not remove, given back.
	givenBack givenBackNodes
	// nominationsRefused is the Active actuation's (nominate): set once
	// the cluster forbade writing a pod's nominated node, so that a
	// cluster whose role predates nominations is told once.
	nominationsRefused bool
	// renominations are the Active actuation's too (nominate): the
	// nominations of its last plan, which a goroutine of Run writes back
	// as soon as kube-scheduler clears them.
	renominations *renominations
	// displacements are the scale-up step's: the pending pods whose room
	// on the nodes bought for them was taken by pods planned for other
	// nodes (reseat.go).
	displacements displacements
	// decisions are the DryRun actuation's: what it decided; empty in
	// Active mode.
	decisions dryRunDecisions
	// priced are the status's: the nodes the rows' prices are taken from.
	priced pricedNodes
}

// history is what a loop leaves the next: when it last scaled up, what
// scale-down removed by its end, and where its plan placed pending pods.
type history struct {
	lastScaleUp time.Time
	// scaleDownProgress is the actuator's progress at the end of the last
	// loop, to count what each loop removed.
	scaleDownProgress scaledown.Progress
	// nominations are where the last scale-up plan placed pending pods, so
	// that the next keeps them there instead of planning for them again.
	nominations []scaleup.Nomination
	// lastPlanned are when the last plans that left pods for later planned
	// for the pods still pending, so that those left go first.
	lastPlanned map[types.UID]time.Time
}

// loop is what the steps of one loop share.
type loop struct {
	now    time.Time
	groups nodegroups.List
	// problems are what is wrong with groups in this loop: those of
	// discovery, and the templates that could not be read.
	problems []nodegroups.Problem
	nodes    []*corev1.Node
	snapshot *snapshot.Snapshot
	timedOut []clusterstate.TimedOutScaleUp
	healthy  bool
	// otherAutoscaler names another cluster autoscaler acting on the
	// cluster, which keeps this one from acting; "" when there is none.
	otherAutoscaler string
	// increased are the nodes added to each group in this loop.
	increased map[string]int
	// scaledUp is set once the loop's scale-up of pending pods added
	// nodes, or would have in DryRun mode.
	scaledUp bool
	// absorbed are the pending pods that fit on nodes that exist or are on
	// their way, and where, as the scale-up step placed them.
	absorbed []simulator.Placement
	// buffers are the capacity buffers whose virtual pods are among the
	// snapshot's pending pods: those listed, less the scheduled ones
	// outside their windows.
	buffers []buffers.Buffer
	// listedBuffers are the capacity buffers listed, and bufferWindows
	// where the scheduled ones stand in their schedule, by key.
	listedBuffers []buffers.Buffer
	bufferWindows map[string]buffers.Window
	// requests are the provisioning requests the engine serves.
	requests []provisioning.Request
	// ended are the answers to the requests the read found no longer
	// served (provisioning.Lister).
	ended []provisioning.Answer
	// answered is set once the loop answered the requests it serves, with
	// answers (answerRequests).
	answered bool
	answers  []provisioning.Answer
	// buffersRead is set when the capacity buffers were read.
	buffersRead bool
	// consumed counts the pods that consume each request (consumedRequests).
	consumed consumption
	// reserved are, by group ID, the nodes on their way that atomic
	// scale-ups in progress added: other pods do not count on them, and
	// those groups lose no node until the scale-ups end.
	reserved map[string]int
	// booked are where the booked provisioning requests have their room,
	// the requests found in this loop's too. Like absorbed, they are placed
	// only in the forks of the steps that plan, never in the snapshot the
	// actuator drains from.
	booked []simulator.Placement
	// givenUp are, by group ID, the sizes without an instance given up in
	// this loop, which the cluster state read before still counts.
	givenUp map[string]int
	// minimums are, by group ID, where the groups that scheduled minimums
	// select stand in them at the loop's time.
	minimums map[string]minimums.Minimum
	status   Status
}

// run runs the steps of one loop in order. A step that fails for one node
// group records it and goes on with the others.
func (s *steps) run(ctx context.Context, now time.Time) Status {
	// A loop says whether it was dry even when it fails: the reconciler
	// gives the Cluster's Lease back only once a dry loop has run.
	dryRun := s.act.mode() == modeDryRun
	l := &loop{now: now, status: Status{Time: now, DryRun: dryRun}, increased: map[string]int{}, givenUp: map[string]int{}}
	var err error
	s.timed(ctx, "refresh", func() { err = s.refresh(ctx, l) })
	if err != nil {
		l.status.Err = err
		return l.status
	}
	s.handleFailures(ctx, l)
	s.checkHealth(l)
	s.checkOtherAutoscalers(ctx, l)
	s.continueScaleDown(ctx, l)
	// A dry run plans beside another autoscaler: that is what it is for.
	if l.healthy && (l.otherAutoscaler == "" || dryRun) {
		s.bookRequests(ctx, l)
		s.timed(ctx, "scaleUp", func() {
			s.scaleUpPending(ctx, l)
			s.raiseToMinimums(ctx, l)
		})
		s.answerRequests(ctx, l)
		// The groups of atomic scale-ups, rolled back or not, are kept out
		// of scale-down (withScaleDownBlocks), and the nodes a rollback
		// removes are the actuator's, which planning skips: the others
		// scale down as usual.
		if s.settings.config.ScaleDown.Enabled {
			s.timed(ctx, "scaleDown", func() { s.scaleDownUnneeded(ctx, l) })
		}
	}
	// What the reads of buffers and requests found, and the answers the
	// plan gave, once the plan is made.
	if l.buffersRead {
		s.act.writeBufferStatus(ctx, l)
	}
	s.giveAnswers(ctx, l)
	s.tellMinimumWindows(l)
	s.reportProblems(ctx, l.problems, l.now)
	s.fillStatus(l)
	return l.status
}

// timed runs a step and records its duration under the upstream function name.
func (s *steps) timed(ctx context.Context, function string, step func()) {
	start := s.clock.Now()
	step()
	end := s.clock.Now()
	s.metrics().observeFunction(s.opts.ClusterName, function, start, end)
	klog.FromContext(ctx).V(5).Info("Finished step", "step", function, "duration", end.Sub(start))
}

// reportProblems records an event on each group that cannot be autoscaled,
// or not fully (e.g. a bad annotation), when its problem appears or changes.
func (s *steps) reportProblems(ctx context.Context, problems []nodegroups.Problem, now time.Time) {
	for _, problem := range problems {
		// A group may have problems of several reasons at once.
		if !s.told.problems.tell(problem.ID+" "+problem.Reason, problem.Message, now) {
			continue
		}
		klog.FromContext(ctx).Info("Node group misconfigured", "nodeGroup", problem.ID, "reason", problem.Reason, "message", problem.Message, "autoscaled", problem.Kept)
		s.act.groupEvent(problem.ID, corev1.EventTypeWarning, problem.Reason, problem.Message)
		if problem.Reason == nodegroups.ReasonReplicasOverwritten {
			s.metrics().recordReplicasOverwritten(s.opts.ClusterName, problem.ID)
		}
	}
	s.told.problems.endRound()
}

// handleFailures acts on what went wrong since the last loop: scale-ups
// that timed out, instances that failed, and instances that never
// registered. Groups that failed back off before scale-up runs, so that
// this loop's scale-up already picks another group.
func (s *steps) handleFailures(ctx context.Context, l *loop) {
	logger := klog.FromContext(ctx)
	for _, timedOut := range l.timedOut {
		group := timedOut.Group
		message := fmt.Sprintf("Nodes added to group %s failed to register within %s: %d node(s) missing",
			group.ID(), s.provisionTime(group), timedOut.Missing)
		logger.Info("Scale-up timed out", "nodeGroup", group.ID(), "missing", timedOut.Missing)
		s.act.groupEvent(group.ID(), corev1.EventTypeWarning, EventScaleUpTimedOut, message)
		s.metrics().recordFailedScaleUp(s.opts.ClusterName, "timeout")
		state := s.state.Group(group.ID())
		if notCreated := min(state.NotCreated, timedOut.Missing); notCreated > 0 {
			s.act.giveUpSizes(ctx, l, group, notCreated)
		}
	}

	for _, state := range s.state.Groups() {
		group := state.Group
		if len(state.NewlyFailed) > 0 {
			first := state.NewlyFailed[0].Error
			message := fmt.Sprintf("%d instance(s) of %s failed: %s", len(state.NewlyFailed), group.ID(), first.Message)
			until := s.state.Backoff(group.ID(), first.Reason, message, l.now)
			logger.Info("Node group failed to scale up, backing off", "nodeGroup", group.ID(), "reason", first.Reason,
				"until", until, "failedInstances", len(state.NewlyFailed))
			s.act.groupEvent(group.ID(), corev1.EventTypeWarning, EventFailedToScaleUpGroup, message)
			s.metrics().recordFailedScaleUp(s.opts.ClusterName, first.Reason)
		}
		// Failed instances stay until their deletion starts; asking again
		// is harmless and retries a deletion that was refused. Neither
		// they nor long-unregistered ones are removed below the group's
		// min size, which every attempt would be refused.
		room := max(group.TargetSize()-group.MinSize(), 0)
		failed, keptFailed := cutAt(state.Failed, room)
		unregistered, keptUnregistered := cutAt(state.LongUnregistered, room-len(failed))
		if len(failed) > 0 {
			s.act.deleteInstances(ctx, group, failed, "deleting failed instances")
		}
		if len(unregistered) > 0 {
			message := fmt.Sprintf("Removing %d instance(s) of %s that have had no registered node for %s",
				len(unregistered), group.ID(), s.provisionTime(group))
			s.act.groupEvent(group.ID(), corev1.EventTypeWarning, EventDeleteUnregistered, message)
			s.act.deleteInstances(ctx, group, unregistered, "deleting long-unregistered instances")
		}
		if kept := keptFailed + keptUnregistered; kept > 0 {
			l.problems = append(l.problems, nodegroups.Problem{ID: group.ID(), Reason: ReasonBrokenInstancesAtMinSize, Kept: true,
				Message: fmt.Sprintf("%d failed or long-unregistered instance(s) kept: removing them would take the group below its min size %d; "+
					"a MachineHealthCheck or the infrastructure provider must replace them", kept, group.MinSize())})
		}
	}
}

// ReasonBrokenInstancesAtMinSize is the problem of a group whose failed or
// long-unregistered instances are kept because it is at its min size.
const ReasonBrokenInstancesAtMinSize = "BrokenInstancesAtMinSize"

// cutAt splits off the first n instances, and counts the others.
func cutAt(instances []nodegroups.Instance, n int) ([]nodegroups.Instance, int) {
	n = min(max(n, 0), len(instances))
	return instances[:n], len(instances) - n
}

func (s *steps) provisionTime(group nodegroups.NodeGroup) time.Duration {
	return s.settings.config.groupSettings().For(group).MaxNodeProvisionTime
}

// checkHealth stops all scaling while too many nodes are unready: new
// nodes would likely fail the same way, and removing nodes could take away
// the capacity the unready ones will need.
func (s *steps) checkHealth(l *loop) {
	healthy, message := s.state.ClusterHealthy()
	l.healthy = healthy
	l.status.ClusterHealthy = healthy
	l.status.HealthMessage = message
	l.status.ScalingActive = healthy
	if !healthy {
		l.status.ScalingMessage = "Cluster is unhealthy: " + message
	}
}

// metrics are where the loop records its metrics (actuation.metrics).
func (s *steps) metrics() *Metrics {
	return s.act.metrics()
}
