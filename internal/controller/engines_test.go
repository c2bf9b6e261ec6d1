package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
)

func TestAnEngineThatPanicsInARowWaitsLongerForItsSuccessorUpToFiveMinutes(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Now())
	recorder := record.NewFakeRecorder(10)
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

// An engine's writes to its workload cluster (taints, evictions) and its
// events there each have a rate limit: a storm of events, one per pod a
// scale-up helps, must not hold up the writes, nor the writes the events.
// Both limits here allow three requests, then one every 1,000 seconds.
func TestEventsAndWritesOfAnEngineHaveRateLimitsOfTheirOwn(t *testing.T) {
	const qps, burst = 0.001, 3
	// workloadCluster answers every request as an API server would, and
	// counts the events and the other writes it got.
	workloadCluster := func(t *testing.T) (restConfig *rest.Config, events, writes *atomic.Int32) {
		events, writes = &atomic.Int32{}, &atomic.Int32{}
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.HasSuffix(req.URL.Path, "/events") {
				events.Add(1)
			} else {
				writes.Add(1)
			}
			w.Header().Set("Content-Type", req.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusCreated)
			_, _ = io.Copy(w, req.Body)
		}))
		t.Cleanup(server.Close)
		return &rest.Config{Host: server.URL, QPS: qps, Burst: burst}, events, writes
	}
	// engineClients are an engine's clientset and event recorder.
	engineClients := func(t *testing.T, restConfig *rest.Config) (kubernetes.Interface, record.EventRecorder) {
		r := &ClusterAutoscalerReconciler{WorkloadEventQPS: qps, WorkloadEventBurst: burst}
		clientset, broadcaster, err := r.newWorkloadClients(context.Background(), restConfig)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(broadcaster.Shutdown)
		return clientset, broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: workloadEventSource})
	}
	recordEvents := func(recorder record.EventRecorder, n int) {
		for i := range n {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("web-%d", i)}}
			recorder.Event(pod, corev1.EventTypeNormal, "TriggeredScaleUp", "pod triggered scale-up")
		}
	}
	// write asks for a write, which fails at once when the rate limit
	// would keep it waiting past its deadline.
	write := func(clientset kubernetes.Interface, name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := clientset.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}, metav1.CreateOptions{})
		return err
	}

	t.Run("writes go on while events wait for their limit", func(t *testing.T) {
		g := NewWithT(t)
		restConfig, events, writes := workloadCluster(t)
		clientset, recorder := engineClients(t, restConfig)
		recordEvents(recorder, 10)
		g.Eventually(events.Load, 10*time.Second).Should(BeEquivalentTo(burst), "the events took their burst and wait")

		for i := range burst {
			g.Expect(write(clientset, fmt.Sprintf("write-%d", i))).To(Succeed())
		}
		g.Expect(writes.Load()).To(BeEquivalentTo(burst))
	})

	t.Run("events go on while writes wait for their limit", func(t *testing.T) {
		g := NewWithT(t)
		restConfig, events, _ := workloadCluster(t)
		clientset, recorder := engineClients(t, restConfig)
		for i := range burst {
			g.Expect(write(clientset, fmt.Sprintf("write-%d", i))).To(Succeed())
		}
		g.Expect(write(clientset, "one-too-many")).To(MatchError(ContainSubstring("rate")), "the writes took their burst")

		recordEvents(recorder, burst)
		g.Eventually(events.Load, 10*time.Second).Should(BeEquivalentTo(burst))
	})
}

// A DryRun engine gives the Cluster's Lease back only once none of its
// loops can act: an engine switched from Active to DryRun before its
// first loop ended may be in that loop, between a mark and its write of
// the replicas.
func TestAnEngineThatRanActiveKeepsTheLeaseUntilADryLoopHasRun(t *testing.T) {
	ended := autoscaler.Status{Time: time.Now()}
	endedDry := autoscaler.Status{Time: time.Now(), DryRun: true}
	for _, tc := range []struct {
		name       string
		everActive bool
		last       autoscaler.Status
		want       bool
	}{
		{name: "started dry, no loop ended yet", want: true},
		{name: "started dry, a dry loop ended", last: endedDry, want: true},
		{name: "switched from Active before its first loop ended", everActive: true, want: false},
		{name: "switched from Active, its last loop ran Active", everActive: true, last: ended, want: false},
		{name: "switched from Active, a dry loop ended since", everActive: true, last: endedDry, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			engine := &runningEngine{everActive: tc.everActive}
			if got := engine.actsNoMore(tc.last); got != tc.want {
				t.Errorf("actsNoMore = %t, want %t", got, tc.want)
			}
		})
	}
}

