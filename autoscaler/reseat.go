// Re-seating: the nodes of one scale-up register in any order, and when
// one starts taking pods before the others, kube-scheduler may bind there
// pods that the plan gave the nodes still on their way, taking the room of
// the pod the node was bought for (issue 47). Buying another node for that
// pod keeps a node more than the plan needed. Instead, when moving those
// pods to their own nodes, once these are Ready, lets the plan buy fewer
// nodes, the pod is nominated to its node again and the pods that took its
// room are evicted, one by one as their nodes start, for their controllers
// to recreate them there.

package autoscaler

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// EventReseat, on the pod a node was bought for, on the pods evicted to
// give it its room back and on the node, says why they are evicted.
const EventReseat = "Reseat"

// displacedWithin is how soon after its node registered a pod must have
// been bound there to count as displacing another: past that, the pods on
// a node are where kube-scheduler chose to put them, not where the order
// of arrival of one scale-up's nodes pushed them, and they stay.
const displacedWithin = 30 * time.Second

// displacements are the pending pods whose place on a node bought for
// them was taken by pods the same plan gave nodes still on their way, by
// the UID of the pending pod. They are the scale-up step's, found when the
// pods that took the place are bound (the loop after), and followed until
// the pod runs, the pods that took its place are gone from its node, or
// the node's group's max node provision time is over.
type displacements map[types.UID]*displacement

// displacement is a pending pod whose planned node others took.
type displacement struct {
	// node is the node the plan bought for the pod, and group its group.
	node, group string
	// found is when the displacement was found.
	found time.Time
	// displacing are the pods bound to node that the plan gave other
	// nodes, with the places it gave them, in the order found.
	displacing []displacing
	// evicted are the displacing pods evicted already.
	evicted sets.Set[types.UID]
}

// displacing is a pod bound to a node bought for another pod, and the
// place the plan gave it.
type displacing struct {
	uid             types.UID
	namespace, name string
	planned         scaleup.Nomination
}

// observe forgets the displacements that ended and finds new ones: pods
// pending that the last plan gave a node that registered under its name
// within displacedWithin, bought by a scale-up, to which pods were bound
// since that the last plan gave other nodes, nodes that had not registered
// before it. lastPlan are the last plan's nominations.
func (d displacements) observe(snap *snapshot.Snapshot, lastPlan []scaleup.Nomination, now time.Time, timeout func(groupID string) time.Duration) {
	pending := map[types.UID]*corev1.Pod{}
	for _, pod := range snap.PendingPods() {
		pending[pod.UID] = pod
	}
	for uid, x := range d {
		info := snap.NodeInfo(x.node)
		if pending[uid] == nil || info == nil || now.Sub(x.found) > timeout(x.group) {
			delete(d, uid)
			continue
		}
		on := sets.New[types.UID]()
		for _, pod := range info.Pods() {
			on.Insert(pod.Pod.UID)
		}
		x.displacing = slices.DeleteFunc(x.displacing, func(p displacing) bool { return !on.Has(p.uid) })
		if len(x.displacing) == 0 {
			delete(d, uid)
		}
	}
	planned := make(map[types.UID]scaleup.Nomination, len(lastPlan))
	for _, nomination := range lastPlan {
		planned[nomination.Pod] = nomination
	}
	for _, nomination := range lastPlan {
		if pending[nomination.Pod] == nil || d[nomination.Pod] != nil {
			continue
		}
		info, group := snap.NodeInfo(nomination.Node), snap.NodeGroupOf(nomination.Node)
		if info == nil || group == nil || now.Sub(info.Node().CreationTimestamp.Time) > displacedWithin {
			continue
		}
		registered := info.Node().CreationTimestamp
		var found []displacing
		for _, pod := range info.Pods() {
			p := pod.Pod
			other, ok := planned[p.UID]
			if !ok || other.Node == nomination.Node {
				continue
			}
			if own := snap.NodeInfo(other.Node); own != nil && own.Node().CreationTimestamp.Before(&registered) {
				// Its own node was there first: kube-scheduler chose.
				continue
			}
			found = append(found, displacing{uid: p.UID, namespace: p.Namespace, name: p.Name, planned: other})
		}
		if len(found) > 0 {
			d[nomination.Pod] = &displacement{node: nomination.Node, group: group.ID(), found: now, displacing: found, evicted: sets.New[types.UID]()}
		}
	}
}

// reseating is the decision to give a pending pod back the room of its
// node, by moving the pods that took it to their own.
type reseating struct {
	pod *corev1.Pod
	// node is where the pod goes back to.
	node string
	// moves are the pods that must leave the node for it.
	moves []move
}

// move is a pod to evict from the node it took, for its controller to
// recreate it on the node the plan gives it.
type move struct {
	pod *snapshot.Pod
	// to is the node the plan gives the pod; ready tells whether it takes
	// pods now: only then is the pod evicted.
	to    string
	ready bool
	// evicted is set once the pod was evicted.
	evicted bool
}

