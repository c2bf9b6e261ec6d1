package autoscaler_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clienttesting "k8s.io/client-go/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// replacedVersions are the versions of pods that kube-scheduler has
// written since: the API server refuses a write made on one of them.
type replacedVersions struct {
	mu       sync.Mutex
	versions sets.Set[string]
}

// refuseWritesOnReplacedVersions has the fixture's API server refuse, with
// a Conflict, the pod status patches made on a version kube-scheduler has
// replaced, as a real one does with the patch's resourceVersion.
func refuseWritesOnReplacedVersions(f *fixture) *replacedVersions {
	replaced := &replacedVersions{versions: sets.New[string]()}
	f.clientset.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		patch, ok := action.(clienttesting.PatchAction)
		if !ok || action.GetSubresource() != "status" {
			return false, nil, nil
		}
		var written struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(patch.GetPatch(), &written); err != nil {
			return true, nil, err
		}
		replaced.mu.Lock()
		defer replaced.mu.Unlock()
		if replaced.versions.Has(written.Metadata.ResourceVersion) {
			return true, nil, apierrors.NewConflict(corev1.Resource("pods"), patch.GetName(),
				errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		return false, nil, nil
	})
	return replaced
}

func (r *replacedVersions) add(version string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions.Insert(version)
}

// kubeSchedulerWrites has kube-scheduler write the pod's status as change
// makes it, under a new resourceVersion, and returns the pod before and
// after, without telling the engine.
func kubeSchedulerWrites(t *testing.T, f *fixture, name string, change func(*corev1.Pod)) (old, changed *corev1.Pod) {
	t.Helper()
	pods := f.clientset.CoreV1().Pods("default")
	old, err := pods.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed = old.DeepCopy()
	change(changed)
	version, _ := strconv.Atoi(old.ResourceVersion)
	changed.ResourceVersion = strconv.Itoa(version + 1)
	changed, err = pods.UpdateStatus(context.Background(), changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return old, changed
}

// clearNomination is kube-scheduler's failed attempt: it clears the pod's
// nomination and reports why in its PodScheduled condition.
func clearNomination(pod *corev1.Pod) {
	pod.Status.NominatedNodeName = ""
	reportUnschedulable(pod)
}

// reportUnschedulable is kube-scheduler's failed attempt on a pod without
// nomination: a new reason in its PodScheduled condition.
func reportUnschedulable(pod *corev1.Pod) {
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/" + strconv.Itoa(len(pod.Status.Conditions)+2) + " nodes are available"}}
}

// kube-scheduler reports a pod's failed attempts in its PodScheduled
// condition, and under a burst of node events tries a pod again before
// the engine writes back the nomination it cleared: the write, made on
// the version that had it cleared, is refused. The engine reads the pod
// again and writes the nomination on that version (issue 51); before, it
// dropped it until a loop, which could come after the pod's node started
// and other pods took its room.
func TestClearedNominationIsWrittenBackOnAPodKubeSchedulerWroteAgain(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)
	replaced := refuseWritesOnReplacedVersions(f)
	runInBackground(t, f)
	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"))
	loop := f.clock.Now()
	g.Eventually(func() time.Time { return f.engine.Status().Time }).Should(Equal(loop), "the first loop ends")

	nominated, cleared := kubeSchedulerWrites(t, f, "batch-0", clearNomination)
	_, _ = kubeSchedulerWrites(t, f, "batch-0", reportUnschedulable)
	replaced.add(cleared.ResourceVersion)
	f.engine.PodUpdated(snapshot.NewPod(nominated), snapshot.NewPod(cleared))

	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"),
		"the batch pod keeps its room on md-large's node")
	g.Expect(f.engine.Status().Time).To(Equal(loop), "no loop ran in between")
}

