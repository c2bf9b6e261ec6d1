package autoscaler

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/retry"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// maxNominationsPerLoop bounds the pods nominated in one loop, so that a
// large burst does not hold the loop on the client's rate limit: the next
// loops nominate the rest, long before machines boot. It is the client's
// default burst.
const maxNominationsPerLoop = 30

// nominationWriters bounds the nominations written at once. One at a
// time, a loop's nominations take as many round trips as there are pods,
// seconds on a busy machine, while the nodes they wait for may start.
const nominationWriters = 10

// nominate tells kube-scheduler which node the plan gave each pod that
// waits for a node on its way whose name is known, or for the node it was
// nominated to while that node was on its way, until it binds
// (scaleup.Plan.ToNominate), through the pod's status.nominatedNodeName
// (KEP-5278). kube-scheduler tries a pod's
// nominated node first and keeps its room from other pods of the same or
// lower priority. Without it, the oldest pods fill the first nodes to
// start, two by two, and pods that must keep apart can find no node with
// room left: a second round of machines for a burst that the plan fitted.
//
// kube-scheduler clears a nomination when the pod fails to schedule, as
// when other nodes register before its own: the nominations written or
// found in place stand until the next loop, and those kube-scheduler
// clears meanwhile are written back at once (renominations).
// Only the nominations that pods do not carry are written, several at a
// time. A pod that changed since it was read is read again (see write):
// one bound, or nominated by kube-scheduler, is left as it is.
func (s *steps) nominate(ctx context.Context, placements []simulator.Placement) {
	if s.nominationsRefused {
		return
	}
	s.renominations.stand(placements)
	var missing []simulator.Placement
	for _, placement := range placements {
		if len(missing) == maxNominationsPerLoop {
			break
		}
		if placement.Pod.Status.NominatedNodeName != placement.NodeName {
			missing = append(missing, placement)
		}
	}
	errs, wrote := make([]error, len(missing)), make([]bool, len(missing))
	writers := make(chan struct{}, nominationWriters)
	var wg sync.WaitGroup
	for i, placement := range missing {
		writers <- struct{}{}
		wg.Go(func() {
			defer func() { <-writers }()
			pod := placement.Pod
			wrote[i], errs[i] = s.renominations.write(ctx, pod.Namespace, pod.Name, pod.UID, pod.ResourceVersion, placement.NodeName)
		})
	}
	wg.Wait()

	logger := klog.FromContext(ctx)
	written, failed := 0, 0
	var failure error
	for i, err := range errs {
		switch {
		case err == nil:
			if wrote[i] {
				written++
			}
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			if !s.nominationsRefused {
				s.nominationsRefused = true
				logger.Error(err, "Cannot nominate pods to the nodes planned for them; kube-scheduler may place them so that more nodes are needed. Grant patch on pods/status in the workload cluster (config/workload-rbac)")
			}
		default:
			// The API server is failing: the next loop tries again.
			if failed == 0 {
				failure = fmt.Errorf("nominating pod %s to node %s: %w", klog.KObj(missing[i].Pod), missing[i].NodeName, err)
			}
			failed++
		}
	}
	if failed > 0 {
		logger.Error(failure, "Failed to nominate pods to the nodes planned for them", "failed", failed)
	}
	if written > 0 {
		logger.V(2).Info("Nominated pods to the nodes on their way planned for them", "pods", written)
	}
}

// nominatePod sets the pod's nominated node, on the version of the pod
// that was read.
func nominatePod(ctx context.Context, clientset kubernetes.Interface, namespace, name, resourceVersion, nodeName string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": resourceVersion},
		"status":   map[string]any{"nominatedNodeName": nodeName},
	})
	if err != nil {
		return err
	}
	_, err = clientset.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// Renominations are written at most this often, apart from the loop's
