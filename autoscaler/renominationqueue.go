package autoscaler

import (
	"container/heap"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// clearedQueue orders the cleared nominations to write back: by how soon
// their planned node may take pods, then in the order their clearings
// were seen. A wave of clearings counts every pending pod (all fail when
// a node registers): finding the next one, taking it and changing a
// node's rank cost O(log n), not a scan of the wave.
//
// Each planned node holds its cleared pods by seen, and the nodes of a
// rank are held by the seen of their first pod: the next clearing is the
// first pod of the first node of the first rank that has one. A node is
// ranked once its rank is read (see renominations.readPlannedNodes).
type clearedQueue struct {
	pods  map[types.UID]*clearing
	nodes map[string]*plannedPods
	ranks [onItsWay + 1]seenHeap[*plannedPods]
	// clearings counts the clearings seen.
	clearings uint64
	// unread are the nodes whose rank is to be read before the next
	// pick: new ones, and those a clearing joined.
	unread []*plannedPods
	// ring holds the nodes in the order their ranks are read again, from
	// next on; it keeps those gone until it comes round.
	ring []*plannedPods
	next int
}

// clearing is a pod whose nomination kube-scheduler cleared, in its last
// version, and when the engine first saw it cleared.
type clearing struct {
	pod  *snapshot.Pod
	seen uint64
	// node holds the pod; index is its place there.
	node  *plannedPods
	index int
}

// plannedPods are the cleared pods planned for a node, and how soon the
// node may take pods, once read.
type plannedPods struct {
	name   string
	pods   seenHeap[*clearing]
	rank   plannedNode
	ranked bool
	// index is the node's place among the nodes of its rank.
	index  int
	unread bool
	// gone: no pod is left, and the queue forgot the node.
	gone bool
}

func newClearedQueue() clearedQueue {
	return clearedQueue{pods: map[types.UID]*clearing{}, nodes: map[string]*plannedPods{}}
}

// add queues the cleared pod for node, or keeps its place when it is
// queued already, in its last version; node's rank is read again.
func (q *clearedQueue) add(pod *snapshot.Pod, node string) {
	queued, ok := q.pods[pod.UID]
	if !ok {
		q.clearings++
		queued = &clearing{seen: q.clearings}
		q.pods[pod.UID] = queued
	}
	queued.pod = pod
	q.plan(queued, node)
	q.toRead(queued.node)
}

// replan moves the queued pod to node, when a loop planned it there, in
// the place its clearing keeps.
func (q *clearedQueue) replan(uid types.UID, node string) {
	if queued, ok := q.pods[uid]; ok {
		q.plan(queued, node)
	}
}

func (q *clearedQueue) plan(queued *clearing, node string) {
	if queued.node != nil {
		if queued.node.name == node {
			return
		}
		q.leave(queued)
	}
	planned, ok := q.nodes[node]
	if !ok {
		planned = &plannedPods{name: node}
		q.nodes[node] = planned
		q.ring = append(q.ring, planned)
		q.toRead(planned)
	}
	queued.node = planned
	heap.Push(&planned.pods, queued)
	if planned.ranked {
		heap.Fix(&q.ranks[planned.rank], planned.index)
	}
}

// remove takes the pod out of the queue, and returns it with its node.
func (q *clearedQueue) remove(uid types.UID) (*snapshot.Pod, string, bool) {
	queued, ok := q.pods[uid]
	if !ok {
		return nil, "", false
	}
	node := queued.node.name
	q.leave(queued)
	delete(q.pods, uid)
	return queued.pod, node, true
}

// leave takes the pod from its node, and forgets the node left without
// pods.
func (q *clearedQueue) leave(queued *clearing) {
	planned := queued.node
	heap.Remove(&planned.pods, queued.index)
	queued.node = nil
	if len(planned.pods) > 0 {
		if planned.ranked {
			heap.Fix(&q.ranks[planned.rank], planned.index)
		}
		return
	}
	if planned.ranked {
		heap.Remove(&q.ranks[planned.rank], planned.index)
	}
	planned.gone = true
	delete(q.nodes, planned.name)
	if len(q.nodes) == 0 {
		clear(q.ring)
		q.ring, q.next = q.ring[:0], 0
	}
}

func (q *clearedQueue) toRead(planned *plannedPods) {
	if !planned.unread {
		planned.unread = true
		q.unread = append(q.unread, planned)
	}
}

// unreadNodes returns the nodes whose rank is to be read, and counts them
// read.
func (q *clearedQueue) unreadNodes() []string {
	names := make([]string, 0, len(q.unread))
	for _, planned := range q.unread {
		planned.unread = false
		if !planned.gone {
			names = append(names, planned.name)
		}
	}
	clear(q.unread)
	q.unread = q.unread[:0]
	return names
}

// nextNodes returns up to n nodes whose rank to read again, in turn: all
// of them when they are no more than n.
func (q *clearedQueue) nextNodes(n int) []string {
	names := make([]string, 0, min(n, len(q.nodes)))
	for len(names) < cap(names) {
		if q.next == len(q.ring) {
			q.ring = slices.DeleteFunc(q.ring, func(planned *plannedPods) bool { return planned.gone })
			q.next = 0
		}
		planned := q.ring[q.next]
		q.next++
		if !planned.gone {
			names = append(names, planned.name)
		}
	}
	return names
}

// setRank tells how soon node may take pods, when the queue holds pods
// for it.
func (q *clearedQueue) setRank(node string, rank plannedNode) {
	planned, ok := q.nodes[node]
	if !ok || planned.ranked && planned.rank == rank {
		return
	}
	if planned.ranked {
		heap.Remove(&q.ranks[planned.rank], planned.index)
	}
	planned.rank, planned.ranked = rank, true
	heap.Push(&q.ranks[rank], planned)
}

// first returns the pod to write back first, and how soon its node may
// take pods.
func (q *clearedQueue) first() (*snapshot.Pod, plannedNode, bool) {
	for rank, nodes := range q.ranks {
		if len(nodes) > 0 {
			return nodes[0].pods[0].pod, plannedNode(rank), true
		}
	}
	return nil, 0, false
}

// dropUnless drops the queued pods that standing does not keep.
func (q *clearedQueue) dropUnless(standing map[types.UID]string) {
	for uid := range q.pods {
		if _, ok := standing[uid]; !ok {
			q.remove(uid)
		}
	}
}

// inSeenHeap is an element of a seenHeap: it knows when the clearing it
// stands for was seen, and its place in the heap, so that it can be fixed
// or removed where it is.
type inSeenHeap interface {
	firstSeen() uint64
	setIndex(int)
}

// seenHeap is a container/heap of clearings, or of nodes by their first
// clearing, oldest first.
type seenHeap[T inSeenHeap] []T

func (h seenHeap[T]) Len() int           { return len(h) }
func (h seenHeap[T]) Less(i, j int) bool { return h[i].firstSeen() < h[j].firstSeen() }
func (h seenHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].setIndex(i)
	h[j].setIndex(j)
}

func (h *seenHeap[T]) Push(x any) {
	element := x.(T)
	element.setIndex(len(*h))
	*h = append(*h, element)
}

func (h *seenHeap[T]) Pop() any {
	old := *h
	element := old[len(old)-1]
	var zero T
	old[len(old)-1] = zero
	*h = old[:len(old)-1]
	return element
}

func (c *clearing) firstSeen() uint64 { return c.seen }
func (c *clearing) setIndex(i int)    { c.index = i }

// A node is among those of its rank by its oldest clearing.
func (p *plannedPods) firstSeen() uint64 { return p.pods[0].seen }
func (p *plannedPods) setIndex(i int)    { p.index = i }
