//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// CrashPoint is a write of the autoscaler right after which CrashSpec
// kills it.
type CrashPoint string

const (
	// CrashAfterScaleUp is the /scale write that raises the replicas.
	CrashAfterScaleUp CrashPoint = "ScaleUp"
	// CrashAfterTaint is the deletion taint put on a node to drain.
	CrashAfterTaint CrashPoint = "Taint"
	// CrashAfterEviction is an eviction of a pod of a node being drained.
	CrashAfterEviction CrashPoint = "Eviction"
	// CrashAfterMark is the delete-machine mark put on the Machine of a
	// drained node, before the replicas are lowered.
	CrashAfterMark CrashPoint = "Mark"
	// CrashAfterScaleDown is the /scale write that lowers the replicas.
	CrashAfterScaleDown CrashPoint = "ScaleDown"
)

// CrashPoints are every point, in the order a cycle reaches them.
var CrashPoints = []CrashPoint{CrashAfterScaleUp, CrashAfterTaint, CrashAfterEviction, CrashAfterMark, CrashAfterScaleDown}

// CrashSpecInput is the input of CrashSpec.
type CrashSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager is the running autoscaler manager; the spec kills it.
	Manager *localstack.Process

	// ManagerArgs are the arguments the spec starts the manager's binary
	// again with.
	ManagerArgs []string

	// Restarted is told about the manager the spec started last in place
	// of Manager, which it leaves running, even when it fails.
	Restarted func(*localstack.Process)

	// Points are the points killed at, one per cycle, in turn;
	// CrashPoints when empty.
	Points []CrashPoint

	// Cycles is how many times the workload scales up and down, with one
	// kill each; len(Points) when 0, one kill at each point.
	Cycles int
}

const (
	// crashGroupMax leaves the group room beyond the three nodes a cycle
	// needs, so that a scale-up done twice shows.
	crashGroupMax = 5
	// crashUnneededTime is short: each cycle drains two nodes, and drains
	// again those a kill released.
	crashUnneededTime = 5 * time.Second
)