// nominations, so that a wave of failed attempts (every pod waiting for
// a node fails when another node registers) does not take the client's
// whole rate (--workload-client-qps, 20 by default) from the loop. Those
// to registered nodes are not held (see run).
const (
	renominationsPerSecond = 10
	renominationBurst      = 20
)

// renominations writes back at once the nominations the last loop stood
// by that kube-scheduler cleared, instead of a loop later.
//
// kube-scheduler clears a pod's nominatedNodeName on each of its failed
// attempts (preemption finds no victim and nominates ""), and a pod
// waiting for a node on its way fails whenever any other node registers
// or changes. Until the nomination is back, kube-scheduler keeps no room
// for the pod on its node: when that node starts taking pods in between,
// pods planned for other nodes still on their way take its room within
// milliseconds while the pod waits out its backoff, and a node more is
// bought (issue 47). A loop comes a second later, more on a busy machine;
// the pod informer tells of the clearing within milliseconds.
//
// Only the nominations of the last loop's plan are written back, to the
// node that plan gave them, and only those that kube-scheduler cleared:
// a nomination it changed to another node (for preemption) is its own.
type renominations struct {
	clientset kubernetes.Interface
	// cluster tells which nodes are registered, from the engine's cache.
	cluster client.Reader
	limiter *rate.Limiter
	wake    chan struct{}

	mu sync.Mutex
	// standing are the nominations of the last loop's plan and of the
	// loop in progress, node by pod; next are those of the loop in
	// progress alone, which replace them as the loop ends.
	standing, next map[types.UID]string
	// cleared are the pods whose standing nomination kube-scheduler
	// cleared, waiting to be nominated again, in the order to write them
	// back.
	cleared clearedQueue
}

func newRenominations(clientset kubernetes.Interface, cluster client.Reader) *renominations {
	return &renominations{
		clientset: clientset,
		cluster:   cluster,
		limiter:   rate.NewLimiter(renominationsPerSecond, renominationBurst),
		wake:      make(chan struct{}, 1),
		cleared:   newClearedQueue(),
	}
}

// stand records that the loop in progress nominated (or found nominated)
// each pod of placements to its planned node. They stand at once: the
// loop goes on after writing them, and kube-scheduler may clear them
// meanwhile.
func (r *renominations) stand(placements []simulator.Placement) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next == nil {
		r.next = make(map[types.UID]string, len(placements))
	}
	if r.standing == nil {
		r.standing = make(map[types.UID]string, len(placements))
	}
	for _, placement := range placements {
		r.next[placement.Pod.UID] = placement.NodeName
		r.standing[placement.Pod.UID] = placement.NodeName
		r.cleared.replan(placement.Pod.UID, placement.NodeName)
	}
}

// loopEnded makes the nominations of the loop that ended the standing
// ones: none when it nominated nothing (no pod waits for a node on its
// way, or the loop only reported, in DryRun mode).
func (r *renominations) loopEnded() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.standing, r.next = r.next, nil
	r.cleared.dropUnless(r.standing)
}

// podUpdated queues the pod for a nomination again when kube-scheduler
// cleared the one the last loop stood by, and the pod still waits.
func (r *renominations) podUpdated(old, pod *snapshot.Pod) {
	if old.NominatedNodeName == "" || pod.NominatedNodeName != "" || pod.NodeName != "" || pod.DeletionTimestamp != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.standing[pod.UID] != old.NominatedNodeName {
		return
	}
	r.cleared.add(pod, old.NominatedNodeName)
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// plannedNode is how soon the node planned for a pod may take pods, which
// tells how soon others may take the pod's room there while its
// nomination is cleared.
type plannedNode int

const (
	// takingPods: kube-scheduler binds pods to it now.
	takingPods plannedNode = iota
	// registered: it is starting; it takes pods within seconds.
	registered
	// onItsWay: it has not registered; no pod can take room on it yet.
	onItsWay
)

// plannedNodeOf reads from the engine's cache how soon node may take
// pods; onItsWay when the cache cannot tell.
func (r *renominations) plannedNodeOf(ctx context.Context, name string) plannedNode {
	node := &corev1.Node{}
	if err := r.cluster.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return onItsWay
	}
	if nodefacts.KubeletReady(node) {
		return takingPods
	}
	return registered
}

