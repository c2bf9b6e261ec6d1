package framework

import (
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestUnevictedPods checks, on pods fabricated as a node's at its
// removal, that only those neither evicted nor terminating by then are
// flagged.
func TestUnevictedPods(t *testing.T) {
	removed := time.Date(2026, 12, 7, 4, 0, 10, 0, time.UTC)
	pod := func(name string, mutate func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "soak-x", Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if mutate != nil {
			mutate(&p)
		}
		return p
	}
	terminatingSince := func(start time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			p.DeletionTimestamp = ptr.To(metav1.NewTime(start.Add(30 * time.Second)))
		}
	}
	pods := []corev1.Pod{
		pod("running", nil),
		pod("evicted", terminatingSince(removed.Add(-2*time.Second))),
		pod("evicted-after", terminatingSince(removed.Add(2*time.Second))),
		pod("daemon", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ds"}}, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}),
		pod("mirror", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	}
	want := []string{"soak-x/running", "soak-x/evicted-after"}
	if got := UnevictedPods(pods, removed); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
