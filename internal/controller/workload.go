package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WorkloadCacheOptions are the options of the caches the ClusterCache keeps
// per workload cluster. The engine only reads Nodes, Pods, DaemonSets,
// PodDisruptionBudgets and Namespaces, and informers start on first read, so
// nothing else is cached; managed fields are dropped from every object, and
// container statuses, which the engine never reads, from Pods.
func WorkloadCacheOptions() clustercache.CacheOptions {
	return clustercache.CacheOptions{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Transform: trimPod},
		},
	}
}

// trimPod drops what the engine never reads from a cached Pod: managed
// fields and container statuses (requests come from the spec; restarts,
// images and states do not matter to scheduling).
func trimPod(in any) (any, error) {
	pod, ok := in.(*corev1.Pod)
	if !ok {
		return in, nil
	}
	pod.ManagedFields = nil
	pod.Status.ContainerStatuses = nil
	pod.Status.InitContainerStatuses = nil
	pod.Status.EphemeralContainerStatuses = nil
	return pod, nil
}

// workloadReader is the engine's reader of one workload cluster. Every read
// asks the ClusterCache for the cluster's current client, so that while the
// cluster is disconnected reads fail with clustercache.ErrClusterNotConnected
// instead of returning what a stopped cache last saw, and after a reconnect
// they use the new cache.
type workloadReader struct {
	clusterCache clustercache.ClusterCache
	cluster      client.ObjectKey
}

var _ client.Reader = &workloadReader{}

func (r *workloadReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	reader, err := r.clusterCache.GetReader(ctx, r.cluster)
	if err != nil {
		return err
	}
	return reader.Get(ctx, key, obj, opts...)
}

func (r *workloadReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	reader, err := r.clusterCache.GetReader(ctx, r.cluster)
	if err != nil {
		return err
	}
	return reader.List(ctx, list, opts...)
}
