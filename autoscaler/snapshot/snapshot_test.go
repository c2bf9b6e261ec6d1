package snapshot_test

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func newSnapshot() *snapshot.Snapshot {
	return snapshot.New(snapshot.Input{
		Nodes: []*corev1.Node{st.Node("a", "4", "8Gi"), st.Node("b", "4", "8Gi")},
		Pods: []*corev1.Pod{
			st.Pod("on-a", "1", "1Gi", st.OnNode("a")),
			st.Pod("pending", "1", "1Gi"),
		},
	})
}

func nodeNames(snap *snapshot.Snapshot) []string {
	var names []string
	for _, info := range snap.NodeInfos() {
		names = append(names, info.Name())
	}
	return names
}

func podNames(info *snapshot.NodeInfo) []string {
	names := []string{}
	for _, pod := range info.Pods() {
		names = append(names, pod.Pod.Name)
	}
	return names
}

func TestNewPlacesBoundPodsAndKeepsPendingOnes(t *testing.T) {
	g := NewWithT(t)
	snap := newSnapshot()
	g.Expect(nodeNames(snap)).To(Equal([]string{"a", "b"}))
	g.Expect(podNames(snap.NodeInfo("a"))).To(Equal([]string{"on-a"}))
	g.Expect(snap.NodeInfo("a").Requested().MilliCPU).To(Equal(int64(1000)))
	g.Expect(snap.PendingPods()).To(HaveLen(1))
}

func TestCachedPodsAreParsedOnce(t *testing.T) {
	g := NewWithT(t)
	nodes := []*corev1.Node{st.Node("a", "4", "8Gi")}
	// The pods of a cache.
	web := snapshot.NewPod(st.Pod("web", "1", "1Gi", st.OnNode("a")))
	db := snapshot.NewPod(st.Pod("db", "1", "1Gi", st.OnNode("a")))
	build := func(pods ...*snapshot.Pod) map[string]*snapshot.PodInfo {
		snap := snapshot.New(snapshot.Input{Nodes: nodes, CachedPods: pods})
		infos := map[string]*snapshot.PodInfo{}
		for _, info := range snap.NodeInfo("a").Pods() {
			infos[info.Pod.Name] = info
		}
		return infos
	}

	first := build(web, db)
	second := build(web, db)
	g.Expect(second["web"]).To(BeIdenticalTo(first["web"]), "an unchanged pod is not parsed again")
	g.Expect(second["db"]).To(BeIdenticalTo(first["db"]))

	// A cache replaces a pod that changes with a new object.
	resized := snapshot.NewPod(st.Pod("web", "3", "1Gi", st.OnNode("a")))
	third := build(resized, db)
	g.Expect(third["web"]).NotTo(BeIdenticalTo(first["web"]))
	g.Expect(third["web"].Requests.MilliCPU).To(Equal(int64(3000)))
	g.Expect(third["db"]).To(BeIdenticalTo(first["db"]))
}

