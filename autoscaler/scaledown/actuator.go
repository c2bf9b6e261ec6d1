package scaledown

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Event reasons: the upstream ones, and ScaleDownCancelled for a removal
// given up because its decision no longer holds, which is no failure.
const (
	EventReasonScaleDown          = "ScaleDown"
	EventReasonScaleDownFailed    = "ScaleDownFailed"
	EventReasonScaleDownCancelled = "ScaleDownCancelled"
)

// ActuatorOptions configure node removal. Like Options, they have no
// defaults of their own: the engine's configuration owns them.
type ActuatorOptions struct {
	// MaxPodEvictionTime is how long a drain keeps retrying evictions
	// that are refused, e.g. by a PodDisruptionBudget, before it fails.
	MaxPodEvictionTime time.Duration
	// MaxGracefulTermination caps the termination grace period given to
	// evicted pods.
	MaxGracefulTermination time.Duration
	// CordonNodeBeforeTerminating cordons (spec.unschedulable) the nodes
	// being removed, on top of the deletion taint, as upstream's
	// --cordon-node-before-terminating. Releasing a node uncordons it when
	// the autoscaler cordoned it, whatever this says by then.
	CordonNodeBeforeTerminating bool
	// NodeDeletionTimeout is how long a node handed to its group for
	// deletion may stay while its instance is not being deleted; then it
	// is given back.
	NodeDeletionTimeout time.Duration
	// Clock times the drains.
	Clock clock.PassiveClock
}

// Validate tells whether an Actuator can work with the options.
func (o ActuatorOptions) Validate() error {
	if o.Clock == nil {
		return errors.New("a clock is required")
	}
	if o.MaxPodEvictionTime <= 0 || o.MaxGracefulTermination < 0 {
		return errors.New("maxPodEvictionTime must be positive, maxGracefulTermination not negative")
	}
	if o.NodeDeletionTimeout <= 0 {
		return errors.New("nodeDeletionTimeout must be positive")
	}
	return nil
}

// Actuator removes the nodes a Plan chooses. Empty nodes are tainted and
// deleted at once, in Start. Other nodes are drained over several loops:
// Start taints the node and sends the first evictions, each Continue sends
// the evictions that were refused again, checks which pods are gone and,
// once all are, deletes the node. No call waits for pods, so the loop is
// never blocked, and a drain that outlives its time limits fails and
// leaves the node as it was, minus the pods already evicted.
//
// Which pods a drain evicts and waits for come from the loop's cache
// (NodePods): a drain reads them in every loop for minutes, and so do
// several drains at once. Before a node is handed to its group the API
// server is read once more (podsLeft), for the pods the cache has not
// seen yet; a consolidation's drain reads it before its first eviction
// too, and gives the node back when a pod its decision did not see is
// there.
//
// Before every step that changes the cluster (taint, evict, delete) the
// Actuator asks the node's group, read afresh, whether the removal still
// holds (NodeGroup.CheckScaleDown), and checks the cluster minimums on the
// loop's nodes; when not, it gives the node back. It takes off a node only
// the taint and cordon it recorded there (ReleaseNode), so a restart or a
// new leader releases exactly those. It is not safe for concurrent use.
type Actuator struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	// owner is the ClusterAutoscaler whose taints and cordons the
	// Actuator places and takes back.
	owner ownership.Owner
	opts  ActuatorOptions

	drains map[string]*drain
	// handedOver are the nodes deleted through their group: they keep the
	// deletion taint until they are gone from the cluster, so that no pod
	// lands on them while their Machine goes away.
	handedOver                map[string]*handOver
	lastDeletion, lastFailure time.Time
	deletedNodes, evictedPods int
	// consolidatedNodes are those of deletedNodes consolidation chose.
	consolidatedNodes int
	// replacing is the replacement under way, nil when none.
	replacing *Replacing
}