// CrashSpec scales a workload up and down, and in each cycle kills the
// manager (SIGKILL) right after one of its writes, chosen round-robin over
// CrashPoints and, for the points a cycle reaches twice, the first or the
// second time; it starts the manager again at once, as a Deployment would.
// It checks that the replicas never leave [min, max], that no Machine goes
// that the autoscaler did not mark, that every cycle reaches the size it
// needs and the autoscaler never asks for more (no replica lost or added
// twice), that every pod runs, that nothing is left behind, and that the
// restarted manager releases the drain the killed one had under way: the
// taint goes from the node and the mark from its Machine, and the node is
// drained again from the start when it is still unneeded. The figures go
// to the report and to crash.txt in the stack's log directory.
//
// It kills and restarts the suite's manager: run it serially.
func CrashSpec(ctx context.Context, inputGetter func() CrashSpecInput) {
	var input CrashSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "CrashSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "CrashSpec needs the running manager")
		Expect(input.Restarted).NotTo(BeNil(), "CrashSpec needs to tell about the restarted manager")
	})

	It("loses nothing, deletes nothing wrong and releases the drain in progress when the manager is killed at any step", func() {
		mgmt := input.Stack.Management.Client
		Expect(input.Manager.Exited()).NotTo(BeClosed(), "the manager %s is not running", input.Manager.Name())
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "crash")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: crashGroupMax})
		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: crashUnneededTime}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		crash := &crasher{stack: input.Stack, name: "capi-autoscaler-" + namespace.Name, args: input.ManagerArgs, manager: input.Manager}
		proxies := framework.ProxiesOf(input.Stack)
		for _, proxy := range proxies {
			proxy.Observe(func(r faultproxy.Request) { crash.observe(ctx, r) })
		}
		DeferCleanup(func() {
			for _, proxy := range proxies {
				proxy.Observe(nil)
			}
			// The next specs need a manager, whatever happened here.
			manager := crash.current()
			select {
			case <-manager.Exited():
				By("Starting the autoscaler manager again: the spec left it stopped")
				var err error
				manager, err = crash.start(ctx)
				Expect(err).NotTo(HaveOccurred())
			default:
			}
			input.Restarted(manager)
		})

		points := input.Points
		if len(points) == 0 {
			points = CrashPoints
		}
		cycles := input.Cycles
		if cycles == 0 {
			cycles = len(points)
		}
		figures := map[CrashPoint]*crashFigures{}
		for _, point := range CrashPoints {
			figures[point] = &crashFigures{}
		}
		for cycle := range cycles {
			point := points[cycle%len(points)]
			nth := 1 + cycle/len(points)%point.reachedPerCycle()
			prefix := fmt.Sprintf("Cycle %d/%d, kill after %s #%d", cycle+1, cycles, point, nth)

			crash.takePeakReplicas()
			if point == CrashAfterScaleUp {
				crash.arm(point, nth)
			}
			framework.ScaleCycle(ctx, framework.ScaleCycleInput{
				Stack: input.Stack, Namespace: namespace, Cluster: cluster, Group: md,
				Name: fmt.Sprintf("cycle-%d-of-%d-kill-after-%s-%d", cycle+1, cycles, strings.ToLower(string(point)), nth),
				AfterScaleUp: func() {
					// Not eventually: a scale-up done twice would be
					// scaled down again after a while.
					Expect(crash.takePeakReplicas()).To(Equal(3), "the autoscaler asked for more nodes than the pods need")
				},
				BeforeScaleDown: func() {
					if point != CrashAfterScaleUp {
						crash.arm(point, nth)
					}
				},
				AfterScaleDown: func() {
					By(prefix + ": nothing is left behind, the restarted manager is healthy and released the drain it found")
					framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
					result := crash.disarm()
					Expect(result.err).NotTo(HaveOccurred(), "killing or starting the manager")
					Expect(result.unreleased).To(BeEmpty(), "the restarted manager did not release the drain under way at the kill")
					framework.ExpectManagerHealthy(crash.current())
					figures[point].add(result)
				},
			})
		}

		invariants.ExpectNoViolations()
		for _, point := range CrashPoints {
			if figures[point].kills > 0 {
				Expect(figures[point].landed).To(BeNumerically(">", 0), "no kill after %s landed: the point was never reached", point)
			}
		}
		summary := fmt.Sprintf("crash %s, cycles %d: kills landed/tried %s; %d taints and marks of interrupted drains released; %d invariant checks, %d violations",
			input.Stack.Topology(), cycles, crashFiguresString(figures), crashReleased(figures),
			invariants.Events(), len(invariants.Violations()))
		AddReportEntry("crash", summary)
		framework.AppendFigures(input.Stack, "crash.txt", summary)
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// reachedPerCycle is how many times a cycle reaches the point: it scales up
// once, and drains two nodes one after the other.
func (p CrashPoint) reachedPerCycle() int {
	if p == CrashAfterScaleUp {
		return 1
	}
	return 2
}

// matches tells whether the API server accepted the write the point names.
// Scale-ups and scale-downs are told apart by when the spec arms them.
func (p CrashPoint) matches(r faultproxy.Request) bool {
	if r.Status < http.StatusOK || r.Status >= http.StatusMultipleChoices {
		return false
	}
	switch p {
	case CrashAfterScaleUp, CrashAfterScaleDown:
		return isScaleWrite(r)
	case CrashAfterTaint:
		tainted, ok := nodeTaintWrite(r)
		return ok && tainted
	case CrashAfterEviction:
		return r.Verb == "create" && r.APIGroup == "" && r.Resource == "pods" && r.Subresource == "eviction"
	case CrashAfterMark:
		marked, ok := machineMarkWrite(r)
		return ok && marked
	}
	return false
}

