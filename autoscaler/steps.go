package autoscaler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
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
)

// steps are the parts of a loop, built for one configuration. What must
// outlive a configuration (the cluster state, the scale-down planner and
// actuator, the history) belongs to the Engine and is shared.
type steps struct {
	opts     Options
	settings *Settings
	*lasting
	clock clock.PassiveClock
	// act carries out what the steps decide, or records it in DryRun mode.
	act actuation
}

// lasting are the parts of an engine that outlive a configuration: what it
// knows of the cluster (backoffs, scale-ups on their way), what it did, and
// the scale-down timers and drains in progress. They take each new
// configuration's settings.
type lasting struct {
	state    *clusterstate.Registry
	history  history
	planner  *scaledown.Planner
	actuator *scaledown.Actuator
}

// history is what the engine remembers of its own actions across
// configurations.
type history struct {
	lastScaleUp time.Time
	// scaleDownProgress is the actuator's progress at the end of the last
	// loop, to count what each loop removed.
	scaleDownProgress scaledown.Progress
	// problems are the messages of the groups that could not be autoscaled
	// in the last loop, by group ID and reason, so that each problem is
	// reported in an event once, when it appears or changes.
	problems map[string]string
	// nominations are where the last scale-up plan placed pending pods, so
	// that the next keeps them there instead of planning for them again.
	nominations []scaleup.Nomination
	// nominationsRefused is set once the cluster forbade writing a pod's
	// nominated node, so that a cluster whose role predates nominations is
	// told once, not in every loop.
	nominationsRefused bool
	// notTriggered are the last NotTriggerScaleUp events of the pods that
	// triggered no scale-up in the last loop, by UID.
	notTriggered map[types.UID]notTriggeredEvent
	// buffersError is the last error of reading the capacity buffers,
	// logged when it appears or changes.
	buffersError string
	// requestsError is the last error of reading the provisioning
	// requests, logged when it appears or changes.
	requestsError string
	// scaleUps are the atomic scale-ups in progress, by request UID.
	scaleUps map[types.UID]*atomicScaleUp
	// increases are, by group ID, the increases of the target size the
	// engine wrote that the instances appearing are credited to, oldest
	// first (claimInstances).
	increases map[string][]*increase
	// unfinishedRollbacks are the rollbacks that gave up, by request UID,
	// while what they left is still there.
	unfinishedRollbacks map[types.UID]unfinishedRollback
	// givenBack are, by group ID, the last node each group was handed for
	// deletion and did not remove, shown on its status row for a while.
	givenBack map[string]givenBack
	// decisions are what the engine decided in DryRun mode; empty in
	// Active mode.
	decisions dryRunDecisions
}

// givenBack is a node deletion that a group did not carry out.
type givenBack struct {
	message string
	at      time.Time
}

// givenBackShownFor is how long a node a group did not remove stays on the
// group's status row.
const givenBackShownFor = time.Hour

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
	// snapshot's pending pods.
	buffers []buffers.Buffer
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
	consumed map[string]int
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
	status  Status
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
		s.timed(ctx, "scaleUp", func() { s.scaleUpPending(ctx, l) })
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
		s.act.writeBufferStatus(ctx)
	}
	s.giveAnswers(ctx, l)
	s.reportProblems(ctx, l.problems)
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

// refresh reads the node groups and the cluster and updates the cluster state.
func (s *steps) refresh(ctx context.Context, l *loop) error {
	groups, err := s.opts.NodeGroups.NodeGroups(ctx)
	if err != nil {
		return fmt.Errorf("listing node groups: %w", err)
	}
	l.groups = groups
	l.problems = slices.Clone(groups.Problems)
	s.claimInstances(l)

	input, err := s.readCluster(ctx)
	if err != nil {
		return err
	}
	s.readBuffers(ctx, &input, l)
	s.readRequests(ctx, &input, l)
	// After the pods of buffers and requests, whose claims count too.
	if s.readDRA(ctx, &input) {
		input.Nodes = awaitDevices(ctx, groups.Groups, input.Nodes, input.ResourceSlices, l.now)
	}
	l.nodes = input.Nodes
	l.timedOut = s.state.Update(groups.Groups, input.Nodes, l.now)
	input.NodeGroups = s.withScaleDownBlocks(l, groups.Groups)
	l.snapshot = snapshot.New(input)
	return nil
}