// drain is a node being drained.
type drain struct {
	node            *corev1.Node
	group           nodegroups.NodeGroup
	byConsolidation bool
	// moves are the pods consolidation chose the node with
	// (Removal.Moves); listed tells that the API server was asked for the
	// node's pods since the taint.
	moves     map[types.UID]bool
	listed    bool
	startedAt time.Time
	// taintVersion is the node's resourceVersion once it carried the
	// deletion taint.
	taintVersion string
	// evictedAt is when each pod's eviction was accepted.
	evictedAt map[types.UID]time.Time
	// refused is the last error of an eviction, for the failure message.
	refused error
}

// handOver is a node deleted through its group, waiting to be gone.
type handOver struct {
	node  *corev1.Node
	group nodegroups.NodeGroup
	at    time.Time
}

// View is what a loop sees of the cluster, against which the Actuator
// re-checks the removals it carries on.
type View struct {
	// Nodes are the nodes of the cluster.
	Nodes []*corev1.Node
	// Pods are the pods on each node, and the nodes with their DRA
	// devices, as the loop read them.
	Pods NodePods
	// Groups are the node groups, with their instances.
	Groups []nodegroups.NodeGroup
	// Minimums are the cluster-wide totals that removals must leave.
	Minimums ClusterMinimums
}

// NodePods lists the pods on a node as a loop read them from its cache,
// which may not have the latest yet, and gives the node as the loop read
// it, with its DRA devices (nil when it has not seen it). A
// *snapshot.Snapshot outside its forks is one.
type NodePods interface {
	PodsOn(nodeName string) []*snapshot.Pod
	NodeInfo(nodeName string) *snapshot.NodeInfo
}

// Released is a node handed over for deletion that was still there after
// NodeDeletionTimeout, and was given back.
type Released struct {
	Node    string
	GroupID string
	Message string
}

// NewActuator returns an Actuator that talks to the workload cluster
// through client, reports through recorder, and acts for owner.
func NewActuator(client kubernetes.Interface, recorder record.EventRecorder, owner ownership.Owner, opts ActuatorOptions) (*Actuator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if owner.UID == "" {
		return nil, errors.New("the UID of the ClusterAutoscaler that owns the taints is required")
	}
	return &Actuator{client: client, recorder: recorder, owner: owner, opts: opts, drains: map[string]*drain{}, handedOver: map[string]*handOver{}}, nil
}

// SetOptions changes the options from the next call on; the drains in
// progress go on under the new ones. opts must be valid (Validate).
func (a *Actuator) SetOptions(opts ActuatorOptions) {
	a.opts = opts
}

// Progress reports the removals in progress, for the Planner: a node
// deleted through its group stays in progress until it is no longer
// listed, so that it is never chosen, and deleted, twice.
func (a *Actuator) Progress() Progress {
	deleting := make(map[string]bool, len(a.drains)+len(a.handedOver))
	deleted := make(map[string]bool, len(a.handedOver))
	for name := range a.drains {
		deleting[name] = true
	}
	for name := range a.handedOver {
		deleting[name] = true
		deleted[name] = true
	}
	return Progress{
		Deleting: deleting, Deleted: deleted, Draining: len(a.drains),
		LastDeletion: a.lastDeletion, LastFailure: a.lastFailure,
		DeletedNodes: a.deletedNodes, EvictedPods: a.evictedPods, ConsolidatedNodes: a.consolidatedNodes,
		Replacing: a.replacing,
	}
}

// StartReplacing follows a replacement whose new nodes were asked for:
// the Planner drains the nodes it replaces once they are Ready
// (Plan.Replacing). There is one at a time.
func (a *Actuator) StartReplacing(r *Replacing) {
	a.replacing = r
}

// EndReplacing forgets the replacement under way: its nodes are being
// drained, or it was abandoned.
func (a *Actuator) EndReplacing() {
	a.replacing = nil
}

