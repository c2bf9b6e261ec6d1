package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

const (
	benchPodsPerNode  = 30
	benchPodsPerOwner = 50
)

// benchCluster is the cluster as the controller's cache serves it: List
// copies the Node structs and the ReplicaSets' metadata (not what they
// point to) into the list, as a cache read with UnsafeDisableDeepCopy
// does, and ListPods returns the cached pods themselves, so that the
// engine reuses the pods it parsed in the previous loop, as it does in the
// manager.
type benchCluster struct {
	nodes       []*corev1.Node
	pods        []*snapshot.Pod
	replicaSets []metav1.PartialObjectMetadata
	// The DRA objects, of withIdleClaims.
	resourceSlices []resourcev1.ResourceSlice
	deviceClasses  []resourcev1.DeviceClass
	resourceClaims []resourcev1.ResourceClaim
	// resourceClaimTemplates are those the pending pods of a shape claim
	// from (upstream_shapes_test.go).
	resourceClaimTemplates []resourcev1.ResourceClaimTemplate
}

var (
	_ client.Reader        = &benchCluster{}
	_ autoscaler.PodLister = &benchCluster{}
)

func (c *benchCluster) Get(_ context.Context, key client.ObjectKey, _ client.Object, _ ...client.GetOption) error {
	return apierrors.NewNotFound(schema.GroupResource{}, key.Name)
}

func (c *benchCluster) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch list := list.(type) {
	case *corev1.NodeList:
		list.Items = make([]corev1.Node, len(c.nodes))
		for i, node := range c.nodes {
			list.Items[i] = *node
		}
	case *metav1.PartialObjectMetadataList:
		if list.GroupVersionKind() == appsv1.SchemeGroupVersion.WithKind("ReplicaSetList") {
			list.Items = c.replicaSets
		}
	case *resourcev1.ResourceSliceList:
		list.Items = c.resourceSlices
	case *resourcev1.DeviceClassList:
		list.Items = c.deviceClasses
	case *resourcev1.ResourceClaimList:
		list.Items = c.resourceClaims
	case *resourcev1.ResourceClaimTemplateList:
		list.Items = c.resourceClaimTemplates
	case *corev1.PodList, *appsv1.DaemonSetList, *policyv1.PodDisruptionBudgetList, *corev1.NamespaceList,
		*corev1.PersistentVolumeClaimList, *corev1.PersistentVolumeList, *storagev1.StorageClassList, *storagev1.CSINodeList:
		// Pods come through ListPods; the others are empty.
	default:
		return fmt.Errorf("unexpected list %T", list)
	}
	return nil
}

func (c *benchCluster) ListPods(context.Context) ([]*snapshot.Pod, error) { return c.pods, nil }

// idleCluster has nodes 16-core nodes spread over groups node groups
// (three zones, five pools), a DaemonSet pod on each node and 30 pods per
// node on average, owned by ReplicaSets of 50, and no pending pod. With
// underutilized, one node in five runs 9 pods of 200m/512Mi (12% of its
// cpu), the others 34 pods of 300m/1Gi (66%), as in the scale-down
// benchmark: the loop finds those nodes unneeded, but removes none within
// unneededTime. Without, every node runs 30 pods of 300m/1Gi (58%), and
// nothing is unneeded.
func idleCluster(nodes, groups int, underutilized bool) (*benchCluster, *fakeProvider) {
	cluster := &benchCluster{}
	provider := &fakeProvider{}
	// The cache holds pods as the manager's transform makes them.
	cache := trim.NewTransformer()
	for i := range groups {
		template := st.Node(fmt.Sprintf("md-%02d", i), "16", "64Gi",
			st.WithNodeLabels(corev1.LabelTopologyZone, fmt.Sprintf("zone-%d", i%3), "pool", fmt.Sprintf("pool-%d", i%5)))
		provider.groups = append(provider.groups, &fakeGroup{id: fmt.Sprintf("MachineDeployment/default/md-%02d", i), max: nodes, template: template})
	}
	pods := 0
	addPods := func(nodeName string, n int, cpu, memory string) {
		for range n {
			owner := fmt.Sprintf("app-%d", pods/benchPodsPerOwner)
			if pods%benchPodsPerOwner == 0 {
				cluster.replicaSets = append(cluster.replicaSets, metav1.PartialObjectMetadata{
					ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: owner, UID: types.UID("uid-rs-" + owner)},
				})
			}
			cluster.pods = append(cluster.pods, cache.Pod(st.Pod(fmt.Sprintf("pod-%06d", pods), cpu, memory,
				st.OwnedBy(owner), st.OnNode(nodeName), st.WithPodLabels("app", owner))))
			pods++
		}
	}
	for n := range nodes {
		group := provider.groups[n%groups]
		name := fmt.Sprintf("node-%05d", n)
		node := st.Node(name, "16", "64Gi", st.WithNodeLabels(corev1.LabelTopologyZone, group.template.Labels[corev1.LabelTopologyZone],
			"pool", group.template.Labels["pool"]))
		group.instances = append(group.instances, nodegroups.Instance{ID: "fake://" + name, NodeName: name, State: nodegroups.InstanceRunning})
		group.target++
		cluster.nodes = append(cluster.nodes, node)
		cluster.pods = append(cluster.pods, cache.Pod(st.Pod(fmt.Sprintf("agent-%05d", n), "100m", "", st.OnNode(name), daemonSetOwned)))
		switch {
		case !underutilized:
			addPods(name, benchPodsPerNode, "300m", "1Gi")
		case n%5 == 0:
			addPods(name, 9, "200m", "512Mi")
		default:
			addPods(name, 34, "300m", "1Gi")
		}
	}
	return cluster, provider
}