// The sequence seen on the local stack, where two pods lost their
// nominations for good: the engine writes a cleared nomination back,
// kube-scheduler clears it again, then reports the pod again before the
// engine hears of it. The second write-back lands all the same.
func TestNominationClearedAgainAfterItsWriteBackIsWrittenBackAgain(t *testing.T) {
	g := NewWithT(t)
	f, _, _ := demoFixture(t)
	replaced := refuseWritesOnReplacedVersions(f)
	runInBackground(t, f)
	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"))
	loop := f.clock.Now()
	g.Eventually(func() time.Time { return f.engine.Status().Time }).Should(Equal(loop), "the first loop ends")
	nominated, cleared := kubeSchedulerWrites(t, f, "batch-0", clearNomination)
	f.engine.PodUpdated(snapshot.NewPod(nominated), snapshot.NewPod(cleared))
	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"), "written back once")

	nominated, cleared = kubeSchedulerWrites(t, f, "batch-0", clearNomination)
	_, _ = kubeSchedulerWrites(t, f, "batch-0", reportUnschedulable)
	replaced.add(cleared.ResourceVersion)
	f.engine.PodUpdated(snapshot.NewPod(nominated), snapshot.NewPod(cleared))

	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"), "written back again")
	g.Expect(f.engine.Status().Time).To(Equal(loop), "no loop ran in between")
}

// A loop plans on pods read from a cache; kube-scheduler may write a pod
// between that read and the loop's nomination of it, which the API server
// then refuses. The loop reads the pod again and nominates it: no event
// will tell the engine of a nomination never written, and the pod would
// wait a scan interval without it.
func TestLoopNominatesAPodKubeSchedulerWroteSinceTheLoopReadIt(t *testing.T) {
	g := NewWithT(t)
	f, starting := startingNodeFixture(t, st.Pod("web-0", "3", "1Gi", st.OwnedBy("web")))
	replaced := refuseWritesOnReplacedVersions(f)
	read := &corev1.Pod{}
	g.Expect(f.cluster.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "web-0"}, read)).To(Succeed())
	replaced.add(read.ResourceVersion)
	_, _ = kubeSchedulerWrites(t, f, "web-0", reportUnschedulable)

	f.runOnce(t)

	g.Expect(nominatedNode(t, f, "web-0")).To(Equal(starting.Name))
}

// waveFixture is a group with a registered node, not Ready yet, and
// booting machines whose nodes will be named after them, with two pods
// of 2 cores planned for each and every pod nominated to its node, as
// the loops of a burst leave them.
func waveFixture(t *testing.T, booting int) (f *fixture, registered *corev1.Node) {
	t.Helper()
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: booting + 1, template: templateNode()}
	registered = group.addNodes(1)[0]
	group.instances[0].Name = registered.Name
	registered.CreationTimestamp = metav1.NewTime(st.Now)
	registered.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}}
	registered.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	for i := range booting {
		name := "md-0-booting-" + strconv.Itoa(i)
		group.instances = append(group.instances, nodegroups.Instance{ID: "fake://" + name, Name: name, State: nodegroups.InstanceCreating, Removable: true})
		group.target++
	}
	pods := make([]*corev1.Pod, 0, 2*(booting+1))
	for i := range cap(pods) {
		pods = append(pods, st.Pod("web-"+strconv.Itoa(i), "2", "1Gi", st.OwnedBy("web")))
	}
	f = newFixture(t, []*fakeGroup{group}, objects([]*corev1.Node{registered}, pods...)...)

	// A loop nominates at most 30 pods; the cache sees what it wrote.
	for range 10 {
		patches := statusPatches(f)
		f.runOnce(t)
		if statusPatches(f) == patches {
			return f, registered
		}
		cacheNominations(t, f)
		f.clock.Step(time.Second)
	}
	t.Fatal("the loops kept nominating")
	return nil, nil
}

// cacheNominations has the fixture's cache see the nominations written.
func cacheNominations(t *testing.T, f *fixture) {
	t.Helper()
	written, err := f.clientset.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range written.Items {
		cached := &corev1.Pod{}
		if err := f.cluster.Get(context.Background(), client.ObjectKeyFromObject(&pod), cached); err != nil {
			t.Fatal(err)
		}
		cached.Status.NominatedNodeName = pod.Status.NominatedNodeName
		if err := f.cluster.Status().Update(context.Background(), cached); err != nil {
			t.Fatal(err)
		}
	}
}

