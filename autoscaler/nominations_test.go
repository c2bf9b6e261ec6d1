package autoscaler_test

import (
	"context"
	"encoding/json"
	"errors"
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