// Start removes the empty nodes of plan and starts draining the others,
// whose pods are as the loop read them.
func (a *Actuator) Start(ctx context.Context, plan *Plan, pods NodePods) {
	a.deleteEmpty(ctx, plan.Empty)
	// Every node is tainted before any pod is evicted, as upstream taints
	// its batch first: kube-scheduler would otherwise place pods evicted
	// from one node on the next, to be evicted again a moment later.
	var started []*drain
	for _, removal := range plan.Drain {
		if d := a.startDrain(ctx, removal); d != nil {
			started = append(started, d)
		}
	}
	for _, d := range started {
		a.step(ctx, d, pods)
	}
}

// Continue carries on the removals in progress under the loop's view:
// each drain, re-checked, takes one step; nodes handed over and still
// there after NodeDeletionTimeout are given back and returned; what the
// autoscaler left on nodes that no removal owns (after a restart, a crash,
// or a failure to release) is released. It runs every loop, even while the
// cluster is unhealthy, so that no node stays tainted for nothing.
func (a *Actuator) Continue(ctx context.Context, view View) []Released {
	members := membersByNode(view.Groups)
	released := a.checkHandedOver(ctx, view, members)
	totals := a.remainingTotals(view)
	for _, d := range a.drainsInOrder() {
		reason, err := a.recheck(ctx, d.group, a.drainsOfGroupUpTo(d), view.Minimums, &totals, limitCapacity(view.Pods, d.node))
		switch {
		case err != nil && a.opts.Clock.Since(d.startedAt) >= a.opts.MaxPodEvictionTime:
			a.fail(ctx, d.node, fmt.Sprintf("could not check that node group %s may still lose the node within %s: %v", d.group.ID(), a.opts.MaxPodEvictionTime, err))
		case err != nil:
			// A read that failed says nothing about the decision: the drain
			// waits for the next loop, within its time limit.
			klog.FromContext(ctx).V(2).Info("Cannot check the node group, will retry", "node", klog.KObj(d.node), "nodeGroup", d.group.ID(), "err", err.Error())
		case reason != "":
			a.cancel(ctx, d.node, reason)
		default:
			a.step(ctx, d, view.Pods)
		}
	}
	a.releaseLeftovers(ctx, view.Nodes, members)
	return released
}

// ReleaseAll gives back the nodes being drained, saying why; nodes already
// handed to their group stay tainted until they are gone. The engine calls
// it when it stops (a pause, a deletion, a restart) and when scale-down is
// turned off, so that no node stays tainted while nothing drives its drain.
func (a *Actuator) ReleaseAll(ctx context.Context, reason string) {
	for _, d := range a.drainsInOrder() {
		a.cancel(ctx, d.node, reason)
	}
	if a.replacing != nil {
		// Its nodes were not touched; its new nodes are left to scale-down.
		klog.FromContext(ctx).Info("Abandoning the replacement under way", "reason", reason, "consolidation", a.replacing.Consolidation.Message())
		a.replacing = nil
	}
}

// FollowHandedOver does for the nodes handed to their group what Continue
// does: it forgets those that are gone and gives back, and returns, those
// still there after NodeDeletionTimeout whose instance is not being
// deleted. It carries no drain on and releases no leftover. An engine
// that no longer acts (DryRun) calls it, so that what it handed over
// while it acted is still followed until it is gone: a taint and a
// deletion mark must not stay because the mode changed.
func (a *Actuator) FollowHandedOver(ctx context.Context, view View) []Released {
	return a.checkHandedOver(ctx, view, membersByNode(view.Groups))
}

// member is a node's place in the loop's view.
type member struct {
	group    nodegroups.NodeGroup
	deleting bool
}

func membersByNode(groups []nodegroups.NodeGroup) map[string]member {
	members := map[string]member{}
	for _, group := range groups {
		for _, instance := range group.Instances() {
			if instance.NodeName != "" {
				members[instance.NodeName] = member{group: group, deleting: instance.State == nodegroups.InstanceDeleting}
			}
		}
	}
	return members
}

