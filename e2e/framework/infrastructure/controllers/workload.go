package controllers

import (
	"context"
	"sync"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The rate of a workload client: that of the local stack's own clients.
const (
	workloadQPS   = 100
	workloadBurst = 200
)

// WorkloadClients hands out clients of workload clusters, built from their
// kubeconfig Secrets the way Cluster API reaches them.
type WorkloadClients struct {
	mu      sync.Mutex
	clients map[client.ObjectKey]workloadClient
}

type workloadClient struct {
	secretVersion string
	clientset     kubernetes.Interface
}

// NewWorkloadClients returns an empty client cache.
func NewWorkloadClients() *WorkloadClients {
	return &WorkloadClients{clients: map[client.ObjectKey]workloadClient{}}
}

// Get returns a client of the Cluster's workload API server, rebuilt when its
// kubeconfig Secret changes.
func (w *WorkloadClients) Get(ctx context.Context, c client.Reader, cluster *clusterv1.Cluster) (kubernetes.Interface, error) {
	key := client.ObjectKeyFromObject(cluster)
	s, err := secret.GetFromNamespacedName(ctx, c, key, secret.Kubeconfig)
	if err != nil {
		return nil, err
	}

	w.mu.Lock()
	defer w.mu.Unlock()
	if cached, ok := w.clients[key]; ok && cached.secretVersion == s.ResourceVersion {
		return cached.clientset, nil
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[secret.KubeconfigDataName])
	if err != nil {
		return nil, err
	}
	// Each kubelet registers its own Node: the client of all of them must
	// not queue a burst's registrations behind client-go's 5 per second.
	cfg.QPS, cfg.Burst = workloadQPS, workloadBurst
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	w.clients[key] = workloadClient{secretVersion: s.ResourceVersion, clientset: clientset}
	return clientset, nil
}