// The ranks of the planned nodes are read again in turn, at most
// rereadNodes of them every rereadInterval, the limit's interval: a
// wave's pods may wait for thousands of nodes, and reading them all
// before each write cost more than the writes (issue 51). Up to
// rereadNodes nodes, all are read again once per interval, by the write
// that follows a wait of the limit; beyond, each is read again every
// n/rereadNodes intervals (2.5 s for 25,000 nodes on their way). The
// node of a clearing is read as the clearing comes.
const (
	rereadInterval = time.Second / renominationsPerSecond
	rereadNodes    = 1000
)

// run writes the cleared nominations back until ctx is done: first, in
// the order their clearings were seen, those of pods whose node is
// taking pods, then those whose node registered, then the others.
//
// The write-backs to registered nodes go at once, taking a token of the
// limit when one is left: such a node may take pods within a second,
// and a wave's write-backs held by the limit took up to 1.9 s, long
// enough for the pods of other nodes to take the room of those waiting
// (issue 51). They are few: a node's pods, once per failed attempt. The
// others, nominated to nodes that hold no room for anyone yet, wait for
// the limit, and give their turn to a clearing seen meanwhile.
func (r *renominations) run(ctx context.Context) {
	var written atomic.Int32
	writers := make(chan struct{}, nominationWriters)
	var wg sync.WaitGroup
	defer wg.Wait()
	var reread time.Time
	for {
		rereading := time.Since(reread) >= rereadInterval
		if rereading {
			reread = time.Now()
		}
		r.readPlannedNodes(ctx, rereading)
		uid, planned, ok := r.first()
		if !ok {
			// Not waiting for the writes under way: a slow one would hold
			// the clearings that come meanwhile. They count in the next.
			if n := written.Swap(0); n > 0 {
				klog.FromContext(ctx).V(2).Info("Nominated pods again to the nodes on their way planned for them, which kube-scheduler had cleared", "pods", n)
			}
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		if planned == onItsWay {
			turn := r.waitTurn(ctx)
			if ctx.Err() != nil {
				return
			}
			if !turn {
				continue
			}
		} else {
			r.limiter.Allow()
		}
		pod, node, ok := r.take(uid)
		if !ok {
			continue
		}
		writers <- struct{}{}
		wg.Go(func() {
			defer func() { <-writers }()
			if r.renominate(ctx, pod, node) {
				written.Add(1)
			}
		})
	}
}

// readPlannedNodes reads from the engine's cache how soon the planned
// nodes of the cleared pods may take pods: those that a clearing joined
// since the last read and, when rereading, the next rereadNodes in turn.
// The reads go without the lock, which the pod informer takes.
func (r *renominations) readPlannedNodes(ctx context.Context, rereading bool) {
	r.mu.Lock()
	names := r.cleared.unreadNodes()
	if rereading {
		names = append(names, r.cleared.nextNodes(rereadNodes)...)
	}
	r.mu.Unlock()
	if len(names) == 0 {
		return
	}
	ranks := make([]plannedNode, len(names))
	for i, name := range names {
		ranks[i] = r.plannedNodeOf(ctx, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, name := range names {
		r.cleared.setRank(name, ranks[i])
	}
}

// first finds the cleared pod whose nomination to write back first, and
// how soon its node may take pods.
func (r *renominations) first() (types.UID, plannedNode, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pod, planned, ok := r.cleared.first()
	if !ok {
		return "", 0, false
	}
	return pod.UID, planned, true
}

// waitTurn waits for the limit to let a write-back go, and says whether
// it did: not when ctx is done or a clearing came meanwhile, which may
// go first.
func (r *renominations) waitTurn(ctx context.Context) bool {
	reservation := r.limiter.Reserve()
	delay := reservation.Delay()
	if delay == 0 {
		return true
	}
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
	case <-r.wake:
	}
	reservation.Cancel()
	return false
}

// take removes the cleared pod from the queue, and returns it with its
// node while its nomination still stands: a loop that ended meanwhile
// may have dropped it.
func (r *renominations) take(uid types.UID) (*snapshot.Pod, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cleared.remove(uid)
}

// renominate writes the pod's nomination to node back, on the version of
// the pod that had it cleared or on a fresh one (see write), and says
// whether it did.
func (r *renominations) renominate(ctx context.Context, pod *snapshot.Pod, node string) bool {
	logger := klog.FromContext(ctx)
	wrote, err := r.write(ctx, pod.Namespace, pod.Name, pod.UID, pod.ResourceVersion, node)
	switch {
	case wrote:
		logger.V(4).Info("Nominated a pod again to the node on its way planned for it", "pod", klog.KRef(pod.Namespace, pod.Name), "node", node)
		return true
	case err == nil:
		// Left as it is: see write.
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		// The pod kept changing, or went: the next loop plans it as it is.
		logger.V(4).Info("Did not nominate a pod again to the node planned for it", "pod", klog.KRef(pod.Namespace, pod.Name), "node", node, "err", err)
	default:
		// Forbidden included: the loop's nominations say so, once.
		logger.V(2).Info("Failed to nominate a pod again to the node planned for it", "pod", klog.KRef(pod.Namespace, pod.Name), "node", node, "err", err)
	}
	return false
}

// write nominates the pod to node, on resourceVersion, the version of the
// pod that was read, and says whether it did. kube-scheduler writes a pod
// on each failed attempt (its PodScheduled condition tells why), often
// between that read and the write: then the pod is read again and, while
// it still waits for node (unbound, with no nomination, its nomination
// to node standing), nominated on that version. Else it is left as it is:
// bound, or nominated elsewhere by kube-scheduler, which is its own call.
// Without the fresh read, the nomination was lost until the next loop,
// and its pod, no longer keeping its room, could find it taken when its
// node started (issue 51).
func (r *renominations) write(ctx context.Context, namespace, name string, uid types.UID, resourceVersion, node string) (bool, error) {
	err := nominatePod(ctx, r.clientset, namespace, name, resourceVersion, node)
	if !apierrors.IsConflict(err) {
		return err == nil, err
	}
	logger := klog.FromContext(ctx)
	wrote := false
	err = retry.OnConflict(func() error {
		pod, err := r.clientset.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if why := r.notWaitingFor(pod, uid, node); why != "" {
			logger.V(4).Info("Left a pod's nomination as it is", "pod", klog.KObj(pod), "node", node, "reason", why)
			return nil
		}
		logger.V(4).Info("Nominating a pod on its version read again, which changed since the nomination was planned", "pod", klog.KObj(pod), "node", node)
		err = nominatePod(ctx, r.clientset, namespace, name, pod.ResourceVersion, node)
		wrote = err == nil
		return err
	})
	return wrote, err
}

// notWaitingFor says why pod, read afresh, is not to be nominated to
// node, or "" when it still waits for it.
func (r *renominations) notWaitingFor(pod *corev1.Pod, uid types.UID, node string) string {
	switch {
	case pod.UID != uid:
		return "the pod was created again"
	case pod.Spec.NodeName != "":
		return "the pod is bound"
	case pod.DeletionTimestamp != nil:
		return "the pod is being deleted"
	case pod.Status.NominatedNodeName == node:
		return "the pod is nominated to its node already"
	case pod.Status.NominatedNodeName != "":
		return "kube-scheduler nominated the pod to another node"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.standing[uid] != node {
		return "the pod's nomination to the node no longer stands"
	}
	return ""
}
