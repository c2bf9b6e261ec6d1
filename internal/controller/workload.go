package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
)

// WorkloadCacheOptions are the options of the caches the ClusterCache keeps
// per workload cluster. The engine only reads Nodes, Pods, DaemonSets,
// PodDisruptionBudgets, Namespaces, the storage objects of volumes
// (claims, persistent volumes, storage classes, CSINodes), the DRA objects
// (ResourceSlices, DeviceClasses, ResourceClaims, ResourceClaimTemplates)
// and the metadata
// of the controllers of scaledown.ReplicatingControllers, and informers
// start on first read, so nothing else is cached. Managed fields are
// dropped from every object; Nodes are trimmed to what the engine reads,
// the controllers to their names and UIDs. Pods, the bulk of the cache,
// are kept as snapshot.Pods (see trim), which only the pod informer's store
// and handlers can read: client.Reader cannot Get or List them. Pods that
// have finished (completed Jobs) hold no resources and are not cached.
func WorkloadCacheOptions() clustercache.CacheOptions {
	// A panic of a transform must not end the process (recoverTransform).
	transform := recoverTransform(trim.NewTransformer().Transform)
	byObject := map[client.Object]cache.ByObject{
		&corev1.Pod{}: {
			Field:     unfinishedPods,
			Transform: transform,
		},
		&corev1.Node{}: {Transform: transform},
	}
	for _, kind := range scaledown.ReplicatingControllers {
		controller := &metav1.PartialObjectMetadata{}
		controller.SetGroupVersionKind(kind)
		byObject[controller] = cache.ByObject{Transform: transform}
	}
	return clustercache.CacheOptions{
		DefaultTransform: recoverTransform(cache.TransformStripManagedFields()),
		ByObject:         byObject,
	}
}

// unfinishedPods selects the pods that neither succeeded nor failed.
var unfinishedPods = fields.AndSelectors(
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
	fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)),
)

// errHealthProbeFailing: the ClusterCache is still connected to the
// workload cluster, but its last health probe failed. Its caches may hold
// what the cluster looked like before it became unreachable.
var errHealthProbeFailing = errors.New("the health probe of the workload cluster is failing")

// isWorkloadClusterUnreachable tells the errors of reads from a workload
// cluster that cannot be reached.
func isWorkloadClusterUnreachable(err error) bool {
	return errors.Is(err, clustercache.ErrClusterNotConnected) || errors.Is(err, errHealthProbeFailing)
}

// workloadReader is the engine's reader of one workload cluster. Every read
// asks the ClusterCache for the cluster's current client, so that while the
// cluster is disconnected reads fail with clustercache.ErrClusterNotConnected
// instead of returning what a stopped cache last saw, and after a reconnect
// they use the new cache.
//
// The ClusterCache disconnects only after five failed health probes, 10 s
// apart; until then its informers keep serving what they last saw. Reads
// fail as soon as the last probe failed, so that the engine does not scale
// on a view it cannot refresh: it would, for instance, add nodes for pods
// that may have been scheduled or deleted since.
//
// Pods are listed straight from the cache's pod informer, without copies:
// it holds snapshot.Pods, which List cannot read. The informer is handed
// over by a ClusterCache watch (see watcher), registered again with every
// connection.
type workloadReader struct {
	clusterCache clustercache.ClusterCache
	cluster      client.ObjectKey
	// name tells this reader's watch apart from other readers' of the
	// cluster, including earlier readers of the same ClusterAutoscaler whose
	// watches the connection still has.
	name string

	mu       sync.Mutex
	informer toolscache.SharedIndexInformer
}

var (
	_ client.Reader        = &workloadReader{}
	_ autoscaler.PodLister = &workloadReader{}
)

func (r *workloadReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	reader, err := r.reader(ctx)
	if err != nil {
		return err
	}
	return reader.Get(ctx, key, obj, opts...)
}

func (r *workloadReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	reader, err := r.reader(ctx)
	if err != nil {
		return err
	}
	return reader.List(ctx, list, opts...)
}

// reader is the cached reader of the current connection, while the last
// health probe of the cluster succeeded.
func (r *workloadReader) reader(ctx context.Context) (client.Reader, error) {
	if state := r.clusterCache.GetHealthCheckingState(ctx, r.cluster); state.ConsecutiveFailures > 0 {
		// The time of the last success, not the count of failures: the
		// message stays the same while the cluster is unreachable, and so
		// does the status that shows it.
		return nil, fmt.Errorf("%w (last success: %s)", errHealthProbeFailing, state.LastProbeSuccessTime.UTC().Format(time.RFC3339))
	}
	return r.clusterCache.GetReader(ctx, r.cluster)
}

// ListPods lists the cached pods without copying them. Until the informer
// of the current connection has been handed over and has synced, it waits.
func (r *workloadReader) ListPods(ctx context.Context) ([]*snapshot.Pod, error) {
	if _, err := r.reader(ctx); err != nil {
		return nil, err
	}
	var informer toolscache.SharedIndexInformer
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		r.mu.Lock()
		informer = r.informer
		r.mu.Unlock()
		return informer != nil && !informer.IsStopped() && informer.HasSynced(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the pod informer to sync: %w", err)
	}
	objects := informer.GetStore().List()
	pods := make([]*snapshot.Pod, 0, len(objects))
	for _, obj := range objects {
		pod, ok := obj.(*snapshot.Pod)
		if !ok {
			// Left as read by a transform that panicked (recoverTransform):
			// a loop without it would plan as if it did not run.
			key, _ := toolscache.MetaNamespaceKeyFunc(obj)
			return nil, fmt.Errorf("pod %s could not be converted for the cache (the conversion panicked: see the manager's log); nothing is scaled while it is there", key)
		}
		pods = append(pods, pod)
	}
	return pods, nil
}

// readers numbers the workload readers, to name their watches.
var readers atomic.Uint64

func newWorkloadReader(clusterCache clustercache.ClusterCache, cluster client.ObjectKey, owner client.ObjectKey) *workloadReader {
	return &workloadReader{clusterCache: clusterCache, cluster: cluster, name: fmt.Sprintf("%s-%d", owner, readers.Add(1))}
}

// watcher hands the pod informer of a new connection over to the reader.
func (r *workloadReader) watcher() clustercache.Watcher {
	return podInformerWatcher{name: "clusterautoscaler-pod-lister-" + r.name, watch: func(informer cache.Informer) error {
		shared, ok := informer.(toolscache.SharedIndexInformer)
		if !ok {
			return fmt.Errorf("the pod informer of cluster %s is a %T, not a SharedIndexInformer", r.cluster, informer)
		}
		r.mu.Lock()
		r.informer = shared
		r.mu.Unlock()
		return nil
	}}
}

// podInformerWatcher passes the pod informer of each connection to watch.
// The informer's objects are snapshot.Pods, which the typed watches of
// controller-runtime cannot handle.
type podInformerWatcher struct {
	name  string
	watch func(cache.Informer) error
}

func (w podInformerWatcher) Name() string          { return w.name }
func (w podInformerWatcher) Object() client.Object { return &corev1.Pod{} }

func (w podInformerWatcher) Watch(c cache.Cache) error {
	informer, err := c.GetInformer(context.Background(), &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return w.watch(informer)
}
