package autoscaler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// fakeGroup is a node group whose instances the test controls: it records
// what the engine asks and changes only its target size, the way a real
// infrastructure would before machines appear.
type fakeGroup struct {
	id        string
	min, max  int
	target    int
	instances []nodegroups.Instance
	template  *corev1.Node
	// templateErr is what TemplateNode returns instead of template.
	templateErr error

	increases        []int
	decreases        []int
	deletedInstances []string
	deletedNodes     []string
	increaseErr      error
	// scaleDownRefusal is what CheckScaleDown and DeleteNodes return.
	scaleDownRefusal error
	// checkPanic, when set, is what CheckScaleDown panics with.
	checkPanic any
	cancelled  []string
	// machineless groups remove instances of the infrastructure's choice,
	// as a MachinePool without MachinePool Machines.
	machineless bool
	// price is the group's own price, as its price annotation gives it.
	price *pricing.Price
	// labels are those of the object behind the group; minRule the rule
	// the engine gave its min size (WithMinSize).
	labels  map[string]string
	minRule nodegroups.MinSizeRule
}

var _ nodegroups.NodeGroup = &fakeGroup{}

// testOwner is the ClusterAutoscaler the engines of the tests act for.
var testOwner = ownership.Owner{UID: "5e0e4c4a-0000-4000-8000-000000000001"}

func (g *fakeGroup) ID() string                       { return g.id }
func (g *fakeGroup) Labels() map[string]string        { return g.labels }
func (g *fakeGroup) MaxSize() int                     { return g.max }
func (g *fakeGroup) TargetSize() int                  { return g.target }
func (g *fakeGroup) Instances() []nodegroups.Instance { return g.instances }
func (g *fakeGroup) Options() nodegroups.GroupOptions { return nodegroups.GroupOptions{Price: g.price} }
func (g *fakeGroup) ScaleDownBlockedReason() string   { return "" }
func (g *fakeGroup) RemovesChosenInstances() bool     { return !g.machineless }

func (g *fakeGroup) MinSize() int {
	if g.minRule != nil {
		return min(g.minRule(g.min), g.max)
	}
	return g.min
}

// WithMinSize sets the rule on the group itself, so that the test sees
// what the engine asks of it.
func (g *fakeGroup) WithMinSize(rule nodegroups.MinSizeRule) nodegroups.NodeGroup {
	g.minRule = rule
	return g
}

func (g *fakeGroup) TemplateNode(context.Context) (*corev1.Node, error) {
	if g.templateErr != nil {
		return nil, g.templateErr
	}
	if g.template == nil {
		return nil, errors.New("no capacity information")
	}
	return g.template, nil
}

func (g *fakeGroup) IncreaseSize(_ context.Context, delta int) error {
	if g.increaseErr != nil {
		return g.increaseErr
	}
	g.increases = append(g.increases, delta)
	g.target += delta
	return nil
}

func (g *fakeGroup) DeleteInstances(_ context.Context, instances []nodegroups.Instance) error {
	for _, instance := range instances {
		g.deletedInstances = append(g.deletedInstances, instance.ID)
		g.instances = slices.DeleteFunc(g.instances, func(i nodegroups.Instance) bool { return i.ID == instance.ID })
		g.target--
	}
	return nil
}

func (g *fakeGroup) CheckScaleDown(_ context.Context, removing int) error {
	if g.checkPanic != nil {
		panic(g.checkPanic)
	}
	if g.scaleDownRefusal != nil {
		return g.scaleDownRefusal
	}
	if g.target-removing < g.MinSize() {
		return &nodegroups.RefusedError{Reason: fmt.Sprintf("size %d would go below the minimum %d", g.target-removing, g.MinSize())}
	}
	return nil
}

func (g *fakeGroup) CancelDeletion(_ context.Context, nodes []*corev1.Node) error {
	for _, node := range nodes {
		g.cancelled = append(g.cancelled, node.Name)
	}
	return nil
}

func (g *fakeGroup) DeleteNodes(ctx context.Context, nodes []*corev1.Node) error {
	if err := g.CheckScaleDown(ctx, len(nodes)); err != nil {
		return err
	}
	for _, node := range nodes {
		g.deletedNodes = append(g.deletedNodes, node.Name)
		g.instances = slices.DeleteFunc(g.instances, func(i nodegroups.Instance) bool { return i.NodeName == node.Name })
		g.target--
	}
	return nil
}

func (g *fakeGroup) DecreaseTargetSize(_ context.Context, delta int) error {
	g.decreases = append(g.decreases, delta)
	g.target -= delta
	return nil
}

// addNodes gives the group n running instances with Ready nodes.
func (g *fakeGroup) addNodes(n int, opts ...st.NodeOption) []*corev1.Node {
	var nodes []*corev1.Node
	for range n {
		name := fmt.Sprintf("%s-%d", strings.ReplaceAll(g.id, "/", "-"), len(g.instances))
		node := st.Node(name, "4", "16Gi", opts...)
		g.instances = append(g.instances, nodegroups.Instance{ID: "fake://" + name, NodeName: name, State: nodegroups.InstanceRunning, Removable: true})
		g.target++
		nodes = append(nodes, node)
	}
	return nodes
}

type fakeProvider struct {
	groups   []*fakeGroup
	problems []nodegroups.Problem
}

func (p *fakeProvider) NodeGroups(context.Context) (nodegroups.List, error) {
	list := nodegroups.List{Problems: p.problems}
	for _, g := range p.groups {
		// Read afresh: the min size of the annotations.
		g.minRule = nil
		list.Groups = append(list.Groups, g)
	}
	return list, nil
}

type groupEvent struct{ groupID, eventType, reason, message string }

type fakeGroupRecorder struct{ events []groupEvent }

func (r *fakeGroupRecorder) Event(groupID, eventType, reason, message string) {
	r.events = append(r.events, groupEvent{groupID, eventType, reason, message})
}

func (r *fakeGroupRecorder) reasons(groupID string) []string {
	var reasons []string
	for _, e := range r.events {
		if e.groupID == groupID {
			reasons = append(reasons, e.reason)
		}
	}
	return reasons
}

