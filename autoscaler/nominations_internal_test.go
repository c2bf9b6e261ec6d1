package autoscaler

import (
	"context"
	"errors"
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