// reportProblems records an event on each group that cannot be autoscaled,
// or not fully (e.g. a bad annotation), when its problem appears or changes.
func (s *steps) reportProblems(ctx context.Context, problems []nodegroups.Problem) {
	current := make(map[string]string, len(problems))
	for _, problem := range problems {
		// A group may have problems of several reasons at once.
		key := problem.ID + " " + problem.Reason
		current[key] = problem.Message
		if s.history.problems[key] == problem.Message {
			continue
		}
		klog.FromContext(ctx).Info("Node group misconfigured", "nodeGroup", problem.ID, "reason", problem.Reason, "message", problem.Message, "autoscaled", problem.Kept)
		s.act.groupEvent(problem.ID, corev1.EventTypeWarning, problem.Reason, problem.Message)
		if problem.Reason == nodegroups.ReasonReplicasOverwritten {
			s.metrics().recordReplicasOverwritten(s.opts.ClusterName, problem.ID)
		}
	}
	s.history.problems = current
}

// withScaleDownBlocks keeps groups that are still growing, for pending pods
// or for an atomic scale-up, or unhealthy out of scale-down: their nodes
// are not settled enough to judge.
func (s *steps) withScaleDownBlocks(l *loop, groups []nodegroups.NodeGroup) []nodegroups.NodeGroup {
	out := make([]nodegroups.NodeGroup, 0, len(groups))
	for _, group := range groups {
		state := s.state.Group(group.ID())
		_, scalingUp := l.reserved[group.ID()]
		switch healthy, message := s.state.GroupHealthy(group.ID()); {
		case scalingUp:
			group = scaleDownBlocked{NodeGroup: group, reason: "waiting for the nodes of an atomic scale-up"}
		case !state.Converged():
			group = scaleDownBlocked{NodeGroup: group, reason: fmt.Sprintf("waiting for %d requested node(s)", max(state.Upcoming, state.NotCreated))}
		case !healthy:
			group = scaleDownBlocked{NodeGroup: group, reason: "node group unhealthy: " + message}
		}
		out = append(out, group)
	}
	return out
}

// scaleDownBlocked is a group whose nodes the engine keeps for a reason of
// its own, on top of the group's own reasons.
type scaleDownBlocked struct {
	nodegroups.NodeGroup
	reason string
}

func (g scaleDownBlocked) ScaleDownBlockedReason() string {
	if own := g.NodeGroup.ScaleDownBlockedReason(); own != "" {
		return own
	}
	return g.reason
}

// readCluster lists what the snapshot needs. Objects come from the cache
// without copies; nothing here modifies them.
func (s *steps) readCluster(ctx context.Context) (snapshot.Input, error) {
	var (
		in         snapshot.Input
		nodes      corev1.NodeList
		daemonSets appsv1.DaemonSetList
		pdbs       policyv1.PodDisruptionBudgetList
		namespaces corev1.NamespaceList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"nodes", &nodes}, {"DaemonSets", &daemonSets},
		{"PodDisruptionBudgets", &pdbs}, {"namespaces", &namespaces},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			return in, fmt.Errorf("listing %s of the cluster: %w", list.what, err)
		}
	}
	if err := s.listPods(ctx, &in); err != nil {
		return in, fmt.Errorf("listing pods of the cluster: %w", err)
	}
	s.readStorage(ctx, &in)
	s.readControllers(ctx, &in)
	in.Nodes = pointers(nodes.Items)
	in.DaemonSets = pointers(daemonSets.Items)
	in.PodDisruptionBudgets = pointers(pdbs.Items)
	in.Namespaces = pointers(namespaces.Items)
	return in, nil
}

// readStorage lists the storage objects the volume predicates read into
// in, within OptionalReadTimeout. A failure does not stop the loop: pods
// without claims are simulated as usual, and those with claims are
// reported as not evaluated.
func (s *steps) readStorage(ctx context.Context, in *snapshot.Input) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var (
		claims   corev1.PersistentVolumeClaimList
		volumes  corev1.PersistentVolumeList
		classes  storagev1.StorageClassList
		csiNodes storagev1.CSINodeList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"PersistentVolumeClaims", &claims}, {"PersistentVolumes", &volumes},
		{"StorageClasses", &classes}, {"CSINodes", &csiNodes},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			in.StorageError = fmt.Errorf("listing %s of the cluster: %w", list.what, err)
			klog.FromContext(ctx).Error(err, "Cannot read the storage objects of the cluster; pods with volume claims will not be simulated", "kind", list.what)
			return
		}
	}
	in.PersistentVolumeClaims = pointers(claims.Items)
	in.PersistentVolumes = pointers(volumes.Items)
	in.StorageClasses = pointers(classes.Items)
	in.CSINodes = pointers(csiNodes.Items)
}