// fixture is one cluster under test with a fake clock.
type fixture struct {
	clock         *clocktesting.FakeClock
	cluster       client.Client
	clientset     *kubefake.Clientset
	provider      *fakeProvider
	recorder      *record.FakeRecorder
	groupRecorder *fakeGroupRecorder
	metrics       *autoscaler.Metrics
	registry      *prometheus.Registry
	engine        *autoscaler.Engine
}

// mustSettings are the settings of config for an engine on clk.
func mustSettings(tb testing.TB, config autoscaler.Config, clk clock.PassiveClock) *autoscaler.Settings {
	tb.Helper()
	settings, err := autoscaler.NewSettings(config, clk)
	if err != nil {
		tb.Fatal(err)
	}
	return settings
}

// apply has the fixture's engine run with config from the next loop on.
func (f *fixture) apply(t *testing.T, config autoscaler.Config) {
	t.Helper()
	f.engine.Apply(mustSettings(t, config, f.clock))
}

// newFixture returns the engine of a cluster with the objects, and with
// the controllers its pods name, as a real cluster has them.
func newFixture(t *testing.T, groups []*fakeGroup, objects ...client.Object) *fixture {
	t.Helper()
	objects = append(objects, controllersOf(t, objects)...)
	var runtimeObjects []runtime.Object
	for _, object := range objects {
		runtimeObjects = append(runtimeObjects, object.DeepCopyObject())
	}
	f := &fixture{
		clock:         clocktesting.NewFakeClock(st.Now),
		cluster:       fake.NewClientBuilder().WithObjects(objects...).Build(),
		clientset:     kubefake.NewClientset(runtimeObjects...),
		provider:      &fakeProvider{groups: groups},
		recorder:      &record.FakeRecorder{Events: make(chan string, 10000), IncludeObject: true},
		groupRecorder: &fakeGroupRecorder{},
		registry:      prometheus.NewRegistry(),
	}
	f.metrics = autoscaler.NewMetrics(f.registry)
	return f.with(t, func(*autoscaler.Options) {})
}

// with gives the fixture a new engine of its cluster, with the options
// change makes to the usual ones.
func (f *fixture) with(t *testing.T, change func(*autoscaler.Options)) *fixture {
	t.Helper()
	opts := autoscaler.Options{
		ClusterName:   "default/workload",
		Settings:      mustSettings(t, autoscaler.DefaultConfig(), f.clock),
		NodeGroups:    f.provider,
		Owner:         testOwner,
		Cluster:       f.cluster,
		Clientset:     f.clientset,
		Recorder:      f.recorder,
		GroupRecorder: f.groupRecorder,
		Metrics:       f.metrics,
		Clock:         f.clock,
	}
	change(&opts)
	engine, err := autoscaler.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f.engine = engine
	return f
}

// controllersOf returns the controllers that the pods among objects name,
// of the kinds whose existence decides whether a pod may be evicted
// (scaledown.ReplicatingControllers).
func controllersOf(t *testing.T, objects []client.Object) []client.Object {
	t.Helper()
	var pods []*corev1.Pod
	for _, object := range objects {
		if pod, ok := object.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	var controllers []client.Object
	for _, metadata := range st.Controllers(pods...) {
		if !slices.Contains(scaledown.ReplicatingControllers, metadata.GroupVersionKind()) {
			continue
		}
		object, err := clientgoscheme.Scheme.New(metadata.GroupVersionKind())
		if err != nil {
			t.Fatal(err)
		}
		controller := object.(client.Object)
		controller.SetNamespace(metadata.Namespace)
		controller.SetName(metadata.Name)
		controller.SetUID(metadata.UID)
		controllers = append(controllers, controller)
	}
	return controllers
}

// engineReading returns another engine of the fixture's cluster, which
// reads it through cluster and waits 100ms at most for the reads a loop
// goes on without.
func (f *fixture) engineReading(t *testing.T, cluster client.Reader) *autoscaler.Engine {
	t.Helper()
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload", Settings: mustSettings(t, autoscaler.DefaultConfig(), f.clock), NodeGroups: f.provider,
		Cluster:             cluster,
		OptionalReadTimeout: 100 * time.Millisecond,
		Clientset:           f.clientset, Recorder: f.recorder, Clock: f.clock, Owner: testOwner,
	})
	if err != nil {
		t.Fatal(err)
	}
	return engine
}

// start runs an engine of the fixture's cluster with provider and config
// until the test ends; onStatus is called after every loop.
func (f *fixture) start(t *testing.T, provider nodegroups.Provider, config autoscaler.Config, onStatus func(autoscaler.Status)) *autoscaler.Engine {
	t.Helper()
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload", Settings: mustSettings(t, config, f.clock), NodeGroups: provider,
		Cluster: f.cluster, Clientset: f.clientset, Recorder: f.recorder, Clock: f.clock,
		OnStatus: onStatus, Owner: testOwner,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = engine.Run(ctx) }()
	return engine
}

func (f *fixture) runOnce(t *testing.T) autoscaler.Status {
	t.Helper()
	status := f.engine.RunOnce(context.Background(), f.clock.Now())
	if status.Err != nil {
		t.Fatalf("loop failed: %v", status.Err)
	}
	return status
}

// runPastUnneededTime runs a loop, then another once the default unneeded
// time is over, and returns the status of the second.
func (f *fixture) runPastUnneededTime(ctx context.Context, t *testing.T) autoscaler.Status {
	t.Helper()
	first := f.engine.RunOnce(ctx, f.clock.Now())
	f.clock.Step(10*time.Minute + time.Second)
	second := f.engine.RunOnce(ctx, f.clock.Now())
	if err := errors.Join(first.Err, second.Err); err != nil {
		t.Fatalf("loop failed: %v", err)
	}
	return second
}

// bufferEventObject ends the events the fake recorder records on a
// CapacityBuffer.
const bufferEventObject = " involvedObject{kind=CapacityBuffer,apiVersion=autoscaling.x-k8s.io/v1beta1}"

