package controller

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
)

func TestAnEngineThatPanicsInARowWaitsLongerForItsSuccessorUpToFiveMinutes(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Now())
	recorder := events.NewFakeRecorder(10)
	r := &ClusterAutoscalerReconciler{Clock: clock, Recorder: recorder,
		restarts: flowcontrol.NewFakeBackOff(engineRestartDelay, maxEngineRestartDelay, clock)}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "autoscaler"}}
	cluster := client.ObjectKey{Namespace: "default", Name: "workload"}
	panicked := &autoscaler.PanicError{Value: "a bug"}

	var delays []time.Duration
	for range 7 {
		crash := r.engineCrashed(ca, cluster, panicked)
		g.Expect(crash.restartAt).To(Equal(clock.Now().Add(crash.restartDelay)))
		delays = append(delays, crash.restartDelay)
		// Its successor panics a minute after it started.
		clock.Step(crash.restartDelay + time.Minute)
	}
	g.Expect(delays).To(Equal([]time.Duration{
		10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute,
	}))
	g.Expect(recorder.Events).To(Receive(Equal("Warning EnginePanicked The autoscaling loop of Cluster default/workload panicked: a bug; a new engine starts in 10s")))

	// Ten minutes after the last panic (a 5m delay and a minute ago).
	clock.Step(4*time.Minute + time.Second)
	g.Expect(r.engineCrashed(ca, cluster, panicked).restartDelay).To(Equal(10*time.Second),
		"the delay starts over after ten minutes without a panic")
}
