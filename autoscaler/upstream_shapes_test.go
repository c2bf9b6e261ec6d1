package autoscaler_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	goruntime "runtime"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
)

// The shapes of the upstream cluster-autoscaler's own CI benchmark
// (cluster-autoscaler's core/bench: one RunOnce of a new autoscaler on one
// node group of nodes with 10 cpu and room for 100 pods), at the sizes
// its scale-up, scale-down and DRA scenarios use, each with the outcome
// upstream reaches. BenchmarkUpstreamShapes measures them;
// TestUpstreamShapes checks their outcome and allocations in make test.

// upstreamShape is one scenario: a cluster with pending pods to scale up
// for, or with nodes to scale down, and what one loop must do to it.
type upstreamShape struct {
	name string
	// build makes the cluster anew: the loop measured parses every pod,
	// as a new autoscaler does.
	build func() *shapeCluster
	// outcome is what upstream's RunOnce does on the shape: the nodes it
	// adds, or the nodes it marks for removal.
	outcome int
}

const (
	shapeNodeCPU    = "10"
	shapeNodeMemory = "10Gi"
	shapeNodePods   = 100
	shapeGroupID    = "MachineDeployment/default/ng1"
	// shapeMaxNodes is the group's and the cluster's maximum, as upstream's.
	shapeMaxNodes = 10000
)

var upstreamShapes = []upstreamShape{
	{
		// 50 pods of 2% of a node each: 1,000 nodes.
		name: "scale-up/pods=50000", outcome: 1000,
		build: func() *shapeCluster { return pendingShape(50000, "200m", "200Mi", nil) },
	},
	{
		// 8 pods a node, each claiming one of its 8 devices: 500 nodes.
		name: "scale-up-dra/pods=4000", outcome: 500,
		build: func() *shapeCluster {
			return pendingShape(4000, "100m", "100Mi", func(c *shapeCluster, template *corev1.Node) {
				template.Annotations = map[string]string{snapshot.TemplateDevicesAnnotation: st.GPUDriver + "=8"}
				c.cluster.deviceClasses = []resourcev1.DeviceClass{*st.DeviceClass("gpu", st.GPUDriver)}
				c.cluster.resourceClaimTemplates = []resourcev1.ResourceClaimTemplate{*st.ResourceClaimTemplate("one-gpu", "gpu", 1)}
			})
		},
	},
	{
		// 40 pods of 1% of a node on each node: the pods of 2,000 nodes fit
		// on 800.
		name: "scale-down/nodes=2000", outcome: 1200,
		build: func() *shapeCluster { return busyShape(2000, 40, "100m", "100Mi", 0) },
	},
	{
		// 4 pods of 10% of a node, each holding one of its 10 devices: the
		// pods of 800 nodes fit on 320.
		name: "scale-down-dra/nodes=800", outcome: 480,
		build: func() *shapeCluster { return busyShape(800, 4, "1", "1Gi", 10) },
	},
}

// shapeCluster is a cluster of a shape and the engine of its first loop.
type shapeCluster struct {
	cluster  *benchCluster
	group    *fakeGroup
	workload *workloadWrites
	config   autoscaler.Config
}

// outcome is what the loop did: the nodes added to the group, or the
// nodes it tainted for removal.
func (c *shapeCluster) outcome() int {
	added := 0
	for _, delta := range c.group.increases {
		added += delta
	}
	return added + c.workload.taintedNodes()
}

// runOnce runs the first loop of a new engine of the cluster.
func (c *shapeCluster) runOnce(ctx context.Context, tb testing.TB) {
	tb.Helper()
	clk := clocktesting.NewFakeClock(st.Now)
	if status := c.newEngine(tb, clk).RunOnce(ctx, clk.Now()); status.Err != nil {
		tb.Fatal(status.Err)
	}
}

// newEngine is a new engine of the cluster, on clk.
func (c *shapeCluster) newEngine(tb testing.TB, clk *clocktesting.FakeClock) *autoscaler.Engine {
	tb.Helper()
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload",
		Owner:       testOwner,
		Settings:    mustSettings(tb, c.config, clk),
		NodeGroups:  &fakeProvider{groups: []*fakeGroup{c.group}},
		Cluster:     c.cluster,
		Clientset:   c.workload.clientset,
		Recorder:    &record.FakeRecorder{},
		Metrics:     autoscaler.NewMetrics(prometheus.NewRegistry()),
		Clock:       clk,
	})
	if err != nil {
		tb.Fatal(err)
	}
	return engine
}

