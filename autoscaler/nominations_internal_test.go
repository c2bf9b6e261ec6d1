package autoscaler

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// cachedNodes is the engine's cache of nodes at its cheapest: a map read
// under a lock, so that what the renominations do around their reads
// shows. A node missing from it has not registered.
type cachedNodes struct {
	mu    sync.Mutex
	nodes map[string]*corev1.Node
	reads int
}

func (c *cachedNodes) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	node, ok := c.nodes[key.Name]
	if !ok {
		return apierrors.NewNotFound(corev1.Resource("nodes"), key.Name)
	}
	*obj.(*corev1.Node) = *node
	return nil
}

func (c *cachedNodes) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("the renominations list no nodes")
}

// plan sets how soon node may take pods: not registered, registered, or
// taking pods.
func (c *cachedNodes) plan(name string, planned plannedNode) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch planned {
	case onItsWay:
		delete(c.nodes, name)
	case registered:
		c.nodes[name] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
		}
	case takingPods:
		c.nodes[name] = &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
		}
	}
}

// clearedWave is a wave of clearings: every pending pod, planned ten to a
// node, fails when a node registers. One planned node in a hundred takes
// pods and one is registered; the others are on their way.
type clearedWave struct {
	placements         []simulator.Placement
	nominated, cleared []*snapshot.Pod
	nodes              *cachedNodes
}

func newClearedWave(pods int) *clearedWave {
	w := &clearedWave{nodes: &cachedNodes{nodes: map[string]*corev1.Node{}}}
	nodes := max(pods/10, 1)
	for i := range nodes {
		switch i % 100 {
		case 0:
			w.nodes.plan(plannedNodeName(i), takingPods)
		case 1:
			w.nodes.plan(plannedNodeName(i), registered)
		}
	}
	for i := range pods {
		node := i % nodes
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: "pod-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i)), ResourceVersion: "1",
		}}
		w.placements = append(w.placements, simulator.Placement{Pod: pod, NodeName: plannedNodeName(node)})
		nominated := snapshot.NewPod(pod)
		nominated.NominatedNodeName = plannedNodeName(node)
		w.nominated = append(w.nominated, nominated)
		cleared := snapshot.NewPod(pod)
		cleared.ResourceVersion = "2"
		w.cleared = append(w.cleared, cleared)
	}
	return w
}

func plannedNodeName(i int) string {
	return "planned-" + strconv.Itoa(i)
}

// renominateWave has the renominations stand by the wave's nominations,
// hear of their clearings and write them all back, with no limit on the
// rate and writes that cost next to nothing.
func renominateWave(b *testing.B, w *clearedWave) {
	clientset := kubefake.NewClientset()
	var written atomic.Int64
	done := make(chan struct{})
	clientset.PrependReactor("patch", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		if written.Add(1) == int64(len(w.cleared)) {
			close(done)
		}
		return true, &corev1.Pod{}, nil
	})
	r := newRenominations(clientset, w.nodes)
	r.limiter = rate.NewLimiter(rate.Inf, 0)
	r.stand(w.placements)
	r.loopEnded()
	for i := range w.cleared {
		r.podUpdated(w.nominated[i], w.cleared[i])
	}
	ctx, cancel := context.WithCancel(b.Context())
	var running sync.WaitGroup
	running.Go(func() { r.run(ctx) })
	<-done
	cancel()
	running.Wait()
}

func BenchmarkRenominationsOfAWave(b *testing.B) {
	for _, pods := range []int{1000, 10000, 50000} {
		b.Run(strconv.Itoa(pods)+"-pods", func(b *testing.B) {
			w := newClearedWave(pods)
			b.ReportAllocs()
			for b.Loop() {
				renominateWave(b, w)
			}
			b.ReportMetric(float64(w.nodes.reads)/float64(b.N)/float64(pods), "node-reads/pod")
		})
	}
}