func TestForkRevertAndCommit(t *testing.T) {
	tests := []struct {
		name      string
		change    func(g *WithT, snap *snapshot.Snapshot)
		commit    bool
		wantNodes []string
		wantOnA   []string
	}{
		{
			name: "revert drops an added node and pod",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.AddNode(snapshot.NewNodeInfo(st.Node("c", "4", "8Gi")))).To(Succeed())
				g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("p", "1", "1Gi")), "a")).To(Succeed())
			},
			wantNodes: []string{"a", "b"},
			wantOnA:   []string{"on-a"},
		},
		{
			name: "commit keeps an added node and pod",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.AddNode(snapshot.NewNodeInfo(st.Node("c", "4", "8Gi")))).To(Succeed())
				g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("p", "1", "1Gi")), "a")).To(Succeed())
			},
			commit:    true,
			wantNodes: []string{"a", "b", "c"},
			wantOnA:   []string{"on-a", "p"},
		},
		{
			name: "revert restores a removed node with its pods",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.RemoveNode("a")).To(Succeed())
				g.Expect(snap.NodeInfo("a")).To(BeNil())
			},
			wantNodes: []string{"a", "b"},
			wantOnA:   []string{"on-a"},
		},
		{
			name: "revert restores a removed pod",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.RemovePod("default", "on-a", "a")).To(Succeed())
				g.Expect(snap.NodeInfo("a").Requested().MilliCPU).To(BeZero())
			},
			wantNodes: []string{"a", "b"},
			wantOnA:   []string{"on-a"},
		},
		{
			name: "commit removes a node",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.RemoveNode("b")).To(Succeed())
			},
			commit:    true,
			wantNodes: []string{"a"},
			wantOnA:   []string{"on-a"},
		},
		{
			name: "removing a node from a listed fork keeps the others in order",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.AddNode(snapshot.NewNodeInfo(st.Node("c", "4", "8Gi")))).To(Succeed())
				g.Expect(nodeNames(snap)).To(Equal([]string{"a", "b", "c"}))
				g.Expect(snap.RemoveNode("a")).To(Succeed())
				g.Expect(nodeNames(snap)).To(Equal([]string{"b", "c"}))
				g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("p", "1", "1Gi")), "c")).To(Succeed())
				g.Expect(snap.NodeInfos()[1].Pods()).To(HaveLen(1))
			},
			commit:    true,
			wantNodes: []string{"b", "c"},
		},
		{
			name: "a node removed and added again in a fork keeps its place",
			change: func(g *WithT, snap *snapshot.Snapshot) {
				g.Expect(snap.RemoveNode("a")).To(Succeed())
				g.Expect(snap.AddNode(snapshot.NewNodeInfo(st.Node("a", "4", "8Gi")))).To(Succeed())
			},
			commit:    true,
			wantNodes: []string{"a", "b"},
			wantOnA:   []string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			snap := newSnapshot()
			// An outer fork, so that Commit folds into a fork and Revert of
			// the outer one restores the input.
			snap.Fork()
			g.Expect(nodeNames(snap)).To(Equal([]string{"a", "b"}))
			snap.Fork()
			tt.change(g, snap)
			if tt.commit {
				snap.Commit()
			} else {
				snap.Revert()
			}
			g.Expect(nodeNames(snap)).To(Equal(tt.wantNodes))
			if tt.wantOnA != nil {
				g.Expect(podNames(snap.NodeInfo("a"))).To(Equal(tt.wantOnA))
			}
			snap.Revert()
			g.Expect(nodeNames(snap)).To(Equal([]string{"a", "b"}))
			g.Expect(podNames(snap.NodeInfo("a"))).To(Equal([]string{"on-a"}))
		})
	}
}

func TestForkNeverChangesTheParentsNodeInfo(t *testing.T) {
	g := NewWithT(t)
	snap := newSnapshot()
	before := snap.NodeInfo("a")
	snap.Fork()
	g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("p", "2", "1Gi")), "a")).To(Succeed())
	g.Expect(snap.NodeInfo("a").Requested().MilliCPU).To(Equal(int64(3000)))
	g.Expect(snap.NodeInfos()[0].Requested().MilliCPU).To(Equal(int64(3000)))
	g.Expect(before.Requested().MilliCPU).To(Equal(int64(1000)), "the parent's copy must stay untouched")
	snap.Revert()
	g.Expect(snap.NodeInfo("a").Requested().MilliCPU).To(Equal(int64(1000)))
}

func TestControllerExists(t *testing.T) {
	g := NewWithT(t)
	replicaSet := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-rs-web"}}
	snap := snapshot.New(snapshot.Input{Controllers: []*metav1.PartialObjectMetadata{replicaSet}})

	exists, err := snap.ControllerExists("uid-rs-web")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists).To(BeTrue())
	exists, err = snap.ControllerExists("uid-rs-web-recreated")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(exists).To(BeFalse(), "a controller of the same name made anew is another one")

	unread := errors.New("listing ReplicaSets of the cluster: forbidden")
	snap = snapshot.New(snapshot.Input{Controllers: []*metav1.PartialObjectMetadata{replicaSet}, ControllersError: unread})
	_, err = snap.ControllerExists("uid-rs-web")
	g.Expect(err).To(MatchError(unread), "no controller can be told to exist when they could not all be read")
}

func TestErrors(t *testing.T) {
	g := NewWithT(t)
	snap := newSnapshot()
	g.Expect(snap.AddNode(snapshot.NewNodeInfo(st.Node("a", "1", "1Gi")))).To(MatchError(ContainSubstring("already")))
	g.Expect(snap.RemoveNode("x")).To(MatchError(ContainSubstring("not in the snapshot")))
	g.Expect(snap.AddPod(snapshot.NewPodInfo(st.Pod("p", "1", "1Gi")), "x")).To(MatchError(ContainSubstring("not in the snapshot")))
	g.Expect(snap.RemovePod("default", "nope", "a")).To(MatchError(ContainSubstring("not on node a")))
}

