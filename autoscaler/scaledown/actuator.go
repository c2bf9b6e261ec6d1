package scaledown

import (
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
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Event reasons, the upstream ones.
const (
	EventReasonScaleDown       = "ScaleDown"
	EventReasonScaleDownFailed = "ScaleDownFailed"
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
	// --cordon-node-before-terminating; a removal given up uncordons them.
	CordonNodeBeforeTerminating bool
	// Clock times the drains.
	Clock clock.PassiveClock
}

// podTerminationHeadroom is how long, beyond its grace period, a drain
// waits for an evicted pod to go before it fails.
const podTerminationHeadroom = 30 * time.Second

// Validate tells whether an Actuator can work with the options.
func (o ActuatorOptions) Validate() error {
	if o.Clock == nil {
		return errors.New("a clock is required")
	}
	if o.MaxPodEvictionTime <= 0 || o.MaxGracefulTermination < 0 {
		return errors.New("maxPodEvictionTime must be positive, maxGracefulTermination not negative")
	}
	return nil
}

// Actuator removes the nodes a Plan chooses. Empty nodes are tainted and
// deleted at once, in Start. Other nodes are drained over several loops:
// Start taints the node and sends the first evictions, each Advance sends
// the evictions that were refused again, checks which pods are gone and,
// once all are, deletes the node. No call waits for pods, so the loop is
// never blocked, and a drain that outlives its time limits fails and
// leaves the node as it was, minus the pods already evicted.
//
// The drains in progress live in memory: after a restart CleanUpTaints
// releases their nodes. It is not safe for concurrent use.
type Actuator struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	opts     ActuatorOptions

	drains map[string]*drain
	// deleted are the nodes handed to their group for deletion: they keep
	// the deletion taint until they are gone from the cluster, so that no pod
	// lands on them while their Machine goes away.
	deleted                   map[string]bool
	lastDeletion, lastFailure time.Time
	deletedNodes, evictedPods int
}

// drain is a node being drained.
type drain struct {
	node      *corev1.Node
	group     nodegroups.NodeGroup
	startedAt time.Time
	// evictedAt is when each pod's eviction was accepted.
	evictedAt map[types.UID]time.Time
	// refused is the last error of an eviction, for the failure message.
	refused error
}

// NewActuator returns an Actuator that talks to the workload cluster
// through client and reports through recorder.
func NewActuator(client kubernetes.Interface, recorder record.EventRecorder, opts ActuatorOptions) (*Actuator, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Actuator{client: client, recorder: recorder, opts: opts, drains: map[string]*drain{}, deleted: map[string]bool{}}, nil
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
	deleting := make(map[string]bool, len(a.drains)+len(a.deleted))
	for name := range a.drains {
		deleting[name] = true
	}
	for name := range a.deleted {
		deleting[name] = true
	}
	return Progress{
		Deleting: deleting, Deleted: maps.Clone(a.deleted), Draining: len(a.drains),
		LastDeletion: a.lastDeletion, LastFailure: a.lastFailure,
		DeletedNodes: a.deletedNodes, EvictedPods: a.evictedPods,
	}
}

// Start removes the empty nodes of plan and starts draining the others.
func (a *Actuator) Start(ctx context.Context, plan *Plan) {
	a.deleteEmpty(ctx, plan.Empty)
	for _, removal := range plan.Drain {
		a.startDrain(ctx, removal)
	}
}

// Advance drives the drains in progress one step.
func (a *Actuator) Advance(ctx context.Context) {
	for _, name := range slices.Sorted(maps.Keys(a.drains)) {
		a.step(ctx, a.drains[name])
	}
}

// CleanUpTaints removes the deletion taint from the nodes that carry it but are
// not being removed: left by a restart, a crash, or a failure to remove it.
// Call it once at start and then every loop with the nodes as listed.
func (a *Actuator) CleanUpTaints(ctx context.Context, nodes []*corev1.Node) error {
	logger := klog.FromContext(ctx)
	listed := make(map[string]bool, len(nodes))
	for _, node := range nodes {
		listed[node.Name] = true
	}
	for name := range a.deleted {
		if !listed[name] {
			delete(a.deleted, name)
		}
	}
	var errs []error
	for _, node := range nodes {
		if !HasDeletionTaint(node) || a.drains[node.Name] != nil || a.deleted[node.Name] {
			continue
		}
		if err := removeDeletionTaint(ctx, a.client, node.Name, a.opts.CordonNodeBeforeTerminating); err != nil {
			errs = append(errs, fmt.Errorf("removing the deletion taint of node %s: %w", node.Name, err))
			continue
		}
		logger.Info("Removed a leftover deletion taint", "node", klog.KObj(node))
	}
	return errors.Join(errs...)
}