// shapeConfig is upstream's benchmark configuration: no limit below the
// group's maximum, and for scale-down no waiting and no cap on parallel
// removals.
func shapeConfig() autoscaler.Config {
	config := autoscaler.DefaultConfig()
	config.MaxNodesPerScaleUp = shapeMaxNodes
	config.Limits.MaxNodesTotal = shapeMaxNodes
	config.ScaleDown.UnneededTime = 0
	config.ScaleDown.DelayAfterAdd = 0
	config.ScaleDown.MaxEmptyBulkDelete = shapeMaxNodes
	config.ScaleDown.MaxParallelDrains = shapeMaxNodes
	// Upstream plans for every pending pod in one loop; the default bound
	// spreads the 50,000-pod shape over five (TestHugeBacklog).
	config.MaxPendingPodsPerLoop = 0
	return config
}

// shapeNode is a node of the shapes' group, Ready.
func shapeNode(name string) *corev1.Node {
	node := st.Node(name, shapeNodeCPU, shapeNodeMemory)
	pods := *resource.NewQuantity(shapeNodePods, resource.DecimalSI)
	node.Status.Capacity[corev1.ResourcePods] = pods
	node.Status.Allocatable[corev1.ResourcePods] = pods
	return node
}

// pendingShape is an empty group and pods bare pending pods that request
// cpu and memory; withDRA, when set, gives the group's template devices
// and the cluster the DRA objects its pods claim.
func pendingShape(pods int, cpu, memory string, withDRA func(*shapeCluster, *corev1.Node)) *shapeCluster {
	template := shapeNode("template")
	c := &shapeCluster{
		cluster:  &benchCluster{},
		group:    &fakeGroup{id: shapeGroupID, max: shapeMaxNodes, template: template},
		workload: newWorkloadWrites(nil),
		config:   shapeConfig(),
	}
	var opts []st.PodOption
	if withDRA != nil {
		withDRA(c, template)
		opts = append(opts, st.WithResourceClaimTemplate("gpu", "one-gpu"))
	}
	cache := trim.NewTransformer()
	for i := range pods {
		c.cluster.pods = append(c.cluster.pods, cache.Pod(st.Pod(fmt.Sprintf("pod-%d", i), cpu, memory, opts...)))
	}
	return c
}

// busyShape is a group of nodes nodes, each running podsPerNode bare pods
// that request cpu and memory, annotated safe to evict, as upstream's;
// with devices, each node publishes that many GPUs and each pod holds one
// through a claim allocated there.
func busyShape(nodes, podsPerNode int, cpu, memory string, devices int) *shapeCluster {
	c := &shapeCluster{
		cluster: &benchCluster{},
		group:   &fakeGroup{id: shapeGroupID, max: shapeMaxNodes, template: shapeNode("template")},
		config:  shapeConfig(),
	}
	if devices > 0 {
		c.cluster.deviceClasses = []resourcev1.DeviceClass{*st.DeviceClass("gpu", st.GPUDriver)}
	}
	cache := trim.NewTransformer()
	for n := range nodes {
		name := fmt.Sprintf("ng1-node-%d", n)
		c.cluster.nodes = append(c.cluster.nodes, shapeNode(name))
		c.group.instances = append(c.group.instances, nodegroups.Instance{ID: "fake://" + name, NodeName: name, State: nodegroups.InstanceRunning, Removable: true})
		c.group.target++
		if devices > 0 {
			c.cluster.resourceSlices = append(c.cluster.resourceSlices, *st.ResourceSlice(name, st.GPUDriver, st.GPUs(devices, "a100")...))
		}
		for i := range podsPerNode {
			pod := st.Pod(fmt.Sprintf("pod-%d", len(c.cluster.pods)), cpu, memory, st.OnNode(name))
			pod.Annotations = map[string]string{scaledown.SafeToEvictAnnotation: "true"}
			if devices > 0 {
				claim := st.AllocatedOn(st.ResourceClaim("gpu-"+pod.Name, "gpu", 1), name, st.GPUDriver, fmt.Sprintf("gpu-%d", i))
				c.cluster.resourceClaims = append(c.cluster.resourceClaims, *claim)
				st.WithResourceClaim(claim.Name)(pod)
			}
			c.cluster.pods = append(c.cluster.pods, cache.Pod(pod))
		}
	}
	c.workload = newWorkloadWrites(c.cluster.nodes)
	return c
}

// workloadWrites is the workload cluster's API as the loop writes to it,
// at the cost of a map: upstream's benchmark gives its loop the same fast
// tainting client, so that what is measured is the autoscaler's. Nodes
// are read and updated from memory; evictions succeed.
type workloadWrites struct {
	clientset *kubefake.Clientset
	mu        sync.Mutex
	nodes     map[string]*corev1.Node
	tainted   map[string]bool
}