func TestPodRequests(t *testing.T) {
	restartAlways := corev1.ContainerRestartPolicyAlways
	tests := []struct {
		name    string
		pod     func() *corev1.Pod
		wantCPU int64
	}{
		{name: "containers add up", pod: func() *corev1.Pod {
			pod := st.Pod("p", "1", "")
			pod.Spec.Containers = append(pod.Spec.Containers, pod.Spec.Containers[0])
			return pod
		}, wantCPU: 2000},
		{name: "a larger init container wins", pod: func() *corev1.Pod {
			pod := st.Pod("p", "1", "")
			init := st.Pod("i", "3", "").Spec.Containers[0]
			pod.Spec.InitContainers = []corev1.Container{init}
			return pod
		}, wantCPU: 3000},
		{name: "a sidecar adds to the containers", pod: func() *corev1.Pod {
			pod := st.Pod("p", "1", "")
			sidecar := st.Pod("s", "500m", "").Spec.Containers[0]
			sidecar.RestartPolicy = &restartAlways
			pod.Spec.InitContainers = []corev1.Container{sidecar}
			return pod
		}, wantCPU: 1500},
		{name: "overhead is added", pod: func() *corev1.Pod {
			pod := st.Pod("p", "1", "")
			pod.Spec.Overhead = st.Pod("o", "250m", "").Spec.Containers[0].Resources.Requests
			return pod
		}, wantCPU: 1250},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			requests := snapshot.PodRequests(tt.pod())
			g.Expect(requests.MilliCPU).To(Equal(tt.wantCPU))
			g.Expect(requests.Pods).To(Equal(int64(1)))
		})
	}
}

func TestPodRequestsAgreeWithComponentHelpers(t *testing.T) {
	container := func(kv ...string) corev1.Container {
		requests := corev1.ResourceList{}
		for i := 0; i+1 < len(kv); i += 2 {
			requests[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: requests}}
	}
	tests := []struct {
		name string
		spec corev1.PodSpec
	}{
		{name: "no requests", spec: corev1.PodSpec{Containers: []corev1.Container{{}}}},
		{name: "cpu, memory and ephemeral storage", spec: corev1.PodSpec{Containers: []corev1.Container{
			container("cpu", "250m", "memory", "1Gi", "ephemeral-storage", "2Gi"), container("cpu", "1", "memory", "100Mi"),
		}}},
		{name: "fractions of a millicore are added before rounding", spec: corev1.PodSpec{Containers: []corev1.Container{
			container("cpu", "0.0005", "memory", "0.5"), container("cpu", "0.0005", "memory", "0.5"),
		}}},
		{name: "extended resources", spec: corev1.PodSpec{Containers: []corev1.Container{
			container("cpu", "1", "nvidia.com/gpu", "1"), container("nvidia.com/gpu", "2"),
		}}},
		{name: "init containers", spec: corev1.PodSpec{
			InitContainers: []corev1.Container{container("cpu", "2")}, Containers: []corev1.Container{container("cpu", "1")},
		}},
		{name: "pod-level requests", spec: corev1.PodSpec{
			Resources:  &corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}},
			Containers: []corev1.Container{container("cpu", "1")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			pod := &corev1.Pod{Spec: tt.spec}
			want := snapshot.NewResources(resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}))
			want.Pods = 1
			g.Expect(snapshot.PodRequests(pod)).To(Equal(want))
		})
	}
}

func TestIdentitiesAreSharedByPodsOfTheSameNamespaceAndLabels(t *testing.T) {
	g := NewWithT(t)
	ids := snapshot.NewIdentities()
	identity := func(pod *corev1.Pod) *snapshot.Identity { return snapshot.NewPodInfoOf(pod, ids).Identity }

	bare := identity(st.Pod("bare-0", "1", "1Gi", st.WithPodLabels("app", "web", "tier", "front")))
	g.Expect(identity(st.Pod("bare-1", "2", "1Gi", st.WithPodLabels("tier", "front", "app", "web")))).To(BeIdenticalTo(bare),
		"pods without an owner share their namespace's and labels' identity, whatever they request")
	g.Expect(identity(st.Pod("bare-2", "1", "1Gi", st.WithPodLabels("app", "web")))).NotTo(BeIdenticalTo(bare), "other labels")
	g.Expect(identity(st.Pod("bare-3", "1", "1Gi", st.WithPodLabels("app", "web", "tier", "front"),
		func(pod *corev1.Pod) { pod.Namespace = "other" }))).NotTo(BeIdenticalTo(bare), "another namespace")
	// Label keys and values cannot run into each other.
	g.Expect(identity(st.Pod("odd-0", "1", "1Gi", st.WithPodLabels("a", "bc")))).
		NotTo(BeIdenticalTo(identity(st.Pod("odd-1", "1", "1Gi", st.WithPodLabels("ab", "c")))))

	owned := identity(st.Pod("web-0", "1", "1Gi", st.OwnedBy("web"), st.WithPodLabels("app", "web")))
	g.Expect(identity(st.Pod("web-1", "1", "1Gi", st.OwnedBy("web"), st.WithPodLabels("app", "web")))).To(BeIdenticalTo(owned))
}