// withIdleClaims gives the nodes of the first gpuGroups groups of an idle
// cluster a ResourceSlice of 8 GPUs each, and the first 3 pods of each
// such node a claim of 2 of them, allocated there: 2 GPUs a node stay
// free. Scale-down moves the pods of underutilized nodes only where their
// claims can be allocated anew.
func withIdleClaims(cluster *benchCluster, provider *fakeProvider, gpuGroups int) {
	cluster.deviceClasses = []resourcev1.DeviceClass{*st.DeviceClass("gpu", st.GPUDriver)}
	gpuNodes := map[string]bool{}
	for _, group := range provider.groups[:gpuGroups] {
		for _, instance := range group.instances {
			gpuNodes[instance.NodeName] = true
			cluster.resourceSlices = append(cluster.resourceSlices, *st.ResourceSlice(instance.NodeName, st.GPUDriver, st.GPUs(8, "a100")...))
		}
	}
	held := map[string]int{}
	for i, pod := range cluster.pods {
		node := pod.NodeName
		if !gpuNodes[node] || held[node] == 3 || pod.IsDaemonSetPod() {
			continue
		}
		first := 2 * held[node]
		claim := st.AllocatedOn(st.ResourceClaim("gpus-"+pod.Name, "gpu", 2), node, st.GPUDriver,
			fmt.Sprintf("gpu-%d", first), fmt.Sprintf("gpu-%d", first+1))
		cluster.resourceClaims = append(cluster.resourceClaims, *claim)
		// A pod of its own: the spec is shared with the owner's other pods.
		full := pod.Full()
		full.Status.Conditions = pod.Conditions
		st.WithResourceClaim(claim.Name)(full)
		cluster.pods[i] = snapshot.NewPod(full)
		held[node]++
	}
}

func daemonSetOwned(pod *corev1.Pod) {
	st.OwnedBy("agent")(pod)
	pod.OwnerReferences[0].Kind = "DaemonSet"
	pod.OwnerReferences[0].UID = "uid-ds-agent"
}

// BenchmarkIdleLoop measures one whole loop of the engine (Engine.RunOnce)
// with nothing to change: list the node groups and the cluster, update the
// cluster state, build the snapshot (reusing the pods parsed in the
// previous loop, as the manager does), scale-up with no pending pod,
// scale-down planning, status and metrics. "unneeded=0": every node is
// busy; "unneeded=20%": one node in five is underutilized and simulated
// in every loop (it is unneeded, not yet removable). No API server: the
// cluster is served from memory (benchCluster). The 10,000-node size
// takes about 2 GB for its input: run it alone with -benchtime 3x.
func BenchmarkIdleLoop(b *testing.B) {
	for _, size := range []struct{ nodes, groups int }{{1000, 20}, {1000, 100}, {1000, 500}, {10000, 20}} {
		for _, underutilized := range []bool{false, true} {
			unneeded := "0"
			if underutilized {
				unneeded = "20%"
			}
			name := fmt.Sprintf("nodes=%d/pods=%d/groups=%d/unneeded=%s", size.nodes, size.nodes*benchPodsPerNode, size.groups, unneeded)
			b.Run(name, func(b *testing.B) {
				cluster, provider := idleCluster(size.nodes, size.groups, underutilized)
				config := autoscaler.DefaultConfig()
				config.BalanceSimilarNodeGroups = true
				ctx, engine, clk := idleEngine(b, cluster, provider, config)
				// The first loop parses every pod; the next ones reuse them.
				status := runLoop(ctx, b, engine, clk)
				wantUnneeded := 0
				if underutilized {
					wantUnneeded = size.nodes / 5
				}
				if status.UnneededNodes != wantUnneeded || status.UnschedulablePods != 0 || !status.ScalingActive {
					b.Fatalf("not the loop to measure: %d unneeded nodes (want %d), %d unschedulable pods, scaling active %v (%s)",
						status.UnneededNodes, wantUnneeded, status.UnschedulablePods, status.ScalingActive, status.ScalingMessage)
				}
				measureIdleLoops(ctx, b, engine, clk, provider)
			})
		}
	}
}