// deleteEmpty taints the nodes, makes sure that no pod landed on them
// since the plan, and deletes them, one DeleteNodes call per group.
func (a *Actuator) deleteEmpty(ctx context.Context, removals []Removal) {
	logger := klog.FromContext(ctx)
	now := a.opts.Clock.Now()
	groups := map[string]nodegroups.NodeGroup{}
	nodes := map[string][]*corev1.Node{}
	for _, removal := range removals {
		node := removal.Node
		if err := addDeletionTaint(ctx, a.client, node.Name, now, a.opts.CordonNodeBeforeTerminating); err != nil {
			a.fail(ctx, node, fmt.Sprintf("failed to taint empty node: %v", err))
			continue
		}
		pods, err := a.podsToEvict(ctx, node.Name)
		if err != nil {
			a.fail(ctx, node, fmt.Sprintf("failed to list the pods of empty node: %v", err))
			continue
		}
		if len(pods) > 0 {
			// Not a failure: the scheduler used the node before the taint.
			logger.V(2).Info("Node is no longer empty, keeping it", "node", klog.KObj(node), "pod", klog.KObj(pods[0]))
			a.release(ctx, node)
			continue
		}
		a.recorder.Event(node, corev1.EventTypeNormal, EventReasonScaleDown, "marked the node as toBeDeleted/unschedulable")
		groups[removal.Group.ID()] = removal.Group
		nodes[removal.Group.ID()] = append(nodes[removal.Group.ID()], node)
	}
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		if err := groups[id].DeleteNodes(ctx, nodes[id]); err != nil {
			for _, node := range nodes[id] {
				a.fail(ctx, node, fmt.Sprintf("failed to delete empty node: %v", err))
			}
			continue
		}
		a.lastDeletion = now
		a.deletedNodes += len(nodes[id])
		for _, node := range nodes[id] {
			a.deleted[node.Name] = true
			logger.Info("Removed empty node", "node", klog.KObj(node), "nodeGroup", id)
		}
	}
}

// startDrain taints the node and takes the first drain step.
func (a *Actuator) startDrain(ctx context.Context, removal Removal) {
	node := removal.Node
	if a.drains[node.Name] != nil {
		return
	}
	now := a.opts.Clock.Now()
	if err := addDeletionTaint(ctx, a.client, node.Name, now, a.opts.CordonNodeBeforeTerminating); err != nil {
		a.fail(ctx, node, fmt.Sprintf("failed to taint node: %v", err))
		return
	}
	a.recorder.Event(node, corev1.EventTypeNormal, EventReasonScaleDown, "marked the node as toBeDeleted/unschedulable")
	klog.FromContext(ctx).Info("Draining node", "node", klog.KObj(node), "nodeGroup", removal.Group.ID())
	d := &drain{node: node, group: removal.Group, startedAt: now, evictedAt: map[types.UID]time.Time{}}
	a.drains[node.Name] = d
	a.step(ctx, d)
}

// fail gives the node back: it removes the taint, records the failure
// (which pauses scale-down for DelayAfterFailure) and says why.
func (a *Actuator) fail(ctx context.Context, node *corev1.Node, message string) {
	klog.FromContext(ctx).Info("Scale-down failed", "node", klog.KObj(node), "reason", message)
	a.release(ctx, node)
	a.lastFailure = a.opts.Clock.Now()
	a.recorder.Event(node, corev1.EventTypeWarning, EventReasonScaleDownFailed, message)
}

// release forgets the node and removes its taint. A taint that cannot be
// removed now is removed by CleanUpTaints later.
func (a *Actuator) release(ctx context.Context, node *corev1.Node) {
	delete(a.drains, node.Name)
	if err := removeDeletionTaint(ctx, a.client, node.Name, a.opts.CordonNodeBeforeTerminating); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to remove the deletion taint, will retry", "node", klog.KObj(node))
	}
}

// podsToEvict lists, from the API server, the pods on the node that must
// go before it is deleted: all but DaemonSet and mirror pods and those
// that have finished.
func (a *Actuator) podsToEvict(ctx context.Context, nodeName string) ([]*corev1.Pod, error) {
	list, err := a.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		// The field selector is checked again: not every client honours it.
		if compact := snapshot.NewPod(pod); compact.NodeName != nodeName || isDaemonSetPod(compact) || isMirrorPod(compact) || compact.Finished() {
			continue
		}
		pods = append(pods, pod)
	}
	return pods, nil
}