// podEvents are the events recorded on pods and nodes since the last call,
// as "type reason message"; bufferEvents those on CapacityBuffers. Each
// takes the events of both.
func (f *fixture) podEvents() []string {
	pods, _ := f.events()
	return pods
}

func (f *fixture) bufferEvents() []string {
	_, buffers := f.events()
	return buffers
}

func (f *fixture) events() (pods, buffers []string) {
	for {
		select {
		case e := <-f.recorder.Events:
			if event, ok := strings.CutSuffix(e, bufferEventObject); ok {
				buffers = append(buffers, event)
				continue
			}
			pods = append(pods, e[:strings.LastIndex(e, " involvedObject{")])
		default:
			return pods, buffers
		}
	}
}

// objects returns the nodes and pods as client objects for the fake cluster.
func objects(nodes []*corev1.Node, pods ...*corev1.Pod) []client.Object {
	var out []client.Object
	for _, node := range nodes {
		out = append(out, node)
	}
	for _, pod := range pods {
		out = append(out, pod)
	}
	return out
}

func templateNode() *corev1.Node { return st.Node("template", "4", "16Gi") }

func groupRow(status autoscaler.Status, id string) autoscaler.NodeGroupStatus {
	for _, row := range status.NodeGroups {
		if row.ID == id {
			return row
		}
	}
	return autoscaler.NodeGroupStatus{}
}

func TestScaleUpForUnschedulablePods(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	pods := st.Replicas("web", 3, "3", "1Gi")
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{2}), "two more 4-cpu nodes fit the three 3-cpu pods with the existing one")
	g.Expect(status.LastScaleUp).To(Equal(st.Now))
	g.Expect(status.UnschedulablePods).To(Equal(3))
	g.Expect(status.ClusterHealthy).To(BeTrue())
	g.Expect(status.ScalingActive).To(BeTrue())
	g.Expect(groupRow(status, group.id)).To(Equal(autoscaler.NodeGroupStatus{
		ID: group.id, Autoscaled: true, MaxSize: 10, TargetSize: 3, Registered: 1, Ready: 1, Upcoming: 2,
		Price: pricing.Quote{PerHour: 203_832, Source: pricing.SourceDefault},
	}))
	g.Expect(f.groupRecorder.reasons(group.id)).To(ConsistOf(autoscaler.EventScaledUpGroup))
	g.Expect(f.podEvents()).To(HaveEach(ContainSubstring("TriggeredScaleUp pod triggered scale-up: [{MachineDeployment/default/md-0 1->3 (max: 10)}]")))

	g.Expect(f.metric(t, "cluster_autoscaler_scaled_up_nodes_total", "")).To(Equal(2.0))
	g.Expect(f.metric(t, "cluster_autoscaler_node_group_target_count", group.id)).To(Equal(3.0))
	g.Expect(f.metric(t, "cluster_autoscaler_unschedulable_pods_count", "")).To(Equal(3.0))
	g.Expect(f.metric(t, "cluster_autoscaler_cluster_safe_to_autoscale", "")).To(Equal(1.0))

	status = f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{2}), "the next loop sees the upcoming nodes and adds none")
	g.Expect(groupRow(status, group.id).Upcoming).To(Equal(2))
}

// podLister serves pods through ListPods only, as the controller's cache
// reader does.
type podLister struct {
	client.Reader
	pods []*snapshot.Pod
}

func (l podLister) ListPods(context.Context) ([]*snapshot.Pod, error) { return l.pods, nil }

func compact(pods []*corev1.Pod) []*snapshot.Pod {
	out := make([]*snapshot.Pod, len(pods))
	for i, pod := range pods {
		out[i] = snapshot.NewPod(pod)
	}
	return out
}

func TestPodsAreReadFromAPodLister(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group}, objects(group.addNodes(1))...)
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload", Settings: mustSettings(t, autoscaler.DefaultConfig(), f.clock), NodeGroups: f.provider,
		Cluster:   podLister{Reader: f.cluster, pods: compact(st.Replicas("web", 3, "3", "1Gi"))},
		Clientset: f.clientset, Recorder: f.recorder, Clock: f.clock, Owner: testOwner,
	})
	g.Expect(err).NotTo(HaveOccurred())

	status := engine.RunOnce(context.Background(), f.clock.Now())

	g.Expect(status.Err).NotTo(HaveOccurred())
	g.Expect(status.UnschedulablePods).To(Equal(3), "the pods only the lister knows")
	g.Expect(group.increases).To(Equal([]int{2}))
}

func TestPodsNoGroupCanHelpAreExplained(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 1, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	pods := st.Replicas("big", 2, "3", "1Gi")
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(status.NotTriggerScaleUpReasons).To(HaveLen(1))
	g.Expect(status.NotTriggerScaleUpReasons[0].Pods).To(Equal(2))
	g.Expect(status.NotTriggerScaleUpReasons[0].Reason).To(ContainSubstring("max node group size reached"))
	g.Expect(f.podEvents()).To(HaveEach(ContainSubstring("NotTriggerScaleUp pod didn't trigger scale-up")))
}

// A pod that waits for no scale-up is told why once, not in every loop: a
// busy cluster paid an event write per pending pod per loop. It is told
// again when the reason changes, and every few minutes while it waits.
func TestPodsNoGroupCanHelpAreToldOncePerReason(t *testing.T) {
	g := NewWithT(t)
	full := &fakeGroup{id: "MachineDeployment/default/md-0", max: 1, template: templateNode()}
	nodes := full.addNodes(1, st.Unschedulable())
	f := newFixture(t, []*fakeGroup{full}, objects(nodes, st.Pod("big-0", "3", "1Gi", st.OwnedBy("big")))...)
	loop := func(after time.Duration) int {
		f.clock.Step(after)
		f.runOnce(t)
		return len(f.podEvents())
	}

	g.Expect(loop(0)).To(Equal(1), "the first loop tells the pod")
	g.Expect(loop(time.Second)).To(BeZero(), "the same reason is not told again")
	g.Expect(loop(time.Second)).To(BeZero(), "the same reason is not told again")

	f.provider.groups = append(f.provider.groups, &fakeGroup{id: "MachineDeployment/default/md-1", max: 0, template: templateNode()})
	g.Expect(loop(time.Second)).To(Equal(1), "a new reason is told")
	g.Expect(loop(time.Second)).To(BeZero())
	g.Expect(loop(5*time.Minute)).To(Equal(1), "the pod is told again after five minutes")
}

