package autoscaler_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// drainingFixture is a cluster whose second node is being drained: its pod
// can move to the first node, and stays, as the fake clientset's evictions
// leave pods in place.
func drainingFixture(t *testing.T) (*fixture, *fakeGroup, []*corev1.Node) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	moving := st.Pod("web-1", "500m", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[1].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy, moving)...)
	f.runPastUnneededTime(context.Background(), t)
	NewWithT(t).Expect(f.tainted(t, nodes[1].Name)).To(BeTrue(), "the drain started")
	return f, group, nodes
}

func (f *fixture) tainted(t *testing.T, name string) bool {
	t.Helper()
	node, err := f.clientset.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return scaledown.HasDeletionTaint(node)
}

func TestTurningScaleDownOffGivesBackTheDrainsInProgress(t *testing.T) {
	g := NewWithT(t)
	f, group, nodes := drainingFixture(t)

	config := autoscaler.DefaultConfig()
	config.ScaleDown.Enabled = false
	f.apply(t, config)
	f.clock.Step(10 * time.Second)
	f.runOnce(t)

	g.Expect(f.tainted(t, nodes[1].Name)).To(BeFalse())
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(f.podEvents()).To(ContainElement(ContainSubstring("ScaleDownCancelled node released, its removal no longer holds: scale-down is disabled")))
}

func TestADrainWhoseGroupStartedRollingOutIsGivenBack(t *testing.T) {
	g := NewWithT(t)
	f, group, nodes := drainingFixture(t)

	group.scaleDownRefusal = &nodegroups.RefusedError{Reason: "MachineDeployment/default/md-0 is rolling out (2 active MachineSets)"}
	f.clock.Step(10 * time.Second)
	f.runOnce(t)

	g.Expect(f.tainted(t, nodes[1].Name)).To(BeFalse())
	g.Expect(group.deletedNodes).To(BeEmpty())
}

func TestStoppingTheEngineGivesBackTheDrainsInProgress(t *testing.T) {
	g := NewWithT(t)
	f, _, nodes := drainingFixture(t)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = f.engine.Run(ctx)
	}()
	cancel()
	<-done

	g.Expect(err).NotTo(HaveOccurred(), "a stop is not a failure")
	g.Expect(f.tainted(t, nodes[1].Name)).To(BeFalse(), "a paused or deleted autoscaler leaves no node tainted")
}

func TestAnotherAutoscalersTaintStopsAllScaling(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(2, st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)

	f.runOnce(t)
	f.clock.Step(11 * time.Minute)
	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(status.ScalingActive).To(BeFalse())
	g.Expect(status.OtherAutoscaler).To(ContainSubstring("carries a ToBeDeletedByClusterAutoscaler taint that this autoscaler did not place"))
	g.Expect(f.tainted(t, nodes[0].Name)).To(BeTrue(), "its taint is never touched")
}

// clusterAutoscalers are the ClusterAutoscalers that exist, by UID.
type clusterAutoscalers map[types.UID]types.NamespacedName

func (c clusterAutoscalers) Find(_ context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	key, found := c[uid]
	return key, found, nil
}

// The taint this autoscaler placed for another ClusterAutoscaler that
// exists says that its engine acts: two engines undo each other's work.
// One placed for a ClusterAutoscaler that no longer exists (deleted and
// created again, moved with clusterctl) is a leftover the owner releases,
// or scaling would stop for ever.
func TestTheTaintOfAnotherClusterAutoscalerStopsScalingUnlessItIsGone(t *testing.T) {
	const another types.UID = "5e0e4c4a-0000-4000-8000-000000000002"
	for _, tt := range []struct {
		name                string
		existing            clusterAutoscalers
		wantOtherAutoscaler string
	}{
		{name: "another ClusterAutoscaler that exists", existing: clusterAutoscalers{another: {Namespace: "default", Name: "another"}},
			wantOtherAutoscaler: "taint that the engine of ClusterAutoscaler default/another (UID " + string(another) + ") placed"},
		{name: "a ClusterAutoscaler that no longer exists", existing: clusterAutoscalers{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(2, st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule), func(node *corev1.Node) {
				node.Annotations = map[string]string{scaledown.TaintedAnnotation: ownership.Stamp(another, "1767268800")}
			})
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)
			f.with(t, func(opts *autoscaler.Options) {
				opts.Owner = ownership.Owner{UID: testOwner.UID, ClusterAutoscalers: tt.existing}
			})

			status := f.runOnce(t)

			if tt.wantOtherAutoscaler != "" {
				g.Expect(status.OtherAutoscaler).To(ContainSubstring(tt.wantOtherAutoscaler))
				g.Expect(group.increases).To(BeEmpty())
				g.Expect(f.tainted(t, nodes[0].Name)).To(BeTrue(), "its taint is never touched")
				return
			}
			g.Expect(status.OtherAutoscaler).To(BeEmpty())
			g.Expect(group.increases).NotTo(BeEmpty(), "the pods are helped")
			g.Expect(f.tainted(t, nodes[0].Name)).To(BeFalse(), "the leftover is released")
		})
	}
}