// message tells why the pod is evicted, for its events and the log.
func (m move) message(r reseating) string {
	return fmt.Sprintf("pod %s was planned for node %s and bound to node %s, bought for pod %s, before its own node started: "+
		"it moves to %s, which is Ready, so that %s runs on %s without buying another node",
		klog.KRef(m.pod.Namespace, m.pod.Name), m.to, r.node, klog.KObj(r.pod), m.to, klog.KObj(r.pod), r.node)
}

// message tells the pending pod why it waits.
func (r reseating) message() string {
	names := make([]string, 0, len(r.moves))
	for _, m := range r.moves {
		names = append(names, klog.KRef(m.pod.Namespace, m.pod.Name).String())
	}
	return fmt.Sprintf("pod(s) %s, planned for nodes still on their way, took the room of this pod on node %s, bought for it: "+
		"they move to their own nodes once these are Ready, instead of buying another node", strings.Join(names, ", "), r.node)
}

// reseat returns, when plan buys nodes for pods whose room on their nodes
// was taken by displacing pods, a plan that moves the fewest of those
// pods that gives them their room back, to the nodes the last plans gave
// them, and buys fewer nodes, with the moves; or nil. Only pods that may
// be moved (scaledown.MoveBlocker) of no higher priority than the pod
// whose room they took move. state is the plan's.
func (s *steps) reseat(ctx context.Context, l *loop, state scaleup.State, plan *scaleup.Plan) (*scaleup.Plan, []reseating) {
	if plan.NewNodes() == 0 || len(s.displacements) == 0 {
		return nil, nil
	}
	helped := map[types.UID]*corev1.Pod{}
	for _, pod := range plan.Helped {
		helped[pod.UID] = pod
	}
	snap := l.snapshot
	var reseatings []reseating
	for _, uid := range slices.Sorted(maps.Keys(s.displacements)) {
		pod := helped[uid]
		if pod == nil {
			continue
		}
		x := s.displacements[uid]
		if moves := s.fewestMoves(ctx, l, pod, x); len(moves) > 0 {
			reseatings = append(reseatings, reseating{pod: pod, node: x.node, moves: moves})
		}
	}
	if len(reseatings) == 0 {
		return nil, nil
	}

	// The pods that move are pending again, in their places of the last
	// plans; the pods whose room they took go first, back to it.
	snap.Fork()
	defer snap.Revert()
	var moving []*corev1.Pod
	var nominations []scaleup.Nomination
	for _, r := range reseatings {
		// Nominated: its nomination stands until it is bound, for the
		// room its node gets back.
		nominations = append(nominations, scaleup.Nomination{Pod: r.pod.UID, Node: r.node, Group: s.displacements[r.pod.UID].group, Nominated: true})
		for _, m := range r.moves {
			_ = snap.RemovePod(m.pod.Namespace, m.pod.Name, r.node)
			pending := m.pod.Full()
			pending.Spec.NodeName, pending.Status.NominatedNodeName = "", ""
			moving = append(moving, pending)
			nominations = append(nominations, s.displacements[r.pod.UID].plannedFor(m.pod.UID))
		}
	}
	again := state
	again.Pods = slices.Concat(candidatesOf(plan), moving)
	// A pod placed twice would count twice.
	renominated := sets.New[types.UID]()
	for _, nomination := range nominations {
		renominated.Insert(nomination.Pod)
	}
	again.Nominations = nominations
	for _, nomination := range state.Nominations {
		if !renominated.Has(nomination.Pod) {
			again.Nominations = append(again.Nominations, nomination)
		}
	}
	replan := s.settings.scaleUp.Plan(ctx, snap, again)
	if replan.NewNodes() >= plan.NewNodes() {
		return nil, nil
	}
	placed := map[types.UID]string{}
	for _, placement := range replan.Absorbed {
		placed[placement.Pod.UID] = placement.NodeName
	}
	for i := range reseatings {
		r := &reseatings[i]
		if placed[r.pod.UID] != r.node {
			return nil, nil
		}
		for j := range r.moves {
			m := &r.moves[j]
			to, ok := placed[m.pod.UID]
			if !ok || to == r.node {
				return nil, nil
			}
			m.to = to
			if info := snap.NodeInfo(to); info != nil {
				m.ready = s.settings.config.Taints.rules().Readiness(info.Node(), l.now) == nodefacts.Ready
			}
			m.evicted = s.displacements[r.pod.UID].evicted.Has(m.pod.UID)
		}
	}
	klog.FromContext(ctx).V(2).Info("Planned the pods that took the room of pods on the nodes bought for them on their own nodes, instead of buying more",
		"nodes", replan.NewNodes(), "insteadOf", plan.NewNodes(), "pods", len(reseatings), "moving", len(moving))
	return withoutMoving(replan, plan, moving, reseatings), reseatings
}

// plannedFor is the place the last plans gave a displacing pod.
func (x *displacement) plannedFor(uid types.UID) scaleup.Nomination {
	for _, p := range x.displacing {
		if p.uid == uid {
			return p.planned
		}
	}
	return scaleup.Nomination{Pod: uid}
}