func TestMisconfiguredGroupIsReportedInAnEventOnceAndInTheStatus(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 3, template: templateNode()}
	nodes := group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	bad := nodegroups.Problem{ID: "MachineDeployment/default/bad", Reason: "InvalidAnnotation", Message: "min size 3 greater than max size 1"}
	f.provider.problems = []nodegroups.Problem{bad}

	status := f.runOnce(t)
	f.runOnce(t)

	g.Expect(groupRow(status, bad.ID).Problem).To(Equal(bad.Message))
	g.Expect(f.groupRecorder.events).To(ConsistOf(groupEvent{bad.ID, corev1.EventTypeWarning, bad.Reason, bad.Message}),
		"one event while the problem stays the same")

	bad.Message = "max size not an integer"
	f.provider.problems = []nodegroups.Problem{bad}
	f.runOnce(t)
	g.Expect(f.groupRecorder.reasons(bad.ID)).To(HaveLen(2), "a new event when the problem changes")

	f.provider.problems = nil
	f.runOnce(t)
	f.provider.problems = []nodegroups.Problem{bad}
	f.runOnce(t)
	g.Expect(f.groupRecorder.reasons(bad.ID)).To(HaveLen(3), "a new event when the problem comes back")
}

func TestGroupWithAProblemThatOnlyLimitsItKeepsItsRowAndScales(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 3, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 1, "3", "1Gi")...)...)
	problem := nodegroups.Problem{ID: group.id, Reason: "InvalidAnnotation", Message: "cpu annotation is not a quantity", Kept: true}
	f.provider.problems = []nodegroups.Problem{problem}

	status := f.runOnce(t)

	g.Expect(group.increases).To(Equal([]int{1}), "the group scales up from its nodes")
	g.Expect(status.NodeGroups).To(ConsistOf(MatchFields(IgnoreExtras, Fields{
		"ID": Equal(group.id), "Autoscaled": BeTrue(), "MaxSize": Equal(3), "Problem": Equal(problem.Message),
	})), "one row with both the group's sizes and its problem")
	g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{group.id, corev1.EventTypeWarning, problem.Reason, problem.Message}))
}

// The rows show what the engine believes a node of each group costs, and
// where that comes from; a group whose price annotation is wrong says so
// on its row and in an event, and is priced, and chosen by the price
// expander, as a group without one.
func TestGroupRowsShowThePricesThePriceExpanderUses(t *testing.T) {
	g := NewWithT(t)
	annotated := &fakeGroup{id: "MachineDeployment/default/annotated", max: 3, price: ptr.To[pricing.Price](250_000)}
	badPrice := &fakeGroup{id: "MachineDeployment/default/bad-price", max: 3}
	listed := &fakeGroup{id: "MachineDeployment/default/listed", max: 3}
	zeroNodes := &fakeGroup{id: "MachineDeployment/default/zero-nodes", max: 3, template: templateNode()}
	nodes := slices.Concat(annotated.addNodes(1), badPrice.addNodes(1), listed.addNodes(1, st.WithNodeLabels(corev1.LabelInstanceTypeStable, "m5.xlarge")))
	// Each node has 2 of its 4 cpu left: the pending pod needs a new one.
	var pods []*corev1.Pod
	for _, node := range nodes {
		pods = append(pods, st.Pod("busy-"+node.Name, "2", "1Gi", st.OnNode(node.Name), st.OwnedBy("busy")))
	}
	pods = append(pods, st.Replicas("web", 1, "3", "1Gi")...)
	f := newFixture(t, []*fakeGroup{annotated, badPrice, listed, zeroNodes}, objects(nodes, pods...)...)
	config := autoscaler.DefaultConfig()
	config.Expanders = []string{scaleup.ExpanderPrice}
	config.InstanceTypePrices = pricing.Table{"m5.xlarge": 500_000}
	f.apply(t, config)
	problem := nodegroups.Problem{ID: badPrice.id, Reason: "InvalidPriceAnnotation", Kept: true,
		Message: `annotation "capacity.cluster-autoscaler.kubernetes.io/price"="-1": not a decimal price`}
	f.provider.problems = []nodegroups.Problem{problem}

	status := f.runOnce(t)

	// 4 cpu and 16 GiB at the default rates: 4 × 0.033174 + 16 × 0.004446.
	defaultPrice := pricing.Quote{PerHour: 203_832, Source: pricing.SourceDefault}
	g.Expect(groupRow(status, annotated.id).Price).To(Equal(pricing.Quote{PerHour: 250_000, Source: pricing.SourceNodeGroup}))
	g.Expect(groupRow(status, listed.id).Price).To(Equal(pricing.Quote{PerHour: 500_000, Source: pricing.SourceInstanceType}))
	g.Expect(groupRow(status, badPrice.id)).To(MatchFields(IgnoreExtras, Fields{"Problem": Equal(problem.Message), "Price": Equal(defaultPrice)}))
	g.Expect(groupRow(status, zeroNodes.id).Price).To(Equal(defaultPrice), "priced from the template built for the pending pod")
	g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{badPrice.id, corev1.EventTypeWarning, problem.Reason, problem.Message}))
	g.Expect(badPrice.increases).To(Equal([]int{1}), "the cheapest option; zero-nodes, at the same price, is later by ID")
	g.Expect(annotated.increases).To(BeEmpty())
	g.Expect(listed.increases).To(BeEmpty())

	// Without pending pods no template is built: the group at zero nodes
	// keeps the price of the one built before.
	g.Expect(f.cluster.Delete(t.Context(), pods[len(pods)-1])).To(Succeed())
	status = f.runOnce(t)
	g.Expect(status.UnschedulablePods).To(BeZero())
	g.Expect(groupRow(status, zeroNodes.id).Price).To(Equal(defaultPrice))
}