// countedClusterAutoscalers counts the lookups of each UID.
type countedClusterAutoscalers struct {
	clusterAutoscalers
	mu      sync.Mutex
	lookups map[types.UID]int
}

func (c *countedClusterAutoscalers) Find(ctx context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	c.mu.Lock()
	c.lookups[uid]++
	c.mu.Unlock()
	return c.clusterAutoscalers.Find(ctx, uid)
}

func (c *countedClusterAutoscalers) counted() map[types.UID]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.lookups)
}

// A loop asks whose marks every node carries, and a lookup lists every
// ClusterAutoscaler: each is looked up once a loop, however many nodes
// carry its marks, and again the next loop, when it may be gone.
func TestEachOtherClusterAutoscalerIsLookedUpOnceALoop(t *testing.T) {
	g := NewWithT(t)
	const another, gone types.UID = "5e0e4c4a-0000-4000-8000-000000000002", "5e0e4c4a-0000-4000-8000-000000000003"
	markedBy := func(placer types.UID) st.NodeOption {
		return func(node *corev1.Node) {
			st.WithTaint(nodefacts.ToBeDeletedTaint, "1767268800", corev1.TaintEffectNoSchedule)(node)
			node.Spec.Unschedulable = true
			node.Annotations = map[string]string{
				scaledown.TaintedAnnotation:  ownership.Stamp(placer, "1767268800"),
				scaledown.CordonedAnnotation: ownership.Stamp(placer, "1767268800"),
			}
		}
	}
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := slices.Concat(group.addNodes(3, markedBy(another)), group.addNodes(3, markedBy(gone)))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)
	existing := &countedClusterAutoscalers{
		clusterAutoscalers: clusterAutoscalers{another: {Namespace: "default", Name: "another"}},
		lookups:            map[types.UID]int{},
	}
	f.with(t, func(opts *autoscaler.Options) {
		opts.Owner = ownership.Owner{UID: testOwner.UID, ClusterAutoscalers: existing}
	})

	status := f.runOnce(t)
	g.Expect(status.OtherAutoscaler).To(ContainSubstring("the engine of ClusterAutoscaler default/another"))
	g.Expect(f.tainted(t, nodes[0].Name)).To(BeTrue(), "another's taint is never touched")
	g.Expect(f.tainted(t, nodes[3].Name)).To(BeFalse(), "the leftover of the one gone is released")
	g.Expect(existing.counted()).To(Equal(map[types.UID]int{another: 1, gone: 1}))

	// The fixture's cache still shows the marks released on the nodes.
	f.clock.Step(10 * time.Second)
	f.runOnce(t)
	g.Expect(existing.counted()).To(Equal(map[types.UID]int{another: 2, gone: 2}), "looked up again the next loop")
}

func TestAFreshUpstreamLeaseStopsAllScalingAndAStaleOneDoesNot(t *testing.T) {
	for _, tt := range []struct {
		name      string
		renewed   time.Duration
		wantScale bool
	}{
		{name: "renewed 5s ago", renewed: 5 * time.Second},
		{name: "renewed an hour ago", renewed: time.Hour, wantScale: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)
			_, err := f.clientset.CoordinationV1().Leases(metav1.NamespaceSystem).Create(context.Background(), &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "cluster-autoscaler"},
				Spec: coordinationv1.LeaseSpec{
					HolderIdentity: ptr.To("cluster-autoscaler-6c9f7b7d4-x2x9q"),
					RenewTime:      ptr.To(metav1.NewMicroTime(f.clock.Now().Add(-tt.renewed))),
				},
			}, metav1.CreateOptions{})
			g.Expect(err).NotTo(HaveOccurred())

			status := f.runOnce(t)

			if tt.wantScale {
				g.Expect(group.increases).NotTo(BeEmpty())
				return
			}
			g.Expect(group.increases).To(BeEmpty())
			g.Expect(status.OtherAutoscaler).To(ContainSubstring("Lease kube-system/cluster-autoscaler was renewed at"))
			g.Expect(status.OtherAutoscaler).To(ContainSubstring("cluster-autoscaler-6c9f7b7d4-x2x9q"))
		})
	}
}