// recordNominations returns the names of the pods whose nomination the
// engine writes from now on, in the order it writes them.
func recordNominations(f *fixture) func() []string {
	var mu sync.Mutex
	var names []string
	f.clientset.PrependReactor("patch", "pods", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if patch, ok := action.(clienttesting.PatchAction); ok && action.GetSubresource() == "status" {
			mu.Lock()
			defer mu.Unlock()
			names = append(names, patch.GetName())
		}
		return false, nil, nil
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(names)
	}
}

// clearAndTell is kube-scheduler's failed attempt on the pod, which the
// engine hears of from its pod informer.
func clearAndTell(t *testing.T, f *fixture, name string) {
	t.Helper()
	nominated, cleared := kubeSchedulerWrites(t, f, name, clearNomination)
	f.engine.PodUpdated(snapshot.NewPod(nominated), snapshot.NewPod(cleared))
}

// A node that registers makes kube-scheduler try every pending pod again
// and clear their nominations: more than the write-backs' limit lets go
// at once. The pods planned for a registered node lose their room on it
// to the pods of other nodes as soon as it takes pods: their nominations
// are written back first, and at once. Before, they waited in a random
// place of the wave, up to 1.9 s (issue 51).
func TestNominationsToRegisteredNodesAreWrittenBackFirstAndAtOnce(t *testing.T) {
	g := NewWithT(t)
	f, registered := waveFixture(t, 30)
	written := recordNominations(f)
	runInBackground(t, f)
	loop := f.clock.Now()
	g.Eventually(func() time.Time { return f.engine.Status().Time }).Should(Equal(loop), "the first loop ends")
	g.Expect(written()).To(BeEmpty(), "every pod is nominated")

	pods, err := f.clientset.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var atRisk, onTheirWay []string
	for _, pod := range pods.Items {
		if pod.Status.NominatedNodeName == registered.Name {
			atRisk = append(atRisk, pod.Name)
		} else {
			onTheirWay = append(onTheirWay, pod.Name)
		}
	}
	g.Expect(atRisk).To(HaveLen(2))
	g.Expect(onTheirWay).To(HaveLen(60))

	for _, name := range onTheirWay {
		clearAndTell(t, f, name)
	}
	g.Eventually(func() int { return len(written()) }).Should(BeNumerically(">=", 20), "the limit's burst goes at once")
	before := len(written())
	for _, name := range atRisk {
		clearAndTell(t, f, name)
	}

	g.Eventually(func() []string { return written()[before:] }).Should(ContainElements(atRisk))
	after := written()[before:]
	last := max(slices.Index(after, atRisk[0]), slices.Index(after, atRisk[1]))
	g.Expect(last).To(BeNumerically("<=", len(atRisk)),
		"the pods of the registered node come before every pod of a node on its way but the one written then: %v", after)
	for _, name := range atRisk {
		g.Expect(nominatedNode(t, f, name)).To(Equal(registered.Name))
	}
}

// Once the node planned for a pod has started, kube-scheduler's failed
// attempts on the pod go on clearing its nomination until it binds, while
// pods planned for other nodes, which fail there, take its room: the
// engine writes the nomination back at once all the same (issue 51).
// Before, the loops after the node had started no longer stood by it, and
// the room went to the first pod kube-scheduler tried.
func TestClearedNominationToANodeThatStartedIsWrittenBack(t *testing.T) {
	g := NewWithT(t)
	f, _, large := demoFixture(t)
	f.runOnce(t)
	g.Expect(nominatedNode(t, f, "batch-0")).To(Equal("md-large-0"))
	cacheNominations(t, f)
	register(t, f, large, registeredNow(f, "md-large-0", "8", "32Gi"))
	f.clock.Step(time.Second)
	runInBackground(t, f)
	loop := f.clock.Now()
	g.Eventually(func() time.Time { return f.engine.Status().Time }).Should(Equal(loop), "a loop ends after md-large's node started")

	clearAndTell(t, f, "batch-0")

	g.Eventually(func() string { return nominatedNode(t, f, "batch-0") }).Should(Equal("md-large-0"),
		"the batch pod keeps its room on md-large's node, which takes pods")
	g.Expect(f.engine.Status().Time).To(Equal(loop), "no loop ran in between")
}