// fewestMoves are the fewest pods of a displacement to move so that pod
// fits its node again, those whose nodes are Ready first; nil when moving
// all those that may move is not enough.
func (s *steps) fewestMoves(ctx context.Context, l *loop, pod *corev1.Pod, x *displacement) []move {
	snap := l.snapshot
	info := snap.NodeInfo(x.node)
	if info == nil {
		return nil
	}
	onNode := map[types.UID]*snapshot.Pod{}
	for _, p := range info.Pods() {
		onNode[p.Pod.UID] = p.Pod
	}
	rules := s.settings.config.Taints.rules()
	ready := func(p displacing) bool {
		own := snap.NodeInfo(p.planned.Node)
		return own != nil && rules.Readiness(own.Node(), l.now) == nodefacts.Ready
	}
	var movable []displacing
	for _, p := range x.displacing {
		running := onNode[p.uid]
		if running == nil {
			continue
		}
		blocker := scaledown.MoveBlocker(running, snap)
		if blocker == "" && priority(running.Spec.Priority) > priority(pod.Spec.Priority) {
			blocker = "the pod has a higher priority than the pod whose room it took"
		}
		if blocker != "" && !x.evicted.Has(p.uid) {
			klog.FromContext(ctx).V(2).Info("Keeping a pod on the node planned for another", "pod", klog.KRef(running.Namespace, running.Name), "node", x.node,
				"for", klog.KObj(pod), "reason", blocker)
			continue
		}
		movable = append(movable, p)
	}
	slices.SortStableFunc(movable, func(a, b displacing) int {
		return cmp.Or(-cmp.Compare(boolInt(ready(a)), boolInt(ready(b))), cmp.Compare(a.name, b.name))
	})

	snap.Fork()
	defer snap.Revert()
	var moves []move
	for _, p := range movable {
		_ = snap.RemovePod(p.namespace, p.name, x.node)
		moves = append(moves, move{pod: onNode[p.uid]})
		if simulator.NewScheduler(ctx, snap).Check(pod, x.node) == nil {
			return moves
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// priority is a pod's priority, 0 when it has none.
func priority(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// candidatesOf are the pods plan planned for.
func candidatesOf(plan *scaleup.Plan) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, len(plan.Absorbed)+len(plan.Helped)+len(plan.NoScaleUp))
	for _, placement := range plan.Absorbed {
		pods = append(pods, placement.Pod)
	}
	pods = append(pods, plan.Helped...)
	for _, pod := range plan.NoScaleUp {
		pods = append(pods, pod.Pod)
	}
	return pods
}

// withoutMoving is replan without the moving pods, which run and are
// evicted rather than nominated, and with the pods that get their room
// back nominated to their nodes; it defers what plan deferred.
func withoutMoving(replan, plan *scaleup.Plan, moving []*corev1.Pod, reseatings []reseating) *scaleup.Plan {
	out := sets.New[types.UID]()
	for _, pod := range moving {
		out.Insert(pod.UID)
	}
	placedOut := func(p simulator.Placement) bool { return out.Has(p.Pod.UID) }
	replan.Absorbed = slices.DeleteFunc(replan.Absorbed, placedOut)
	replan.ToNominate = slices.DeleteFunc(replan.ToNominate, placedOut)
	replan.Helped = slices.DeleteFunc(replan.Helped, func(pod *corev1.Pod) bool { return out.Has(pod.UID) })
	replan.NoScaleUp = slices.DeleteFunc(replan.NoScaleUp, func(n scaleup.NoScaleUp) bool { return out.Has(n.Pod.UID) })
	replan.Nominations = slices.DeleteFunc(replan.Nominations, func(n scaleup.Nomination) bool { return out.Has(n.Pod) })
	for _, r := range reseatings {
		if !slices.ContainsFunc(replan.ToNominate, func(p simulator.Placement) bool { return p.Pod.UID == r.pod.UID }) {
			replan.ToNominate = append(replan.ToNominate, simulator.Placement{Pod: r.pod, NodeName: r.node})
		}
	}
	replan.Deferred, replan.LastPlanned = plan.Deferred, plan.LastPlanned
	return replan
}

// evictPod asks the Eviction API to evict the pod, with grace as its
// grace period, as long as it is the pod read (its UID).
func evictPod(ctx context.Context, clientset kubernetes.Interface, pod *snapshot.Pod, grace time.Duration) error {
	eviction := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(grace.Seconds())),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		},
	}
	return clientset.CoreV1().Pods(pod.Namespace).EvictV1(ctx, eviction)
}

// gracePeriod is the pod's termination grace period, capped at most.
func gracePeriod(pod *snapshot.Pod, most time.Duration) time.Duration {
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if seconds := pod.Spec.TerminationGracePeriodSeconds; seconds != nil {
		grace = time.Duration(*seconds) * time.Second
	}
	return min(grace, most)
}