// A group whose template cannot be read (its kind's informer cannot sync,
// say) is reported on its row and in one Warning event while pods need
// it, and the other groups scale up in the same loop. A group whose
// template has no capacity is an answer, which the pods' events explain.
func TestGroupWhoseTemplateCannotBeReadIsReportedAndTheOthersScaleUp(t *testing.T) {
	g := NewWithT(t)
	readErr := errors.New("timed out after 10s waiting for the manager's cache of OtherMachineTemplate.infrastructure.example.com")
	unreadable := &fakeGroup{id: "MachineDeployment/default/unreadable", max: 3, templateErr: &nodegroups.ReadError{Err: readErr}}
	withoutCapacity := &fakeGroup{id: "MachineDeployment/default/without-capacity", max: 3}
	healthy := &fakeGroup{id: "MachineDeployment/default/healthy", max: 3, template: templateNode()}
	f := newFixture(t, []*fakeGroup{unreadable, withoutCapacity, healthy}, objects(nil, st.Replicas("web", 1, "3", "1Gi")...)...)

	status := f.runOnce(t)

	g.Expect(healthy.increases).To(Equal([]int{1}), "the healthy group scales up in the same loop")
	message := "cannot scale up from zero: " + readErr.Error()
	g.Expect(groupRow(status, unreadable.id)).To(MatchFields(IgnoreExtras, Fields{"Autoscaled": BeTrue(), "Problem": Equal(message)}))
	g.Expect(groupRow(status, withoutCapacity.id).Problem).To(BeEmpty())
	g.Expect(groupRow(status, healthy.id).Problem).To(BeEmpty())
	g.Expect(f.groupRecorder.events).To(ContainElement(groupEvent{unreadable.id, corev1.EventTypeWarning, nodegroups.ReasonTemplateUnreadable, message}))
	g.Expect(f.groupRecorder.reasons(withoutCapacity.id)).To(BeEmpty())

	// The next loop, the pod still pending, reports the same problem
	// without a new event.
	status = f.runOnce(t)
	g.Expect(groupRow(status, unreadable.id).Problem).To(Equal(message))
	g.Expect(f.groupRecorder.reasons(unreadable.id)).To(ConsistOf(nodegroups.ReasonTemplateUnreadable))
}

func TestTimedOutScaleUpBacksOffAndCorrectsTheTarget(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 2, "3", "1Gi")...)...)
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{2}))

	// One machine appears, and the next loop sees it, but it never gets a
	// node; the other never appears.
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://stuck", State: nodegroups.InstanceCreating, Removable: true})
	f.clock.Step(10 * time.Second)
	f.runOnce(t)
	f.clock.Step(14*time.Minute - 10*time.Second)
	f.runOnce(t)
	g.Expect(f.groupRecorder.reasons(group.id)).NotTo(ContainElement(autoscaler.EventScaleUpTimedOut), "not before maxNodeProvisionTime")

	f.clock.Step(2 * time.Minute)
	status := f.runOnce(t)

	g.Expect(f.groupRecorder.reasons(group.id)).To(ContainElement(autoscaler.EventScaleUpTimedOut))
	g.Expect(group.decreases).To(Equal([]int{1}), "the machine that was never created is given up")
	g.Expect(group.deletedInstances).To(Equal([]string{"fake://stuck"}), "the machine that never registered is removed")
	g.Expect(group.target).To(Equal(1))
	row := groupRow(status, group.id)
	g.Expect(row.BackoffUntil).To(Equal(f.clock.Now().Add(5 * time.Minute)))
	g.Expect(row.BackoffReason).To(ContainSubstring("did not register within 15m0s"))
	g.Expect(f.metric(t, "cluster_autoscaler_node_group_backoff_status", group.id)).To(Equal(1.0))
	g.Expect(group.increases).To(Equal([]int{2}), "a group in backoff is not scaled up again")
}

func TestFailedInstanceBacksOffAndAnotherGroupServesThePodsInTheSameLoop(t *testing.T) {
	g := NewWithT(t)
	broken := &fakeGroup{id: "MachineDeployment/default/a-broken", max: 10, template: templateNode()}
	healthy := &fakeGroup{id: "MachineDeployment/default/b-healthy", max: 10, template: templateNode()}
	nodes := append(broken.addNodes(1, st.Unschedulable()), healthy.addNodes(1, st.Unschedulable())...)
	broken.target++
	failed := nodegroups.Instance{
		ID: "fake://failed", State: nodegroups.InstanceCreating, Removable: true,
		Error: &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "quota exceeded"},
	}
	broken.instances = append(broken.instances, failed)
	f := newFixture(t, []*fakeGroup{broken, healthy}, objects(nodes, st.Replicas("web", 2, "3", "1Gi")...)...)

	status := f.runOnce(t)

	g.Expect(broken.deletedInstances).To(Equal([]string{"fake://failed"}))
	g.Expect(broken.increases).To(BeEmpty())
	g.Expect(healthy.increases).To(Equal([]int{2}))
	g.Expect(f.groupRecorder.reasons(broken.id)).To(ContainElement(autoscaler.EventFailedToScaleUpGroup))
	row := groupRow(status, broken.id)
	g.Expect(row.BackoffUntil).To(Equal(st.Now.Add(5 * time.Minute)))
	g.Expect(row.BackoffReason).To(ContainSubstring("quota exceeded"))

	// The infrastructure takes a while to start deleting the machine.
	broken.instances = append(broken.instances, failed)
	f.clock.Step(time.Second)
	f.runOnce(t)
	g.Expect(f.groupRecorder.reasons(broken.id)).To(HaveLen(1), "one failure, one event")
	g.Expect(f.metric(t, "cluster_autoscaler_failed_scale_ups_total", "")).To(Equal(1.0))
	g.Expect(broken.deletedInstances).To(Equal([]string{"fake://failed", "fake://failed"}), "the deletion is asked for again")
}