// The cleared nominations are written back in the order of a plain
// reference: at each write, the pods whose node takes pods, then those
// whose node registered, then the others, each in the order their
// clearings were seen, by the nodes' ranks read at that write. Over a
// random mix of clearings, clearings again, loops that plan pods for
// other nodes and drop others, and nodes that register, start or go.
func TestRenominationsKeepTheirOrderAsPlannedNodesChange(t *testing.T) {
	const pods, nodes, steps = 300, 30, 20000
	random := rand.New(rand.NewPCG(51, 51))
	cache := &cachedNodes{nodes: map[string]*corev1.Node{}}
	r := newRenominations(kubefake.NewClientset(), cache)
	ctx := t.Context()

	// The reference: the nominations that stand, the rank of each node,
	// and when each queued pod's clearing was seen.
	standing, next := map[types.UID]string{}, map[types.UID]string{}
	ranks := map[string]plannedNode{}
	seen := map[types.UID]int{}
	clearings := 0
	podOf := func(i int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pod-" + strconv.Itoa(i), UID: types.UID("uid-" + strconv.Itoa(i))}}
	}
	rankOf := func(node string) plannedNode {
		if rank, ok := ranks[node]; ok {
			return rank
		}
		return onItsWay
	}
	loop := func() {
		var placements []simulator.Placement
		for i := range pods {
			if random.IntN(3) > 0 {
				node := plannedNodeName(random.IntN(nodes))
				placements = append(placements, simulator.Placement{Pod: podOf(i), NodeName: node})
				next[podOf(i).UID], standing[podOf(i).UID] = node, node
			}
		}
		r.stand(placements)
	}
	loopEnds := func() {
		r.loopEnded()
		standing, next = next, map[types.UID]string{}
		for uid := range seen {
			if _, ok := standing[uid]; !ok {
				delete(seen, uid)
			}
		}
	}
	reordered, written := 0, 0
	write := func() {
		want, oldest := types.UID(""), types.UID("")
		for uid := range seen {
			if want == "" || rankOf(standing[uid]) < rankOf(standing[want]) ||
				rankOf(standing[uid]) == rankOf(standing[want]) && seen[uid] < seen[want] {
				want = uid
			}
			if oldest == "" || seen[uid] < seen[oldest] {
				oldest = uid
			}
		}
		r.readPlannedNodes(ctx, true)
		uid, planned, ok := r.first()
		if !ok {
			if want != "" {
				t.Fatalf("after %d writes, none is queued, want %s", written, want)
			}
			return
		}
		if uid != want || planned != rankOf(standing[want]) {
			t.Fatalf("after %d writes, %s (%d) goes first, want %s (%d)", written, uid, planned, want, rankOf(standing[want]))
		}
		pod, node, ok := r.take(uid)
		if !ok || pod.UID != uid || node != standing[uid] {
			t.Fatalf("took %v to %q (%v), want %s to %q", pod, node, ok, uid, standing[uid])
		}
		if uid != oldest {
			reordered++
		}
		delete(seen, uid)
		written++
	}

	loop()
	loopEnds()
	for range steps {
		switch step := random.IntN(100); {
		case step < 45:
			i := random.IntN(pods)
			uid := podOf(i).UID
			node, ok := standing[uid]
			if !ok {
				continue
			}
			nominated, cleared := snapshot.NewPod(podOf(i)), snapshot.NewPod(podOf(i))
			nominated.NominatedNodeName = node
			r.podUpdated(nominated, cleared)
			if _, ok := seen[uid]; !ok {
				clearings++
				seen[uid] = clearings
			}
		case step < 60:
			node := plannedNodeName(random.IntN(nodes))
			rank := plannedNode(random.IntN(int(onItsWay) + 1))
			cache.plan(node, rank)
			ranks[node] = rank
		case step < 62:
			loop()
		case step < 64:
			loopEnds()
		default:
			write()
		}
	}
	for len(seen) > 0 {
		write()
	}
	if reordered == 0 || written < pods {
		t.Fatalf("%d writes, %d of them before an older clearing: the mix did not exercise the ranks", written, reordered)
	}
	t.Logf("%d writes, %d of them before an older clearing", written, reordered)
}

// A wave may wait for more nodes than a reread reads: each is read again
// in turn, so that the pods of a node that registers go first within as
// many rereads as it takes to come round, and no reread reads them all.
func TestRenominationsReadTheirPlannedNodesInTurn(t *testing.T) {
	w := newClearedWave(25000)
	clear(w.nodes.nodes)
	r := newRenominations(kubefake.NewClientset(), w.nodes)
	r.stand(w.placements)
	r.loopEnded()
	for i := range w.cleared {
		r.podUpdated(w.nominated[i], w.cleared[i])
	}
	r.readPlannedNodes(t.Context(), true)
	nodes := 2500
	starting := plannedNodeName(nodes - 1)
	w.nodes.plan(starting, registered)

	for rereads := 1; rereads <= (nodes+rereadNodes-1)/rereadNodes; rereads++ {
		reads := w.nodes.reads
		r.readPlannedNodes(t.Context(), true)
		if read := w.nodes.reads - reads; read > rereadNodes {
			t.Fatalf("reread %d read %d nodes, more than %d", rereads, read, rereadNodes)
		}
		if uid, planned, _ := r.first(); planned == registered {
			if want := w.placements[nodes-1].Pod.UID; uid != want {
				t.Fatalf("%s goes first, want %s, the first pod of %s", uid, want, starting)
			}
			return
		}
	}
	t.Fatalf("%s registered, and its pods still wait their turn after every node was read again", starting)
}
