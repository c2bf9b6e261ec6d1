package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
)

// fakeClusterCache is connected to one cluster, served by reader, with
// the health checking state given.
type fakeClusterCache struct {
	clustercache.ClusterCache
	reader client.Reader
	health clustercache.HealthCheckingState
}

func (c fakeClusterCache) GetReader(context.Context, client.ObjectKey) (client.Reader, error) {
	return c.reader, nil
}

func (c fakeClusterCache) GetHealthCheckingState(context.Context, client.ObjectKey) clustercache.HealthCheckingState {
	return c.health
}

func TestWorkloadReaderRefusesAStaleView(t *testing.T) {
	lastSuccess := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	cluster := client.ObjectKey{Namespace: "ns", Name: "cluster"}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-0"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
	tests := []struct {
		name string
		// health is the ClusterCache's state of its health probes of the cluster.
		health clustercache.HealthCheckingState
		// unreachable says that every read fails as from an unreachable cluster.
		unreachable bool
	}{
		{
			name:   "the last probe succeeded",
			health: clustercache.HealthCheckingState{LastProbeTime: lastSuccess, LastProbeSuccessTime: lastSuccess},
		},
		{
			name:        "the last probe failed, the cache is still connected",
			health:      clustercache.HealthCheckingState{LastProbeTime: lastSuccess.Add(10 * time.Second), LastProbeSuccessTime: lastSuccess, ConsecutiveFailures: 1},
			unreachable: true,
		},
		{
			name:        "every probe failed but not enough to disconnect",
			health:      clustercache.HealthCheckingState{LastProbeTime: lastSuccess.Add(40 * time.Second), LastProbeSuccessTime: lastSuccess, ConsecutiveFailures: 4},
			unreachable: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			cache := fakeClusterCache{reader: fake.NewClientBuilder().WithObjects(node.DeepCopy()).Build(), health: tt.health}
			reader := newWorkloadReader(cache, cluster, client.ObjectKey{Namespace: "ns", Name: "ca"})
			reader.informer = syncedPodInformer(t, pod)

			nodes := &corev1.NodeList{}
			listErr := reader.List(ctx, nodes)
			getErr := reader.Get(ctx, client.ObjectKeyFromObject(node), &corev1.Node{})
			pods, podsErr := reader.ListPods(ctx)
			if !tt.unreachable {
				g.Expect(listErr).NotTo(HaveOccurred())
				g.Expect(nodes.Items).To(HaveLen(1))
				g.Expect(getErr).NotTo(HaveOccurred())
				g.Expect(podsErr).NotTo(HaveOccurred())
				g.Expect(pods).To(ConsistOf(HaveField("Name", pod.Name)))
				return
			}
			for _, err := range []error{listErr, getErr, podsErr} {
				g.Expect(err).To(MatchError(errHealthProbeFailing))
				g.Expect(isWorkloadClusterUnreachable(err)).To(BeTrue())
				// The same message for the whole outage: the status is
				// not patched at every loop.
				g.Expect(err.Error()).To(ContainSubstring("last success: 2026-03-01T10:00:00Z"))
			}
		})
	}
}

func TestAPanickingTransformKeepsThePodAsReadForTheLoopToRefuse(t *testing.T) {
	g := NewWithT(t)
	transformer := trim.NewTransformer()
	transform := recoverTransform(func(obj any) (any, error) {
		if pod, ok := obj.(*corev1.Pod); ok && pod.Name == "web-1" {
			panic("a bug in the transform")
		}
		return transformer.Transform(obj)
	})
	good := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-0"}}
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-1"}}
	reader := newWorkloadReader(fakeClusterCache{reader: fake.NewClientBuilder().Build()}, client.ObjectKey{Namespace: "ns", Name: "cluster"}, client.ObjectKey{Namespace: "ns", Name: "ca"})
	reader.informer = syncedPodInformerWith(t, transform, good, bad)

	_, err := reader.ListPods(t.Context())

	g.Expect(err).To(MatchError(ContainSubstring("pod default/web-1 could not be converted for the cache (the conversion panicked")))
}

func TestTheTransformsOfWorkloadCachesRecoverFromPanics(t *testing.T) {
	options := WorkloadCacheOptions()
	transforms := map[string]toolscache.TransformFunc{"default": options.DefaultTransform}
	for obj, byObject := range options.ByObject {
		transforms[fmt.Sprintf("%T", obj)] = byObject.Transform
	}
	for name, transform := range transforms {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			// The transforms panic on the nil object of each kind.
			for _, obj := range []any{(*corev1.Pod)(nil), (*corev1.Node)(nil), (*metav1.PartialObjectMetadata)(nil), (*corev1.ConfigMap)(nil)} {
				var out any
				var err error
				g.Expect(func() { out, err = transform(obj) }).NotTo(Panic())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(out).To(BeIdenticalTo(obj), "as read")
			}
		})
	}
}

// syncedPodInformer is a synced pod informer of a cluster that holds pods,
// with the transform of the workload clusters' caches.
func syncedPodInformer(t *testing.T, pods ...*corev1.Pod) toolscache.SharedIndexInformer {
	t.Helper()
	return syncedPodInformerWith(t, trim.NewTransformer().Transform, pods...)
}

// syncedPodInformerWith is a synced pod informer of a cluster that holds
// pods, with transform.
func syncedPodInformerWith(t *testing.T, transform toolscache.TransformFunc, pods ...*corev1.Pod) toolscache.SharedIndexInformer {
	t.Helper()
	objects := make([]runtime.Object, len(pods))
	for i, pod := range pods {
		objects[i] = pod.DeepCopy()
	}
	informer := informers.NewSharedInformerFactory(kubefake.NewClientset(objects...), 0).Core().V1().Pods().Informer()
	if err := informer.SetTransform(transform); err != nil {
		t.Fatal(err)
	}
	go informer.RunWithContext(t.Context())
	if !toolscache.WaitForCacheSync(t.Context().Done(), informer.HasSynced) {
		t.Fatal("the pod informer did not sync")
	}
	return informer
}
