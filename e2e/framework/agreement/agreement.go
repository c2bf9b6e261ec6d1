// Package agreement measures how far the simulator's idea of where a pod
// fits is from kube-scheduler's. For a generated cluster it starts a bare
// API server and a kube-scheduler of its own whose filter extender, served
// here, records the nodes that passed every in-tree filter and turns them
// all away, so that no pod is bound and every pending pod is judged against
// the same cluster. The simulator then checks every pending pod against
// every node of the same objects, read back from the API server, and the
// two feasible sets are compared node by node.
package agreement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/clustergen"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// Options configure one comparison.
type Options struct {
	Stack *localstack.Stack
	// Name names the API server of the comparison; it must be free in the
	// stack's work directory.
	Name string
	// KubeScheduler is the kube-scheduler binary.
	KubeScheduler string
	// Cluster is what to generate.
	Cluster clustergen.Options
	// BatchSize is how many pending pods are created, judged and deleted
	// at a time (default 1000).
	BatchSize int
	// Log receives progress and every disagreement.
	Log io.Writer
}

// Result is the outcome of a comparison.
type Result struct {
	Seed               uint64
	Pods, Nodes, Pairs int
	// FeasiblePairs are the pod-node pairs kube-scheduler found feasible.
	FeasiblePairs int
	// ClaimPods, ClaimPairs and FeasibleClaimPairs count the same for the
	// pods with resource claims only.
	ClaimPods, ClaimPairs, FeasibleClaimPairs int

	Disagreements []Disagreement
	// SchedulerTime is the time kube-scheduler took to judge the pods,
	// SimulatorTime the simulator's, Total the comparison's, setup
	// included.
	SchedulerTime, SimulatorTime, Total time.Duration
}

// Unexplained are the disagreements no known difference explains.
func (r *Result) Unexplained() []Disagreement {
	return slices.DeleteFunc(slices.Clone(r.Disagreements), func(d Disagreement) bool { return d.Known != nil })
}

// ClaimDisagreements are the disagreements on pods with resource claims.
func (r *Result) ClaimDisagreements() []Disagreement {
	return slices.DeleteFunc(slices.Clone(r.Disagreements), func(d Disagreement) bool { return !hasClaims(d.Pod) })
}

// Summary is one line of figures.
func (r *Result) Summary() string {
	return fmt.Sprintf("seed %d: %d pods x %d nodes = %d pairs (%d feasible for kube-scheduler), "+
		"with resource claims %d pods, %d pairs (%d feasible); %d disagreements (%d unexplained, %d with claims); "+
		"kube-scheduler %s, simulator %s, total %s",
		r.Seed, r.Pods, r.Nodes, r.Pairs, r.FeasiblePairs,
		r.ClaimPods, r.ClaimPairs, r.FeasibleClaimPairs, len(r.Disagreements), len(r.Unexplained()), len(r.ClaimDisagreements()),
		r.SchedulerTime.Round(time.Millisecond), r.SimulatorTime.Round(time.Millisecond), r.Total.Round(time.Millisecond))
}

func hasClaims(pod *corev1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// Run generates a cluster and compares kube-scheduler and the simulator
// on it.
func Run(ctx context.Context, opts Options) (_ *Result, retErr error) {
	started := time.Now()
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1000
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	cluster, err := opts.Stack.StartAPIServer(ctx, opts.Name)
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, opts.Stack.StopAPIServer(cluster)) }()
	cfg := rest.CopyConfig(cluster.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	c, err := client.New(cfg, client.Options{Scheme: localstack.Scheme})
	if err != nil {
		return nil, err
	}

	gen := clustergen.Generate(opts.Cluster)
	if err := populate(ctx, c, gen); err != nil {
		return nil, err
	}
	ext, err := startExtender()
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, ext.stop()) }()
	// Started once the cluster is there: it syncs its informers before it
	// schedules, so it sees all of it.
	scheduler, err := startScheduler(ctx, opts.Stack, opts.KubeScheduler, filepath.Join(opts.Stack.WorkDir, opts.Name), cluster, ext.url())
	if err != nil {
		return nil, err
	}
	defer func() { retErr = errors.Join(retErr, scheduler.Stop()) }()

	sim, nodes, err := newSimulator(ctx, c)
	if err != nil {
		return nil, err
	}
	result := &Result{Seed: opts.Cluster.Seed, Pods: len(gen.PendingPods), Nodes: len(nodes)}
	compared := 0
	for batch := range slices.Chunk(gen.PendingPods, opts.BatchSize) {
		judgeStarted := time.Now()
		pods, err := judge(ctx, c, batch)
		if err != nil {
			return nil, err
		}
		result.SchedulerTime += time.Since(judgeStarted)
		compareStarted := time.Now()
		for _, pod := range pods {
			compare(result, sim, nodes, pod, ext)
		}
		result.SimulatorTime += time.Since(compareStarted)
		if err := forEach(ctx, pods, func(ctx context.Context, pod *corev1.Pod) error {
			return client.IgnoreNotFound(c.Delete(ctx, pod))
		}); err != nil {
			return nil, err
		}
		compared += len(pods)
		fmt.Fprintf(opts.Log, "agreement %s: %d of %d pods compared\n", opts.Name, compared, result.Pods)
	}
	for _, d := range result.Disagreements {
		fmt.Fprintln(opts.Log, d.String())
	}
	result.Total = time.Since(started)
	return result, nil
}

// newSimulator builds a snapshot of the cluster as the engine would, from
// the objects read back from the API server, and returns a scheduler on it
// with the node names.
func newSimulator(ctx context.Context, c client.Client) (*simulator.Scheduler, []string, error) {
	var (
		nodes          corev1.NodeList
		pods           corev1.PodList
		namespaces     corev1.NamespaceList
		volumeClaims   corev1.PersistentVolumeClaimList
		volumes        corev1.PersistentVolumeList
		storageClasses storagev1.StorageClassList
		csiNodes       storagev1.CSINodeList
		resourceSlices resourceapi.ResourceSliceList
		deviceClasses  resourceapi.DeviceClassList
		resourceClaims resourceapi.ResourceClaimList
		claimTemplates resourceapi.ResourceClaimTemplateList
	)
	for _, list := range []client.ObjectList{
		&nodes, &pods, &namespaces, &volumeClaims, &volumes, &storageClasses, &csiNodes,
		&resourceSlices, &deviceClasses, &resourceClaims, &claimTemplates,
	} {
		if err := c.List(ctx, list); err != nil {
			return nil, nil, fmt.Errorf("listing %T: %w", list, err)
		}
	}
	snap := snapshot.New(snapshot.Input{
		Nodes:                  pointers(nodes.Items),
		Pods:                   pointers(pods.Items),
		Namespaces:             pointers(namespaces.Items),
		PersistentVolumeClaims: pointers(volumeClaims.Items),
		PersistentVolumes:      pointers(volumes.Items),
		StorageClasses:         pointers(storageClasses.Items),
		CSINodes:               pointers(csiNodes.Items),
		ResourceSlices:         pointers(resourceSlices.Items),
		DeviceClasses:          pointers(deviceClasses.Items),
		ResourceClaims:         pointers(resourceClaims.Items),
		ResourceClaimTemplates: pointers(claimTemplates.Items),
	})
	names := make([]string, 0, len(nodes.Items))
	for _, node := range snap.NodeInfos() {
		names = append(names, node.Name())
	}
	return simulator.NewScheduler(ctx, snap), names, nil
}

func pointers[T any](items []T) []*T {
	out := make([]*T, len(items))
	for i := range items {
		out[i] = &items[i]
	}
	return out
}