// BenchmarkIdleLoopWithClaims is BenchmarkIdleLoop at 1,000 nodes with
// DRA (withIdleClaims on 4 of the 20 groups): the loop reads the DRA
// objects, and scale-down moves the pods of underutilized nodes, some
// holding GPUs through claims, only where their claims can be allocated
// anew.
func BenchmarkIdleLoopWithClaims(b *testing.B) {
	for _, underutilized := range []bool{false, true} {
		unneeded := "0"
		if underutilized {
			unneeded = "20%"
		}
		b.Run(fmt.Sprintf("nodes=1000/pods=30000/groups=20/unneeded=%s", unneeded), func(b *testing.B) {
			cluster, provider := idleCluster(1000, 20, underutilized)
			withIdleClaims(cluster, provider, 4)
			ctx, engine, clk := idleEngine(b, cluster, provider, autoscaler.DefaultConfig())
			status := runLoop(ctx, b, engine, clk)
			if status.UnschedulablePods != 0 || !status.ScalingActive {
				b.Fatalf("not the loop to measure: %d unschedulable pods, scaling active %v (%s)", status.UnschedulablePods, status.ScalingActive, status.ScalingMessage)
			}
			measureIdleLoops(ctx, b, engine, clk, provider)
		})
	}
}

// idleEngine is an engine of the benchmark's cluster with config, on a
// fake clock, and the context of its loops.
func idleEngine(b *testing.B, cluster client.Reader, provider *fakeProvider, config autoscaler.Config) (context.Context, *autoscaler.Engine, *clocktesting.FakeClock) {
	b.Helper()
	clk := clocktesting.NewFakeClock(st.Now)
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload",
		Owner:       testOwner,
		Settings:    mustSettings(b, config, clk),
		NodeGroups:  provider,
		Cluster:     cluster,
		Clientset:   kubefake.NewClientset(),
		Recorder:    &record.FakeRecorder{},
		Metrics:     autoscaler.NewMetrics(prometheus.NewRegistry()),
		Clock:       clk,
	})
	if err != nil {
		b.Fatal(err)
	}
	return klog.NewContext(b.Context(), klog.Background().V(1)), engine, clk
}

// measureIdleLoops measures the loops of engine, which must change no
// group, and reports the unneeded nodes of the last.
func measureIdleLoops(ctx context.Context, b *testing.B, engine *autoscaler.Engine, clk *clocktesting.FakeClock, provider *fakeProvider) {
	b.Helper()
	var status autoscaler.Status
	b.ReportAllocs()
	cpu := benchmark.StartCPU(b)
	for b.Loop() {
		status = runLoop(ctx, b, engine, clk)
	}
	// CPU time, garbage collection included, tells the cost of a loop
	// even when other processes share the machine.
	cpu.Report()
	b.ReportMetric(float64(status.UnneededNodes), "unneeded-nodes")
	for _, group := range provider.groups {
		if len(group.increases)+len(group.deletedNodes)+len(group.deletedInstances) > 0 {
			b.Fatalf("the loop changed group %s", group.id)
		}
	}
}

// runLoop runs one loop a second after the last: the unneeded nodes stay
// far from their unneeded time.
func runLoop(ctx context.Context, b *testing.B, engine *autoscaler.Engine, clk *clocktesting.FakeClock) autoscaler.Status {
	clk.Step(time.Second)
	status := engine.RunOnce(ctx, clk.Now())
	if status.Err != nil {
		b.Fatal(status.Err)
	}
	return status
}