// checkHandedOver forgets the handed-over nodes that are gone, and gives
// back those still there after NodeDeletionTimeout whose instance is not
// being deleted: their group did not remove them, e.g. because another
// writer set its replicas back, and they must not stay tainted and marked.
func (a *Actuator) checkHandedOver(ctx context.Context, view View, members map[string]member) []Released {
	listed := make(map[string]bool, len(view.Nodes))
	for _, node := range view.Nodes {
		listed[node.Name] = true
	}
	now := a.opts.Clock.Now()
	var released []Released
	for _, name := range slices.Sorted(maps.Keys(a.handedOver)) {
		h := a.handedOver[name]
		m, ok := members[name]
		switch {
		case !listed[name]:
			delete(a.handedOver, name)
			continue
		case ok && m.deleting:
			// The infrastructure is removing it; draining can take a while.
			continue
		case now.Sub(h.at) < a.opts.NodeDeletionTimeout:
			continue
		}
		group := h.group
		if ok {
			group = m.group
		}
		message := fmt.Sprintf("node %s was handed to node group %s for deletion %s ago and is still there, its instance not being deleted "+
			"(did another writer change the group's replicas?); it is given back: taint and deletion mark removed",
			name, group.ID(), now.Sub(h.at).Round(time.Second))
		if err := group.CancelDeletion(ctx, []*corev1.Node{h.node}); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to remove the deletion mark of a node given back, will retry", "node", klog.KObj(h.node), "nodeGroup", group.ID())
			continue
		}
		delete(a.handedOver, name)
		a.release(ctx, h.node)
		// A failed removal: scale-down waits DelayAfterFailure rather than
		// take the node again at once, and fight the other writer.
		a.lastFailure = now
		a.recorder.Event(h.node, corev1.EventTypeWarning, EventReasonScaleDownFailed, message)
		klog.FromContext(ctx).Info("Gave back a node its group did not remove", "node", klog.KObj(h.node), "nodeGroup", group.ID(), "handedOverAt", h.at)
		released = append(released, Released{Node: name, GroupID: group.ID(), Message: message})
	}
	return released
}

// remainingTotals are what the limits count of the listed nodes that are
// not handed over for deletion: the drains in progress are in, each is
// taken off as its recheck lets it go on.
func (a *Actuator) remainingTotals(view View) snapshot.Resources {
	var totals snapshot.Resources
	for _, node := range view.Nodes {
		if a.handedOver[node.Name] == nil {
			totals.Add(limitCapacity(view.Pods, node))
		}
	}
	return totals
}

// limitCapacity is what the cluster-wide minimums count of node
// (snapshot.NodeInfo.LimitCapacity), with the DRA devices the loop read;
// a node the loop did not read counts its capacity.
func limitCapacity(nodes NodePods, node *corev1.Node) snapshot.Resources {
	if info := nodes.NodeInfo(node.Name); info != nil {
		return info.LimitCapacity()
	}
	return snapshot.NewNodeInfo(node).LimitCapacity()
}

// recheck says why removing a node of group must not go on, or "", or fails
// when the group could not be read. removing counts the removals of the
// group that have not lowered its replicas yet, this one included. totals
// are what the cluster keeps; a removal that goes on, which counts
// capacity toward them, is taken off them.
func (a *Actuator) recheck(ctx context.Context, group nodegroups.NodeGroup, removing int, minimums ClusterMinimums, totals *snapshot.Resources, capacity snapshot.Resources) (string, error) {
	if reason, err := checkGroup(ctx, group, removing); reason != "" || err != nil {
		return reason, err
	}
	if message := minimums.Violated(*totals, capacity); message != "" {
		return message, nil
	}
	totals.Sub(capacity)
	return "", nil
}