// An engine that stops gives back its drains and says so in events on the
// workload cluster's nodes, also when the manager stops, its context
// cancelled first. Once the engine's broadcaster is shut down, those
// events must be in the workload cluster: the process may exit right after.
func TestTheEventsOfAStoppingEngineAreWrittenBeforeItsBroadcasterStops(t *testing.T) {
	// workloadCluster returns the names of the nodes of the events it has
	// written. The engine's event client below writes at most 50 a second
	// (burst 1), so that some are still queued when the engine ends, as
	// under the default limits with more events.
	workloadCluster := func(t *testing.T) (*rest.Config, func() []string) {
		var mu sync.Mutex
		var written []string
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			event := &corev1.Event{}
			if err := json.NewDecoder(req.Body).Decode(event); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mu.Lock()
			written = append(written, event.InvolvedObject.Name)
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(event)
		}))
		t.Cleanup(server.Close)
		return &rest.Config{Host: server.URL}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			return slices.Clone(written)
		}
	}
	// stopEngine records, as an engine that stops does, that it gave back
	// the drains of nodes, then ends, shutting its broadcaster down.
	stopEngine := func(broadcaster record.EventBroadcaster, nodes []string) {
		recorder := broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: workloadEventSource})
		for _, name := range nodes {
			recorder.Event(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, corev1.EventTypeNormal, "ScaleDownCancelled",
				"the autoscaler stopped autoscaling the cluster")
		}
		broadcaster.Shutdown()
	}
	nodes := []string{"node-1", "node-2", "node-3", "node-4", "node-5", "node-6", "node-7", "node-8"}

	t.Run("the engine stops with the manager", func(t *testing.T) {
		restConfig, written := workloadCluster(t)
		managerCtx, stopManager := context.WithCancel(context.Background())
		r := &ClusterAutoscalerReconciler{WorkloadEventQPS: 50, WorkloadEventBurst: 1}
		_, broadcaster, err := r.newWorkloadClients(managerCtx, restConfig)
		if err != nil {
			t.Fatal(err)
		}

		stopManager()
		stopEngine(broadcaster, nodes)
		if got := written(); !slices.Equal(got, nodes) {
			t.Errorf("events written for the nodes %v, want %v", got, nodes)
		}
	})

	t.Run("the engine stops, the manager runs on", func(t *testing.T) {
		restConfig, written := workloadCluster(t)
		r := &ClusterAutoscalerReconciler{WorkloadEventQPS: 50, WorkloadEventBurst: 1}
		_, broadcaster, err := r.newWorkloadClients(context.Background(), restConfig)
		if err != nil {
			t.Fatal(err)
		}

		stopEngine(broadcaster, nodes)
		if got := written(); !slices.Equal(got, nodes) {
			t.Errorf("events written for the nodes %v, want %v", got, nodes)
		}
	})

	t.Run("an unreachable workload cluster holds the engine's stop up for a bounded time", func(t *testing.T) {
		unreachable := make(chan struct{})
		server := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-unreachable }))
		t.Cleanup(server.Close)
		t.Cleanup(func() { close(unreachable) })
		r := &ClusterAutoscalerReconciler{WorkloadEventQPS: 50, WorkloadEventBurst: 1}
		_, broadcaster, err := r.newWorkloadClients(context.Background(), &rest.Config{Host: server.URL})
		if err != nil {
			t.Fatal(err)
		}

		start := time.Now()
		stopEngine(broadcaster, nodes)
		if took := time.Since(start); took > eventFlushTimeout+time.Second {
			t.Errorf("the engine's stop took %s, want at most %s", took, eventFlushTimeout+time.Second)
		}
	})
}