func isScaleWrite(r faultproxy.Request) bool {
	return r.Verb == "update" && r.APIGroup == clusterv1.GroupVersion.Group && r.Resource == "machinedeployments" && r.Subresource == "scale"
}

// scaleWrite returns the replicas a /scale write asks for.
func scaleWrite(r faultproxy.Request) (int, bool) {
	if !isScaleWrite(r) {
		return 0, false
	}
	obj, _, err := crashCodecs.UniversalDeserializer().Decode(r.Body, nil, nil)
	if err != nil {
		return 0, false
	}
	scale, ok := obj.(*autoscalingv1.Scale)
	if !ok {
		return 0, false
	}
	return int(scale.Spec.Replicas), true
}

// nodeTaintWrite tells whether r is an update of a Node, and whether the
// Node then has the deletion taint.
func nodeTaintWrite(r faultproxy.Request) (tainted, ok bool) {
	if r.Verb != "update" || r.APIGroup != "" || r.Resource != "nodes" || r.Subresource != "" {
		return false, false
	}
	// Typed clients send protobuf, other clients JSON: the universal
	// deserializer tells them apart.
	obj, _, err := crashCodecs.UniversalDeserializer().Decode(r.Body, nil, nil)
	if err != nil {
		return false, false
	}
	node, ok := obj.(*corev1.Node)
	return ok && framework.HasDeletionTaint(node), ok
}

var crashCodecs = serializer.NewCodecFactory(localstack.Scheme)

// machineMarkWrite tells whether r is a merge patch of a Machine's
// delete-machine annotation, and whether it sets it or removes it.
func machineMarkWrite(r faultproxy.Request) (marked, ok bool) {
	if r.Verb != "patch" || r.APIGroup != clusterv1.GroupVersion.Group || r.Resource != "machines" || r.Subresource != "" {
		return false, false
	}
	var patch struct {
		Metadata map[string]json.RawMessage `json:"metadata"`
	}
	if err := json.Unmarshal(r.Body, &patch); err != nil {
		return false, false
	}
	raw, ok := patch.Metadata["annotations"]
	if !ok {
		return false, false
	}
	// Removing the last annotation patches them all away.
	var annotations map[string]*string
	if err := json.Unmarshal(raw, &annotations); err != nil {
		return false, false
	}
	if annotations == nil {
		return false, true
	}
	value, ok := annotations[clusterv1.DeleteMachineAnnotation]
	return value != nil, ok
}

// crasher kills the manager right after the API server answered the n-th
// write of the armed point, and starts it again at once. It follows the
// drain under way, so as to check that the restarted manager releases it.
// It is called from the proxies' request goroutines.
type crasher struct {
	stack *localstack.Stack
	// name prefixes the names, and logs, of the managers it starts.
	name string
	args []string

	mu       sync.Mutex
	manager  *localstack.Process
	restarts int
	// point and n are armed while n > 0; seen counts its writes so far.
	point   CrashPoint
	n, seen int
	result  crashResult
	// draining are the nodes tainted and marked the Machines since the
	// last scale-down write, and not released since: the drain under way.
	draining, marked sets.Set[string]
	// peakReplicas is the most replicas a /scale write asked for.
	peakReplicas int
}

// crashResult is what became of one armed kill.
type crashResult struct {
	landed bool
	// released are the taints and marks of the drain under way at the
	// kill that the restarted manager removed; unreleased those it has
	// not removed yet.
	released, unreleased []string
	err                  error
}

func (c *crasher) arm(point CrashPoint, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.point, c.n, c.seen = point, n, 0
	c.result = crashResult{}
	c.draining, c.marked = sets.New[string](), sets.New[string]()
}