func TestInstancesThatNeverRegisterAreRemoved(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	group.target++
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://ghost", State: nodegroups.InstanceCreating, Removable: true})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)

	f.runOnce(t)
	f.clock.Step(15*time.Minute - time.Second)
	f.runOnce(t)
	g.Expect(group.deletedInstances).To(BeEmpty(), "still within maxNodeProvisionTime")

	f.clock.Step(time.Second)
	status := f.runOnce(t)
	g.Expect(group.deletedInstances).To(Equal([]string{"fake://ghost"}))
	g.Expect(f.groupRecorder.reasons(group.id)).To(ContainElement(autoscaler.EventDeleteUnregistered))
	g.Expect(groupRow(status, group.id).LongUnregistered).To(Equal(1))
}

func TestBrokenInstancesAreNotRemovedBelowTheMinSize(t *testing.T) {
	ghost := nodegroups.Instance{ID: "fake://ghost", State: nodegroups.InstanceCreating, Removable: true}
	failed := nodegroups.Instance{
		ID: "fake://failed", State: nodegroups.InstanceCreating, Removable: true,
		Error: &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "quota exceeded"},
	}
	tests := []struct {
		name string
		// broken are the group's instances besides its node; its min
		// size is 2.
		broken           []nodegroups.Instance
		wantDeleted      []string
		wantUnregistered int
	}{
		{
			name: "a long-unregistered instance", broken: []nodegroups.Instance{ghost}, wantUnregistered: 1,
		},
		{
			name: "a failed instance", broken: []nodegroups.Instance{failed},
		},
		{
			name: "one above the min size: the failed instance goes first", broken: []nodegroups.Instance{ghost, failed},
			wantDeleted: []string{"fake://failed"}, wantUnregistered: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 2, max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			group.target += len(tt.broken)
			group.instances = append(group.instances, tt.broken...)
			f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
			f.runOnce(t)

			f.clock.Step(15 * time.Minute)
			var status autoscaler.Status
			for range 3 {
				f.clock.Step(10 * time.Second)
				status = f.runOnce(t)
			}

			g.Expect(group.deletedInstances).To(Equal(tt.wantDeleted), "the group is at its min size")
			g.Expect(f.groupRecorder.reasons(group.id)).NotTo(ContainElement(autoscaler.EventDeleteUnregistered), "no removal announced each loop")
			g.Expect(groupRow(status, group.id).LongUnregistered).To(Equal(tt.wantUnregistered))
			g.Expect(groupRow(status, group.id).Problem).To(ContainSubstring("1 failed or long-unregistered instance(s) kept: removing them would take the group below its min size 2"))
		})
	}
}

func TestMachineWhoseNodeWasDeletedIsKeptForTheProvisionTime(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	config := autoscaler.DefaultConfig()
	config.ScaleDown.Enabled = false // the empty nodes stay
	f.apply(t, config)
	f.runOnce(t)
	f.clock.Step(time.Hour)
	f.runOnce(t)

	// kubectl delete node: the Machine, registered for longer than the
	// provision time, stays without a node.
	g.Expect(f.cluster.Delete(context.Background(), nodes[1])).To(Succeed())
	group.instances[1].NodeName, group.instances[1].State = "", nodegroups.InstanceCreating
	lost := group.instances[1].ID
	f.clock.Step(10 * time.Second)
	status := f.runOnce(t)
	g.Expect(group.deletedInstances).To(BeEmpty(), "its unregistered time starts now, not at its creation")
	g.Expect(group.target).To(Equal(2))
	g.Expect(groupRow(status, group.id).Upcoming).To(Equal(1), "it is awaited meanwhile")

	f.clock.Step(15*time.Minute - time.Second)
	f.runOnce(t)
	g.Expect(group.deletedInstances).To(BeEmpty(), "one second short of maxNodeProvisionTime without a node")

	f.clock.Step(time.Second)
	status = f.runOnce(t)
	g.Expect(group.deletedInstances).To(Equal([]string{lost}))
	g.Expect(f.groupRecorder.reasons(group.id)).To(ContainElement(autoscaler.EventDeleteUnregistered))
	g.Expect(groupRow(status, group.id).LongUnregistered).To(Equal(1))
}

func unready(node *corev1.Node) {
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	node.CreationTimestamp = metav1.NewTime(st.Now.Add(-time.Hour))
}

func TestUnhealthyClusterOnlyRemovesUnregisteredInstances(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 20, template: templateNode()}
	nodes := group.addNodes(8)
	for _, node := range nodes[:5] {
		unready(node)
	}
	group.target++
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://ghost", State: nodegroups.InstanceCreating, Removable: true})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 5, "3", "1Gi")...)...)
	f.runOnce(t)
	g.Expect(group.deletedInstances).To(BeEmpty(), "still within maxNodeProvisionTime")

	f.clock.Step(15 * time.Minute)
	status := f.runOnce(t)

	g.Expect(status.ClusterHealthy).To(BeFalse())
	g.Expect(status.HealthMessage).To(ContainSubstring("5 of 8 registered node(s) unready"))
	g.Expect(status.ScalingActive).To(BeFalse())
	g.Expect(group.increases).To(BeEmpty(), "no scale-up while unhealthy")
	g.Expect(group.deletedInstances).To(Equal([]string{"fake://ghost"}), "long-unregistered instances are still removed")
	g.Expect(f.metric(t, "cluster_autoscaler_cluster_safe_to_autoscale", "")).To(Equal(0.0))
}

func TestUnhealthyGroupIsSkippedOnItsOwn(t *testing.T) {
	g := NewWithT(t)
	sick := &fakeGroup{id: "MachineDeployment/default/a-sick", max: 20, template: templateNode()}
	fine := &fakeGroup{id: "MachineDeployment/default/b-fine", max: 20, template: templateNode()}
	sickNodes := sick.addNodes(5, st.Unschedulable())
	for _, node := range sickNodes[:4] {
		unready(node)
	}
	nodes := slices.Concat(sickNodes, fine.addNodes(10, st.Unschedulable()))
	f := newFixture(t, []*fakeGroup{sick, fine}, objects(nodes, st.Replicas("web", 2, "3", "1Gi")...)...)

	status := f.runOnce(t)

	g.Expect(status.ClusterHealthy).To(BeTrue(), "4 of 15 unready is within 45%")
	g.Expect(sick.increases).To(BeEmpty())
	g.Expect(fine.increases).NotTo(BeEmpty())
}

