package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
)

// WorkloadCacheOptions are the options of the caches the ClusterCache keeps
// per workload cluster. The engine only reads Nodes, Pods, DaemonSets,
// PodDisruptionBudgets and Namespaces, and informers start on first read, so
// nothing else is cached. Managed fields are dropped from every object;
// Pods, the bulk of the cache, and Nodes are trimmed to what the engine
// reads, and the pods of one workload share their common parts.
func WorkloadCacheOptions() clustercache.CacheOptions {
	transformer := trim.NewTransformer()
	return clustercache.CacheOptions{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:  {Transform: transformer.Transform},
			&corev1.Node{}: {Transform: transformer.Transform},
		},
	}
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