// readDRA lists the Dynamic Resource Allocation objects the claim check
// reads into in, within OptionalReadTimeout, when a pod of in has resource
// claims: clusters that do not use DRA (or do not serve its API) are not
// asked. A failure does not stop the loop: pods without resource claims
// are simulated as usual, and those with claims are reported as not
// evaluated. It tells whether it read them.
func (s *steps) readDRA(ctx context.Context, in *snapshot.Input) bool {
	if !slices.ContainsFunc(in.Pods, func(pod *corev1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }) &&
		!slices.ContainsFunc(in.CachedPods, func(pod *snapshot.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var (
		resourceSlices resourcev1.ResourceSliceList
		classes        resourcev1.DeviceClassList
		claims         resourcev1.ResourceClaimList
		templates      resourcev1.ResourceClaimTemplateList
	)
	for _, list := range []struct {
		what string
		list client.ObjectList
	}{
		{"ResourceSlices", &resourceSlices}, {"DeviceClasses", &classes},
		{"ResourceClaims", &claims}, {"ResourceClaimTemplates", &templates},
	} {
		if err := s.opts.Cluster.List(ctx, list.list, client.UnsafeDisableDeepCopy); err != nil {
			in.DRAError = fmt.Errorf("listing %s of the cluster: %w", list.what, err)
			klog.FromContext(ctx).Error(err, "Cannot read the DRA objects of the cluster; pods with resource claims will not be simulated", "kind", list.what)
			return false
		}
	}
	in.ResourceSlices = pointers(resourceSlices.Items)
	in.DeviceClasses = pointers(classes.Items)
	in.ResourceClaims = pointers(claims.Items)
	in.ResourceClaimTemplates = pointers(templates.Items)
	return true
}

// readControllers lists into in the metadata of the controllers that
// scale-down counts on to recreate the pods it evicts
// (scaledown.ReplicatingControllers), within OptionalReadTimeout. A
// failure does not stop the loop: scale-down keeps the nodes of their pods.
func (s *steps) readControllers(ctx context.Context, in *snapshot.Input) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	defer cancel()
	var controllers []*metav1.PartialObjectMetadata
	for _, kind := range scaledown.ReplicatingControllers {
		list := &metav1.PartialObjectMetadataList{}
		list.SetGroupVersionKind(kind.GroupVersion().WithKind(kind.Kind + "List"))
		if err := s.opts.Cluster.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			in.ControllersError = fmt.Errorf("listing %ss of the cluster: %w", kind.Kind, err)
			klog.FromContext(ctx).Error(err, "Cannot read the controllers of the cluster; nodes running their pods will not be scaled down", "kind", kind.Kind)
			return
		}
		controllers = append(controllers, pointers(list.Items)...)
	}
	in.Controllers = controllers
}

// listPods lists the pods into in: from a PodLister as its cache keeps
// them, else through List.
func (s *steps) listPods(ctx context.Context, in *snapshot.Input) error {
	if lister, ok := s.opts.Cluster.(PodLister); ok {
		pods, err := lister.ListPods(ctx)
		in.CachedPods = pods
		return err
	}
	var pods corev1.PodList
	if err := s.opts.Cluster.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	in.Pods = pointers(pods.Items)
	return nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
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
		// is harmless and retries a deletion that was refused.
		if len(state.Failed) > 0 {
			s.act.deleteInstances(ctx, group, state.Failed, "deleting failed instances")
		}
		if len(state.LongUnregistered) > 0 {
			message := fmt.Sprintf("Removing %d instance(s) of %s that have had no registered node for %s",
				len(state.LongUnregistered), group.ID(), s.provisionTime(group))
			s.act.groupEvent(group.ID(), corev1.EventTypeWarning, EventDeleteUnregistered, message)
			s.act.deleteInstances(ctx, group, state.LongUnregistered, "deleting long-unregistered instances")
		}
	}
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