func TestTriggerRunsALoopBeforeTheScanInterval(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group}, objects(group.addNodes(1))...)
	loops := make(chan autoscaler.Status, 10)
	engine := f.start(t, f.provider, autoscaler.DefaultConfig(), func(s autoscaler.Status) { loops <- s })

	g.Eventually(loops).Should(Receive(), "the first loop runs at once")
	g.Eventually(f.clock.HasWaiters).Should(BeTrue())
	idle := func() { f.clock.Step(autoscaler.DefaultConfig().MinLoopInterval) }

	idle()
	start := f.clock.Now()
	engine.Trigger()
	engine.Trigger() // a burst shares one loop
	status := f.nextLoop(g, engine, loops, false)
	g.Expect(status.Time).To(BeTemporally("<=", start.Add(350*time.Millisecond)),
		"once triggers stop, the loop runs after the 200ms quiet period, not the 10s scan interval")
	f.expectNoLoopFor(g, loops, 2*autoscaler.DefaultConfig().MinLoopInterval, "both triggers were served by one loop")

	idle()
	start = f.clock.Now()
	engine.Trigger()
	status = f.nextLoop(g, engine, loops, true)
	g.Expect(status.Time).To(BeTemporally("~", start.Add(500*time.Millisecond), 100*time.Millisecond),
		"triggers that keep coming are served 500ms after the first")
}

// Under pod churn every loop finds new triggers waiting: loops must not
// follow each other every batch window, and a trigger after a quieter
// spell must not wait.
func TestLoopsUnderAStreamOfTriggersStartAtMostOncePerMinLoopInterval(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group}, objects(group.addNodes(1))...)
	loops := make(chan autoscaler.Status, 10)
	config := autoscaler.DefaultConfig()
	engine := f.start(t, f.provider, config, func(s autoscaler.Status) { loops <- s })
	g.Eventually(loops).Should(Receive())
	g.Eventually(f.clock.HasWaiters).Should(BeTrue())

	last := f.nextLoop(g, engine, loops, true)
	for range 5 {
		status := f.nextLoop(g, engine, loops, true)
		g.Expect(status.Time.Sub(last.Time)).To(BeNumerically(">=", config.MinLoopInterval),
			"a loop starts at least the minimum loop interval after the one before")
		g.Expect(status.Time.Sub(last.Time)).To(BeNumerically("<", config.MinLoopInterval+config.TriggerBatchWindow),
			"and no later than its batch window would have it")
		last = status
	}

	f.quiesce(g, loops)
	start := f.clock.Now()
	engine.Trigger()
	status := f.nextLoop(g, engine, loops, false)
	g.Expect(status.Time).To(BeTemporally("<=", start.Add(config.TriggerQuietPeriod+100*time.Millisecond)),
		"a lone trigger after a quieter spell waits only for the quiet period")

	f.quiesce(g, loops)
	f.clock.Step(config.ScanInterval)
	g.Eventually(loops).Should(Receive(&last), "the loop of the scan interval")
	g.Eventually(f.clock.HasWaiters).Should(BeTrue())
	engine.Trigger()
	status = f.nextLoop(g, engine, loops, false)
	g.Expect(status.Time).To(BeTemporally("<=", last.Time.Add(config.TriggerQuietPeriod+100*time.Millisecond)),
		"a loop of the scan interval does not hold back a trigger right after it")
}

// quiesce steps the fake clock by 50ms, taking in the loops of the
// triggers still pending, until a second of it passed without a loop.
func (f *fixture) quiesce(g Gomega, loops <-chan autoscaler.Status) {
	quiet := 0
	g.Eventually(func() bool {
		f.clock.Step(50 * time.Millisecond)
		select {
		case <-loops:
			quiet = 0
		default:
			quiet++
		}
		return quiet >= 20
	}).Should(BeTrue())
}

// expectNoLoopFor steps the fake clock by d, 50ms at a time, giving the
// engine a moment after each step, and expects no loop to run.
func (f *fixture) expectNoLoopFor(g Gomega, loops <-chan autoscaler.Status, d time.Duration, why string) {
	for stepped := time.Duration(0); stepped < d; stepped += 50 * time.Millisecond {
		f.clock.Step(50 * time.Millisecond)
		g.Consistently(loops, 10*time.Millisecond, time.Millisecond).ShouldNot(Receive(), why)
	}
}

// nextLoop steps the fake clock by 50ms, triggering the engine at each
// step when keepTriggering, until a loop runs, and returns its status.
func (f *fixture) nextLoop(g Gomega, engine *autoscaler.Engine, loops <-chan autoscaler.Status, keepTriggering bool) autoscaler.Status {
	var status autoscaler.Status
	g.Eventually(func() bool {
		if keepTriggering {
			engine.Trigger()
		}
		f.clock.Step(50 * time.Millisecond)
		select {
		case status = <-loops:
			return true
		default:
			return false
		}
	}).Should(BeTrue())
	return status
}

// metric returns the value of a gauge or counter for the fixture's cluster
// and, when given, a node group.
func (f *fixture) metric(t *testing.T, name, nodeGroup string) float64 {
	t.Helper()
	if nodeGroup == "" {
		return f.metricWith(t, name, nil)
	}
	return f.metricWith(t, name, map[string]string{"node_group": nodeGroup})
}