func newWorkloadWrites(nodes []*corev1.Node) *workloadWrites {
	w := &workloadWrites{clientset: kubefake.NewClientset(), nodes: map[string]*corev1.Node{}, tainted: map[string]bool{}}
	for _, node := range nodes {
		w.nodes[node.Name] = node
	}
	w.clientset.PrependReactor("get", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		node, ok := w.nodes[action.(k8stesting.GetAction).GetName()]
		if !ok {
			return false, nil, nil
		}
		return true, node.DeepCopy(), nil
	})
	w.clientset.PrependReactor("update", "nodes", func(action k8stesting.Action) (bool, runtime.Object, error) {
		node := action.(k8stesting.UpdateAction).GetObject().(*corev1.Node)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.nodes[node.Name] = node
		w.tainted[node.Name] = scaledown.OwnsDeletionTaint(node)
		return true, node, nil
	})
	w.clientset.PrependReactor("create", "pods", func(action k8stesting.Action) (bool, runtime.Object, error) {
		return action.GetSubresource() == "eviction", nil, nil
	})
	return w
}

func (w *workloadWrites) taintedNodes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, tainted := range w.tainted {
		if tainted {
			n++
		}
	}
	return n
}

// BenchmarkUpstreamShapes measures the first loop of a new engine on each
// of upstream's benchmark shapes, as upstream measures its RunOnce: wall
// time, CPU time, allocations; the cluster is built outside the
// measurement. docs/performance.md has the figures beside upstream's.
func BenchmarkUpstreamShapes(b *testing.B) {
	for _, shape := range upstreamShapes {
		b.Run(shape.name, func(b *testing.B) {
			ctx := klog.NewContext(b.Context(), klog.Background().V(1))
			cpu := benchmark.NewCPUMeter(b)
			b.ReportAllocs()
			b.StopTimer()
			for range b.N {
				c := shape.build()
				// The garbage of the setup is not the loop's to collect.
				goruntime.GC()
				b.StartTimer()
				cpu.Start()
				c.runOnce(ctx, b)
				cpu.Stop()
				b.StopTimer()
				if got := c.outcome(); got != shape.outcome {
					b.Fatalf("the loop changed %d nodes, upstream %d", got, shape.outcome)
				}
			}
			cpu.Report()
		})
	}
}

// upstreamShapesBaseline is the checked-in outcome and allocations of one
// loop on each shape, which TestUpstreamShapes holds the code to.
const upstreamShapesBaseline = "testdata/upstream-shapes.json"

var updateUpstreamShapes = flag.Bool("update-upstream-shapes", false, "write the allocations of the upstream shapes to "+upstreamShapesBaseline)

// shapeRecord is what the baseline holds of a shape.
type shapeRecord struct {
	// Outcome is the nodes the loop added or marked for removal.
	Outcome int `json:"outcome"`
	// Allocs are the heap allocations of the loop.
	Allocs uint64 `json:"allocs"`
}

// allocsTolerance is how far from the baseline the allocations of a loop
// may be: they do not depend on the machine's load, but vary a little
// with map iteration order.
const allocsTolerance = 0.10

// TestUpstreamShapes is the regression check of BenchmarkUpstreamShapes
// that does not depend on the machine's load: one loop on each shape must
// reach upstream's outcome, and allocate within 10% of the baseline. A
// change that moves the allocations for good updates the baseline:
//
//	go test ./autoscaler/ -run TestUpstreamShapes -update-upstream-shapes
func TestUpstreamShapes(t *testing.T) {
	ctx := klog.NewContext(t.Context(), klog.Background().V(1))
	measured := map[string]shapeRecord{}
	for _, shape := range upstreamShapes {
		c := shape.build()
		before := benchmark.HeapAfterGC()
		c.runOnce(ctx, t)
		var after goruntime.MemStats
		goruntime.ReadMemStats(&after)
		measured[shape.name] = shapeRecord{Outcome: c.outcome(), Allocs: after.Mallocs - before.Mallocs}
	}
	if *updateUpstreamShapes {
		data, err := json.MarshalIndent(measured, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(upstreamShapesBaseline, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(upstreamShapesBaseline)
	if err != nil {
		t.Fatal(err)
	}
	var baseline map[string]shapeRecord
	if err := json.Unmarshal(data, &baseline); err != nil {
		t.Fatalf("%s: %v", upstreamShapesBaseline, err)
	}
	for _, shape := range upstreamShapes {
		t.Run(shape.name, func(t *testing.T) {
			g := NewWithT(t)
			got, want := measured[shape.name], baseline[shape.name]
			g.Expect(got.Outcome).To(Equal(shape.outcome), "nodes changed by the loop, as upstream's")
			g.Expect(want.Allocs).NotTo(BeZero(), "the baseline has the shape")
			g.Expect(float64(got.Allocs)).To(BeNumerically("~", float64(want.Allocs), allocsTolerance*float64(want.Allocs)),
				"allocations of the loop against the baseline (%d); update it when the change is meant", want.Allocs)
		})
	}
}