// scaleUpPending plans a scale-up for the unschedulable pods and has it
// carried out.
func (s *steps) scaleUpPending(ctx context.Context, l *loop) {
	upcoming := map[string]int{}
	for _, state := range s.state.Groups() {
		upcoming[state.Group.ID()] = max(state.Upcoming-l.reserved[state.Group.ID()], 0)
	}
	expected := map[string][]string{}
	for _, group := range l.groups.Groups {
		if names := nodegroups.ExpectedNodeNames(group); len(names) > 0 {
			expected[group.ID()] = names
		}
	}
	// Pending pods do not get the room of booked provisioning requests.
	booked := len(l.booked) > 0
	if booked {
		l.snapshot.Fork()
		placeWaitingPods(l.snapshot, l.booked)
	}
	plan := s.settings.scaleUp.Plan(ctx, l.snapshot, scaleup.State{
		Upcoming:          upcoming,
		Skip:              func(group nodegroups.NodeGroup) string { return s.skipScaleUpReason(group, l.now) },
		Nominations:       s.history.nominations,
		ExpectedNodeNames: expected,
	})
	if booked {
		l.snapshot.Revert()
	}
	s.history.nominations = plan.Nominations
	l.absorbed = plan.Absorbed
	l.status.Buffers = bufferStatuses(l.buffers, l.snapshot, plan)
	l.problems = append(l.problems, templateProblems(plan.TemplateErrors)...)
	increases := s.act.scaleUp(ctx, l, plan)
	l.scaledUp = len(increases) > 0
	l.status.NotTriggerScaleUpReasons = sortedReasons(countReasons(plan.NoScaleUp))
	l.status.Explanation.PendingPods = explainPendingPods(plan, increases)
	s.metrics().recordLimitedScaleUps(s.opts.ClusterName, s.settings.config.Limits, plan.NoScaleUp)
}

// notTriggerScaleUpRepeat is how often a pod that still triggers no
// scale-up, for the same reasons, is told again. Telling it in every loop
// cost a busy cluster an event write per pending pod per loop, for the
// same message.
const notTriggerScaleUpRepeat = 5 * time.Minute

// notTriggeredEvent is the last NotTriggerScaleUp event of a pod.
type notTriggeredEvent struct {
	message string
	at      time.Time
}

// templateProblems are the problems of the groups whose template could not
// be read (a *nodegroups.ReadError), in the order of their IDs. The other
// template errors are answers, such as a template without capacity, which
// the pods' NotTriggerScaleUp events explain.
func templateProblems(templateErrors map[string]error) []nodegroups.Problem {
	var problems []nodegroups.Problem
	for _, id := range slices.Sorted(maps.Keys(templateErrors)) {
		var readErr *nodegroups.ReadError
		if errors.As(templateErrors[id], &readErr) {
			problems = append(problems, nodegroups.Problem{ID: id, Reason: nodegroups.ReasonTemplateUnreadable, Kept: true,
				Message: "cannot scale up from zero: " + readErr.Error()})
		}
	}
	return problems
}

// skipScaleUpReason says why a group must not grow in this loop, or "".
func (s *steps) skipScaleUpReason(group nodegroups.NodeGroup, now time.Time) string {
	if backoff := s.state.BackoffOf(group.ID(), now); !backoff.Until.IsZero() {
		return fmt.Sprintf("in backoff after failed scale-up (%s)", backoff.Reason)
	}
	if healthy, message := s.state.GroupHealthy(group.ID()); !healthy {
		return "node group unhealthy: " + message
	}
	return ""
}

// scaleUpMessage is the TriggeredScaleUp event message of a scale-up.
func (s *steps) scaleUpMessage(increases []scaleup.Increase) string {
	groups := make([]GroupResize, 0, len(increases))
	for _, increase := range increases {
		target := s.state.Group(increase.Group.ID()).Target
		groups = append(groups, GroupResize{ID: increase.Group.ID(), From: target, To: target + increase.Delta, Max: increase.Group.MaxSize()})
	}
	return TriggeredScaleUpMessage(groups)
}

// TriggeredScaleUpPrefix starts the message of a TriggeredScaleUp event.
const TriggeredScaleUpPrefix = "pod triggered scale-up:"

// GroupResize is a node group in a TriggeredScaleUp message: its size
// before and after the scale-up, and its max size.
type GroupResize struct {
	ID            string
	From, To, Max int
}

// TriggeredScaleUpMessage is the message of the TriggeredScaleUp events of
// the pods a scale-up helps, in the upstream autoscaler's words, which
// tools that watch for its events, and `kubectl capi-autoscaler compare`,
// read.
func TriggeredScaleUpMessage(groups []GroupResize) string {
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("{%s %d->%d (max: %d)}", g.ID, g.From, g.To, g.Max))
	}
	return TriggeredScaleUpPrefix + " [" + strings.Join(parts, " ") + "]"
}

// countReasons counts the real pods that triggered no scale-up by reason.
func countReasons(noScaleUp []scaleup.NoScaleUp) map[string]int {
	reasons := map[string]int{}
	for _, pod := range realNoScaleUp(noScaleUp) {
		reasons[pod.Message()]++
	}
	return reasons
}

// plannedIncreases are the nodes a plan adds to each group, by group ID.
func plannedIncreases(plan *scaleup.Plan) map[string]int {
	increases := make(map[string]int, len(plan.Increases))
	for _, increase := range plan.Increases {
		increases[increase.Group.ID()] += increase.Delta
	}
	return increases
}