// metricWith returns the value of the first series of a gauge or counter
// for the fixture's cluster that has the labels.
func (f *fixture) metricWith(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	families, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if family.GetName() != name {
			continue
		}
		for _, metric := range family.GetMetric() {
			labels := map[string]string{}
			for _, label := range metric.GetLabel() {
				labels[label.GetName()] = label.GetValue()
			}
			if labels["cluster"] != "default/workload" || !labelsMatch(labels, want) {
				continue
			}
			if counter := metric.GetCounter(); counter != nil {
				return counter.GetValue()
			}
			return metric.GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s with labels %v not found", name, want)
	return 0
}

func labelsMatch(labels, want map[string]string) bool {
	for key, value := range want {
		if labels[key] != value {
			return false
		}
	}
	return true
}

func TestUnneededNodesAreRemovedAfterTheUnneededTime(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(3)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...)

	status := f.runOnce(t)
	g.Expect(status.UnneededNodes).To(Equal(2), "all nodes are below half utilization, but only two can go above the min size")
	g.Expect(group.deletedNodes).To(BeEmpty(), "not before the unneeded time")

	f.clock.Step(10*time.Minute + time.Second)
	status = f.runOnce(t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name, nodes[2].Name), "the empty nodes go, in bulk, down to the min size")
	g.Expect(status.LastScaleDown).To(Equal(f.clock.Now()))
	g.Expect(f.metricWith(t, "cluster_autoscaler_scaled_down_nodes_total", map[string]string{"reason": "underutilized", "mode": "Active"})).To(Equal(2.0))
	g.Expect(f.metric(t, "cluster_autoscaler_unneeded_nodes_count", "")).To(Equal(2.0))
}

func TestGroupsWaitingForNodesAreNotScaledDown(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	group.target++ // a third node is on its way
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)

	f.runOnce(t)
	f.clock.Step(11 * time.Minute)
	status := f.runOnce(t)

	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(status.UnneededNodes).To(BeZero())
	g.Expect(groupRow(status, group.id).Upcoming).To(Equal(1))
}

func TestConfigurationALoopWouldFailOnIsRefusedAsAWhole(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)

	bad := autoscaler.DefaultConfig()
	bad.MaxNodesPerScaleUp = 1
	bad.Expanders = []string{"priority"}
	bad.ExpanderPriorities = map[int32][]string{10: {"MachineDeployment/default/(md"}}
	settings, err := autoscaler.NewSettings(bad, f.clock)

	g.Expect(err).To(MatchError(ContainSubstring("missing closing )")))
	g.Expect(settings).To(BeNil(), "there is nothing to apply, not even the parts that are right")
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{3}), "the loop runs with the configuration it had, not one node per scale-up")
}

func TestConfigurationChangeKeepsUnneededTimers(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("web-0", "3", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...)

	g.Expect(f.runOnce(t).UnneededNodes).To(Equal(1))
	f.clock.Step(8 * time.Minute)
	f.runOnce(t)

	config := autoscaler.DefaultConfig()
	config.ScaleDown.UtilizationThreshold = 0.6
	f.apply(t, config)
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(group.deletedNodes).To(BeEmpty(), "unneeded for 9 of 10 minutes")

	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name), "removed 10 minutes after it became unneeded, not 10 minutes after the change")
}

func TestConfigurationChangeKeepsDrainsInProgress(t *testing.T) {
	g := NewWithT(t)
	f, group, _ := drainingFixture(t)
	const marked = "marked the node as toBeDeleted/unschedulable"
	g.Expect(f.podEvents()).To(ContainElement(ContainSubstring(marked)), "the drain started")

	config := autoscaler.DefaultConfig()
	config.ScaleDown.MaxGracefulTermination = 5 * time.Minute
	f.apply(t, config)
	f.clock.Step(10 * time.Second)
	f.runOnce(t)

	g.Expect(f.podEvents()).NotTo(ContainElement(ContainSubstring(marked)), "the drain goes on rather than starting over")
	g.Expect(group.deletedNodes).To(BeEmpty(), "the pod has not gone yet")
}

// A node added for pending pods that the scheduler has not bound yet (its
// backoff, a slow kubelet, a volume attaching) looks empty: scale-down
// must see the pods that will run there, or the node goes and comes back.
func TestNodesWaitingForPendingPodsAreNotRemoved(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3500m", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	waiting := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, waiting)...)

	status := f.runPastUnneededTime(context.Background(), t)

	g.Expect(group.increases).To(BeEmpty(), "the pending pod fits on the empty node, and only there")
	g.Expect(group.deletedNodes).To(BeEmpty(), "the node the pending pod waits for stays")
	g.Expect(status.UnneededNodes).To(BeZero())
}

// Only a pod that fits on a node holds it: one that fits nowhere does not
// keep an empty node from going.
func TestPendingPodsThatFitNowhereHoldNoNode(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	tooBig := st.Pod("huge-0", "8", "1Gi", st.OwnedBy("huge"))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, tooBig)...)

	f.runPastUnneededTime(context.Background(), t)

	g.Expect(group.deletedNodes).To(ConsistOf(nodes[1].Name))
}

// When a kubelet dies, taint-based eviction deletes its pods and nothing
// confirms their end: they stay terminating. The node goes once it has
// been unready for the unready time, in one removal, not tainted and
// given back loop after loop.
func TestDeadNodeWithPodsStuckTerminatingIsRemovedAfterTheUnreadyTime(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	alive, dead := nodes[0], nodes[1]
	unready(dead)
	evicted := st.Now.Add(-5 * time.Minute)
	pods := append(st.Replicas("web", 2, "1", "1Gi", st.OnNode(dead.Name), st.Terminating(evicted.Add(30*time.Second))),
		st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(alive.Name)))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)
	unreadyTime := autoscaler.DefaultConfig().ScaleDown.UnreadyTime

	for f.clock.Since(st.Now) < unreadyTime {
		status := f.runOnce(t)
		g.Expect(status.UnneededNodes).To(Equal(1))
		f.clock.Step(time.Minute)
	}
	g.Expect(group.deletedNodes).To(BeEmpty(), "not before the unready time")
	g.Expect(f.podEvents()).To(BeEmpty(), "nothing is tainted before the unready time")

	for range 3 {
		f.clock.Step(time.Minute)
		f.runOnce(t)
	}

	g.Expect(f.podEvents()).To(ConsistOf(ContainSubstring("marked the node as toBeDeleted/unschedulable")), "tainted once, never given back")
	g.Expect(group.deletedNodes).To(Equal([]string{dead.Name}))
}