// checkGroup asks the group whether it may lose removing nodes now: it
// returns the reason it refuses, or the error of a check it could not make.
func checkGroup(ctx context.Context, group nodegroups.NodeGroup, removing int) (string, error) {
	err := group.CheckScaleDown(ctx, removing)
	var refused *nodegroups.RefusedError
	if errors.As(err, &refused) {
		return refused.Reason, nil
	}
	return "", err
}

func (a *Actuator) drainsInOrder() []*drain {
	drains := slices.Collect(maps.Values(a.drains))
	slices.SortFunc(drains, func(x, y *drain) int {
		return cmp.Or(x.startedAt.Compare(y.startedAt), cmp.Compare(x.node.Name, y.node.Name))
	})
	return drains
}

// drainsOfGroupUpTo counts the drains of d's group that started before
// d, and d: when the group can lose fewer nodes than it is drained of, the
// latest drains are the ones given back.
func (a *Actuator) drainsOfGroupUpTo(d *drain) int {
	count := 0
	for _, other := range a.drains {
		if other.group.ID() == d.group.ID() && (other.startedAt.Before(d.startedAt) || other.startedAt.Equal(d.startedAt) && other.node.Name <= d.node.Name) {
			count++
		}
	}
	return count
}

// releaseLeftovers releases the nodes that carry the owner's taint or
// cordon but that no removal owns, except those whose instance is being
// deleted, which keep the taint until they are gone. Taints and cordons
// the autoscaler did not place, or placed for another ClusterAutoscaler
// that exists, are never touched: that one's engine may be draining the
// node (checkOtherAutoscalers reports it).
func (a *Actuator) releaseLeftovers(ctx context.Context, nodes []*corev1.Node, members map[string]member) {
	logger := klog.FromContext(ctx)
	for _, node := range nodes {
		if !hasMarks(node) || a.drains[node.Name] != nil || a.handedOver[node.Name] != nil {
			continue
		}
		if m, ok := members[node.Name]; ok && m.deleting {
			continue
		}
		ours, another, err := ownMarks(ctx, a.owner, node)
		if err != nil {
			logger.Error(err, "Cannot tell whose taint a node carries, will retry", "node", klog.KObj(node))
			continue
		}
		if len(ours) == 0 {
			logger.V(2).Info("Leaving the taint of another ClusterAutoscaler's engine", "node", klog.KObj(node), "placedBy", another)
			continue
		}
		if _, err := ReleaseNode(ctx, a.client, a.owner, node.Name); err != nil {
			logger.Error(err, "Failed to release a node left tainted, will retry", "node", klog.KObj(node))
			continue
		}
		logger.Info("Released a node left tainted by an earlier removal", "node", klog.KObj(node))
	}
}

// deleteEmpty checks each group afresh, taints its nodes, makes sure that
// no pod landed on them since the cache the plan was made from, and
// deletes them, one DeleteNodes call per group.
func (a *Actuator) deleteEmpty(ctx context.Context, removals []Removal) {
	logger := klog.FromContext(ctx)
	now := a.opts.Clock.Now()
	groups := map[string]nodegroups.NodeGroup{}
	byGroup := map[string][]*corev1.Node{}
	byConsolidation := map[string]bool{}
	for _, removal := range removals {
		byConsolidation[removal.Node.Name] = removal.ByConsolidation
		groups[removal.Group.ID()] = removal.Group
		byGroup[removal.Group.ID()] = append(byGroup[removal.Group.ID()], removal.Node)
	}
	for _, id := range slices.Sorted(maps.Keys(byGroup)) {
		group := groups[id]
		if reason, err := checkGroup(ctx, group, len(byGroup[id])+a.drainsOfGroup(id)); reason != "" || err != nil {
			a.notStarted(ctx, byGroup[id], group, reason, err)
			continue
		}
		var empty []*corev1.Node
		for _, node := range byGroup[id] {
			version, ok := a.taint(ctx, node, now)
			if !ok {
				continue
			}
			pods, err := a.podsLeft(ctx, node.Name, version, now)
			switch {
			case err != nil:
				a.fail(ctx, node, fmt.Sprintf("failed to list the pods of empty node: %v", err))
			case len(pods) > 0:
				// Not a failure: the scheduler used the node before the taint.
				logger.V(2).Info("Node is no longer empty, keeping it", "node", klog.KObj(node), "pod", klog.KRef(pods[0].Namespace, pods[0].Name))
				a.release(ctx, node)
			default:
				empty = append(empty, node)
			}
		}
		if len(empty) == 0 {
			continue
		}
		if err := group.DeleteNodes(ctx, empty); err != nil {
			for _, node := range empty {
				a.notDeleted(ctx, node, "empty node", err)
			}
			continue
		}
		a.lastDeletion = now
		a.deletedNodes += len(empty)
		for _, node := range empty {
			if byConsolidation[node.Name] {
				a.consolidatedNodes++
			}
			a.handedOver[node.Name] = &handOver{node: node, group: group, at: now}
			logger.Info("Removed empty node", "node", klog.KObj(node), "nodeGroup", id)
		}
	}
}