// disarm stops the kill, if it has not happened, and says what became of it.
func (c *crasher) disarm() crashResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = 0
	result := c.result
	if result.landed {
		for _, node := range sets.List(c.draining) {
			result.unreleased = append(result.unreleased, "taint of Node "+node)
		}
		for _, machine := range sets.List(c.marked) {
			result.unreleased = append(result.unreleased, "mark of Machine "+machine)
		}
	}
	c.draining, c.marked = nil, nil
	return result
}

func (c *crasher) current() *localstack.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.manager
}

// takePeakReplicas returns the most replicas a /scale write asked for
// since the last call.
func (c *crasher) takePeakReplicas() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	peak := c.peakReplicas
	c.peakReplicas = 0
	return peak
}

func (c *crasher) observe(ctx context.Context, r faultproxy.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Status < http.StatusOK || r.Status >= http.StatusMultipleChoices {
		return
	}
	if replicas, ok := scaleWrite(r); ok {
		c.peakReplicas = max(c.peakReplicas, replicas)
	}
	if c.draining == nil {
		return
	}
	if c.result.landed {
		c.followRelease(r)
		return
	}
	c.followDrain(r)
	if c.n == 0 || !c.point.matches(r) {
		return
	}
	c.seen++
	if c.seen < c.n {
		return
	}
	c.n = 0
	c.result.landed = true
	if err := c.manager.Kill(); err != nil {
		c.result.err = err
		return
	}
	c.manager, c.result.err = c.startLocked(ctx)
}

// followDrain keeps track of the drain under way before the kill.
func (c *crasher) followDrain(r faultproxy.Request) {
	if tainted, ok := nodeTaintWrite(r); ok {
		if tainted {
			c.draining.Insert(r.Name)
		} else {
			c.draining.Delete(r.Name)
		}
	}
	if marked, ok := machineMarkWrite(r); ok {
		if marked {
			c.marked.Insert(r.Name)
		} else {
			c.marked.Delete(r.Name)
		}
	}
	if isScaleWrite(r) {
		// The drained nodes are handed to Cluster API: their Machines
		// go, and with them the Nodes and their taint.
		c.draining.Clear()
		c.marked.Clear()
	}
}

// followRelease records the restarted manager removing the taints and
// marks of the drain the killed one had under way.
func (c *crasher) followRelease(r faultproxy.Request) {
	if tainted, ok := nodeTaintWrite(r); ok && !tainted && c.draining.Has(r.Name) {
		c.draining.Delete(r.Name)
		c.result.released = append(c.result.released, "taint of Node "+r.Name)
	}
	if marked, ok := machineMarkWrite(r); ok && !marked && c.marked.Has(r.Name) {
		c.marked.Delete(r.Name)
		c.result.released = append(c.result.released, "mark of Machine "+r.Name)
	}
}

// start starts the manager again, logging to a file of its own.
func (c *crasher) start(ctx context.Context) (*localstack.Process, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	manager, err := c.startLocked(ctx)
	if err == nil {
		c.manager = manager
	}
	return manager, err
}

func (c *crasher) startLocked(ctx context.Context) (*localstack.Process, error) {
	c.restarts++
	return c.stack.StartProcess(ctx, fmt.Sprintf("%s-%d", c.name, c.restarts), c.manager.Binary(), c.args...)
}

// crashFigures count the kills at one point.
type crashFigures struct {
	kills, landed, released int
}

func (f *crashFigures) add(result crashResult) {
	f.kills++
	if result.landed {
		f.landed++
	}
	f.released += len(result.released)
}

func crashFiguresString(figures map[CrashPoint]*crashFigures) string {
	parts := make([]string, 0, len(figures))
	for _, point := range CrashPoints {
		f := figures[point]
		parts = append(parts, fmt.Sprintf("%s %d/%d", point, f.landed, f.kills))
	}
	return strings.Join(parts, ", ")
}

func crashReleased(figures map[CrashPoint]*crashFigures) int {
	total := 0
	for _, f := range figures {
		total += f.released
	}
	return total
}