func TestAFreshUpstreamStatusStopsAllScaling(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)
	_, err := f.clientset.CoreV1().ConfigMaps(metav1.NamespaceSystem).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: "cluster-autoscaler-status", Annotations: map[string]string{
			"cluster-autoscaler.kubernetes.io/last-updated": f.clock.Now().Add(-10 * time.Second).Format("2006-01-02 15:04:05.999999999 -0700 MST"),
		}},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(status.OtherAutoscaler).To(ContainSubstring("ConfigMap kube-system/cluster-autoscaler-status was written at"))
}

// An upstream autoscaler installed elsewhere than in kube-system under its
// default names, as its chart may install it, is found where its flags
// say it keeps its Lease and its status (Config.Upstream).
func TestAnUpstreamAutoscalerIsFoundWhereItsFlagsPutIt(t *testing.T) {
	for _, tt := range []struct {
		name string
		seen func(context.Context, *fixture) error
		want string
	}{
		{
			name: "its Lease",
			seen: func(ctx context.Context, f *fixture) error {
				_, err := f.clientset.CoordinationV1().Leases("autoscaling").Create(ctx, &coordinationv1.Lease{
					ObjectMeta: metav1.ObjectMeta{Namespace: "autoscaling", Name: "ca-leader"},
					Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ca-7d9"), RenewTime: ptr.To(metav1.NewMicroTime(f.clock.Now()))},
				}, metav1.CreateOptions{})
				return err
			},
			want: "Lease autoscaling/ca-leader was renewed at",
		},
		{
			name: "its status ConfigMap",
			seen: func(ctx context.Context, f *fixture) error {
				_, err := f.clientset.CoreV1().ConfigMaps("monitoring").Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Namespace: "monitoring", Name: "ca-status", Annotations: map[string]string{
						"cluster-autoscaler.kubernetes.io/last-updated": f.clock.Now().Format("2006-01-02 15:04:05.999999999 -0700 MST"),
					}},
				}, metav1.CreateOptions{})
				return err
			},
			want: "ConfigMap monitoring/ca-status was written at",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 3, "3", "1Gi")...)...)
			config := autoscaler.DefaultConfig()
			config.Upstream = autoscaler.UpstreamLocation{Namespace: "monitoring", LeaseNamespace: "autoscaling", LeaseName: "ca-leader", StatusConfigMap: "ca-status"}
			f.apply(t, config)
			g.Expect(tt.seen(context.Background(), f)).To(Succeed())

			status := f.runOnce(t)

			g.Expect(group.increases).To(BeEmpty())
			g.Expect(status.OtherAutoscaler).To(ContainSubstring(tt.want))
		})
	}
}

func TestANodeItsGroupDidNotRemoveIsGivenBackAndReported(t *testing.T) {
	f, group, handedOver := handOverAnUnneededNode(t)

	status := setReplicasBackUntilGivenBack(t, f, group, handedOver)
	expectGivenBack(t, f, group, handedOver, status)
}

// handOverAnUnneededNode runs a group of two nodes, one busy, past the
// unneeded time, so that the other is handed to the group for deletion,
// and returns that node.
func handOverAnUnneededNode(t *testing.T) (*fixture, *fakeGroup, string) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
	nodes := group.addNodes(2)
	busy := st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.OnNode(nodes[0].Name))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...)
	f.runPastUnneededTime(context.Background(), t)
	NewWithT(t).Expect(group.deletedNodes).To(Equal([]string{nodes[1].Name}), "handed to its group")
	return f, group, nodes[1].Name
}

// setReplicasBackUntilGivenBack has another writer set the group's
// replicas back, so that the node handed over stays, a member again, and
// runs a loop past the time a hand-over is followed.
func setReplicasBackUntilGivenBack(t *testing.T, f *fixture, group *fakeGroup, node string) autoscaler.Status {
	t.Helper()
	group.instances = append(group.instances, nodegroups.Instance{ID: "fake://" + node, NodeName: node, State: nodegroups.InstanceRunning})
	group.target++
	f.clock.Step(5*time.Minute + time.Second)
	return f.runOnce(t)
}

// expectGivenBack expects the node handed over to have been given back:
// untainted, its deletion mark removed, and reported on its group.
func expectGivenBack(t *testing.T, f *fixture, group *fakeGroup, node string, status autoscaler.Status) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(f.tainted(t, node)).To(BeFalse(), "given back")
	g.Expect(group.cancelled).To(Equal([]string{node}), "its deletion mark is removed")
	g.Expect(f.groupRecorder.reasons(group.id)).To(ContainElement(autoscaler.EventNodeNotDeleted))
	g.Expect(groupRow(status, group.id).Problem).To(ContainSubstring("is still there, its instance not being deleted"))
}