func sortedReasons(counts map[string]int) []ReasonCount {
	reasons := make([]ReasonCount, 0, len(counts))
	for reason, pods := range counts {
		reasons = append(reasons, ReasonCount{Reason: reason, Pods: pods})
	}
	slices.SortFunc(reasons, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Pods, a.Pods), cmp.Compare(a.Reason, b.Reason))
	})
	return reasons
}

// continueScaleDown drives the removals in progress, each re-checked
// against the group read afresh, and releases what no removal owns, e.g.
// left by a restart. It runs even while the cluster is unhealthy, so that
// no node stays tainted for nothing. While scale-down is off, another
// autoscaler acts on the cluster, or the engine runs dry, drains in
// progress are given back; a dry run still follows the nodes handed over.
func (s *steps) continueScaleDown(ctx context.Context, l *loop) {
	view := scaledown.View{Nodes: l.nodes, Pods: l.snapshot, Groups: l.groups.Groups, Minimums: s.settings.scaleDown.Minimums}
	s.reportGivenBack(l, s.act.continueScaleDown(ctx, l, view))
}

// reportGivenBack reports the nodes handed over that their group did not
// remove and that were given back on their group's status row; the
// actuation that gave them back said so on the group (tellGivenBack).
func (s *steps) reportGivenBack(l *loop, released []scaledown.Released) {
	for _, r := range released {
		s.metrics().recordError(s.opts.ClusterName, "nodeNotDeleted")
		if s.history.givenBack == nil {
			s.history.givenBack = map[string]givenBack{}
		}
		s.history.givenBack[r.GroupID] = givenBack{message: r.Message, at: l.now}
	}
}

// scaleDownUnneeded finds the nodes whose pods fit elsewhere and starts
// removing those that have been unneeded long enough.
func (s *steps) scaleDownUnneeded(ctx context.Context, l *loop) {
	plan := s.planScaleDown(ctx, l)
	l.status.UnneededNodes = len(plan.Unneeded)
	l.status.Explanation.Nodes = explainNodes(plan, l.snapshot)
	s.metrics().setUnneededNodes(s.opts.ClusterName, len(plan.Unneeded))
	s.act.scaleDown(ctx, l, plan)
}

// planScaleDown plans in a fork of the snapshot, with the pending pods on
// the nodes they wait for.
func (s *steps) planScaleDown(ctx context.Context, l *loop) *scaledown.Plan {
	l.snapshot.Fork()
	defer l.snapshot.Revert()
	placeWaitingPods(l.snapshot, slices.Concat(l.absorbed, l.booked))
	return s.planner.Plan(ctx, l.snapshot, s.settings.scaleDown, s.actuator.Progress())
}

// placeWaitingPods puts the pending pods that the scale-up step placed on
// existing nodes on those nodes, in the snapshot: scale-down then keeps
// the nodes they wait for, and moves no other pod into the room they will
// take. A pod that fits nowhere holds no node.
func placeWaitingPods(snap *snapshot.Snapshot, absorbed []simulator.Placement) {
	for _, placement := range absorbed {
		// Nodes on their way exist only in the scale-up's simulation.
		if snap.NodeInfo(placement.NodeName) != nil {
			_ = snap.AddPod(snapshot.NewPodInfo(placement.Pod), placement.NodeName)
		}
	}
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
	s.metrics().recordScaleDown(s.opts.ClusterName, scaleDownUnderutilized, modeActive, progress.DeletedNodes-s.history.scaleDownProgress.DeletedNodes)
	s.metrics().recordEvictions(s.opts.ClusterName, progress.EvictedPods-s.history.scaleDownProgress.EvictedPods)
	s.history.scaleDownProgress = progress
	for _, pod := range l.snapshot.PendingPods() {
		if scaleup.IsUnschedulable(pod.Status.Conditions) && !buffers.IsBufferPod(pod) {
			status.UnschedulablePods++
		}
	}
	problems := make(map[string]string, len(l.problems))
	for id, g := range s.history.givenBack {
		if l.now.Sub(g.at) < givenBackShownFor {
			problems[id] = g.message
		}
	}
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
		})
	}
	status.Decisions = slices.Clone(s.history.decisions.list)
	status.AtomicScaleUps = s.atomicScaleUpRecords()
	status.UnfinishedRollbacks = s.unfinishedRollbacks(l.groups.Groups)
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

// metrics are where the loop records its metrics (actuation.metrics).
func (s *steps) metrics() *Metrics {
	return s.act.metrics()
}