// startDrain checks the group afresh, taints the node and returns its
// drain, whose first step is the caller's; nil when it does not start.
func (a *Actuator) startDrain(ctx context.Context, removal Removal) *drain {
	node := removal.Node
	if a.drains[node.Name] != nil {
		return nil
	}
	if reason, err := checkGroup(ctx, removal.Group, a.drainsOfGroup(removal.Group.ID())+1); reason != "" || err != nil {
		a.notStarted(ctx, []*corev1.Node{node}, removal.Group, reason, err)
		return nil
	}
	now := a.opts.Clock.Now()
	version, ok := a.taint(ctx, node, now)
	if !ok {
		return nil
	}
	klog.FromContext(ctx).Info("Draining node", "node", klog.KObj(node), "nodeGroup", removal.Group.ID())
	d := &drain{
		node: node, group: removal.Group, byConsolidation: removal.ByConsolidation, moves: removal.Moves,
		startedAt: now, taintVersion: version, evictedAt: map[types.UID]time.Time{},
	}
	a.drains[node.Name] = d
	return d
}

// notStarted says why removals the plan chose do not start: their group
// refuses now, or could not be read. Nothing was done to the nodes.
func (a *Actuator) notStarted(ctx context.Context, nodes []*corev1.Node, group nodegroups.NodeGroup, reason string, err error) {
	logger := klog.FromContext(ctx)
	for _, node := range nodes {
		if err != nil {
			logger.V(2).Info("Cannot check the node group, not removing the node in this loop", "node", klog.KObj(node), "nodeGroup", group.ID(), "err", err.Error())
			continue
		}
		logger.Info("Node group refuses the removal now", "node", klog.KObj(node), "nodeGroup", group.ID(), "reason", reason)
		a.recorder.Event(node, corev1.EventTypeNormal, EventReasonScaleDownCancelled, "node not removed: "+reason)
	}
}

// taint puts the deletion taint on the node, says whether it did, and
// returns the node's resourceVersion with the taint. A node that another
// autoscaler is removing is left alone; other failures count as failed
// removals.
func (a *Actuator) taint(ctx context.Context, node *corev1.Node, now time.Time) (string, bool) {
	version, err := addDeletionTaint(ctx, a.client, a.owner, node.Name, now, a.opts.CordonNodeBeforeTerminating)
	var foreign *ForeignTaintError
	switch {
	case errors.As(err, &foreign):
		klog.FromContext(ctx).Info("Not removing a node that another cluster autoscaler is removing", "node", klog.KObj(node), "reason", foreign.Error())
		return "", false
	case err != nil:
		a.fail(ctx, node, fmt.Sprintf("failed to taint node: %v", err))
		return "", false
	}
	a.recorder.Event(node, corev1.EventTypeNormal, EventReasonScaleDown, "marked the node as toBeDeleted/unschedulable")
	return version, true
}

func (a *Actuator) drainsOfGroup(id string) int {
	count := 0
	for _, d := range a.drains {
		if d.group.ID() == id {
			count++
		}
	}
	return count
}

// fail gives the node back: it removes the taint, records the failure
// (which pauses scale-down for DelayAfterFailure) and says why.
func (a *Actuator) fail(ctx context.Context, node *corev1.Node, message string) {
	klog.FromContext(ctx).Info("Scale-down failed", "node", klog.KObj(node), "reason", message)
	a.release(ctx, node)
	a.lastFailure = a.opts.Clock.Now()
	a.recorder.Event(node, corev1.EventTypeWarning, EventReasonScaleDownFailed, message)
}

// notDeleted gives the node back after its group's DeleteNodes returned
// err: a refusal cancels the removal, anything else fails it.
func (a *Actuator) notDeleted(ctx context.Context, node *corev1.Node, what string, err error) {
	var refused *nodegroups.RefusedError
	if errors.As(err, &refused) {
		a.cancel(ctx, node, refused.Reason)
		return
	}
	a.fail(ctx, node, fmt.Sprintf("failed to delete %s: %v", what, err))
}

// cancel gives the node back because the decision to remove it no longer
// holds, e.g. its group started rolling out: no failure of the removal.
func (a *Actuator) cancel(ctx context.Context, node *corev1.Node, reason string) {
	klog.FromContext(ctx).Info("Scale-down cancelled", "node", klog.KObj(node), "reason", reason)
	a.release(ctx, node)
	a.recorder.Event(node, corev1.EventTypeNormal, EventReasonScaleDownCancelled, "node released, its removal no longer holds: "+reason)
}

// release forgets the node and takes off what the autoscaler put on it.
// What cannot be removed now is removed by Continue later.
func (a *Actuator) release(ctx context.Context, node *corev1.Node) {
	delete(a.drains, node.Name)
	if _, err := ReleaseNode(ctx, a.client, a.owner, node.Name); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove the deletion taint, will retry", "node", klog.KObj(node))
	}
}

// podsToEvict are those of pods, the pods on a node, that must go before
// it is deleted at now: all but DaemonSet and mirror pods and those already
// gone.
func podsToEvict(pods []*snapshot.Pod, now time.Time) []*snapshot.Pod {
	var evict []*snapshot.Pod
	for _, pod := range pods {
		if !pod.IsDaemonSetPod() && !isMirrorPod(pod) && !gone(pod, now) {
			evict = append(evict, pod)
		}
	}
	return evict
}

// podsLeft lists from the API server the pods on the node that must go
// before it is deleted at now: the last read before the node is handed to
// its group, for the pods the loop's cache has not seen yet. It reads at a
// resourceVersion not older than tainted, the node's with the deletion
// taint: the API server serves that from its watch cache, through its
// index of pods by node, where a consistent read may go to etcd and
// through every pod of the cluster. Resource versions order all writes, so
// every pod bound to the node before the taint is in the read, and the
// scheduler binds nothing there once it has seen the taint. What the read
// may miss, against a consistent one, is a binding within the watch
// cache's lag (milliseconds): a drain reads long after its taint, and a
// consistent read too leaves the scheduler the moment before the deletion.
func (a *Actuator) podsLeft(ctx context.Context, nodeName, tainted string, now time.Time) ([]*snapshot.Pod, error) {
	list, err := a.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector:        fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
		ResourceVersion:      tainted,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
	})
	if err != nil {
		return nil, err
	}
	pods := make([]*snapshot.Pod, 0, len(list.Items))
	for i := range list.Items {
		// The field selector is checked again: not every client honours it.
		if pod := snapshot.NewPod(&list.Items[i]); pod.NodeName == nodeName {
			pods = append(pods, pod)
		}
	}
	return podsToEvict(pods, now), nil
}
