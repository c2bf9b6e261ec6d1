package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
)

// noNodeGroups is a cluster without node groups.
type noNodeGroups struct{}

func (noNodeGroups) NodeGroups(context.Context) (nodegroups.List, error) {
	return nodegroups.List{}, nil
}

// engineWhoseLoop is an engine of its own cluster, just started; its loop
// is overdue when overdue.
func engineWhoseLoop(t *testing.T, overdue bool) *runningEngine {
	t.Helper()
	clock := clocktesting.NewFakeClock(time.Now())
	running := engineOn(t, clock)
	if overdue {
		clock.Step(autoscaler.DefaultLoopTimeout + time.Second)
	}
	return running
}

// engineOn is an engine of its own cluster, without node groups, just
// started on clock.
func engineOn(t *testing.T, clock *clocktesting.FakeClock) *runningEngine {
	t.Helper()
	settings, err := autoscaler.NewSettings(autoscaler.DefaultConfig(), clock)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload",
		Owner:       ownership.Owner{UID: "health-test"},
		Settings:    settings,
		NodeGroups:  noNodeGroups{},
		Cluster:     fake.NewClientBuilder().Build(),
		Clientset:   kubefake.NewClientset(),
		Recorder:    record.NewFakeRecorder(10),
		Clock:       clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &runningEngine{engine: engine, startedAt: clock.Now(), done: make(chan struct{})}
}

// crashedEngine is an engine whose loop panicked long ago and that waits
// for its successor.
func crashedEngine(t *testing.T) *runningEngine {
	t.Helper()
	crashed := engineWhoseLoop(t, true)
	crashed.crash = &engineCrash{err: &autoscaler.PanicError{Value: "a bug"}}
	close(crashed.done)
	return crashed
}

func TestLivenessFailsOnlyWhenTheLoopsOfAllRunningEnginesAreOverdue(t *testing.T) {
	for _, tt := range []struct {
		name    string
		engines func(t *testing.T) []*runningEngine
		live    bool
	}{
		{
			name:    "no ClusterAutoscaler, or not the leader",
			engines: func(*testing.T) []*runningEngine { return nil },
			live:    true,
		},
		{
			name:    "an engine within the time its loop may take",
			engines: func(t *testing.T) []*runningEngine { return []*runningEngine{engineWhoseLoop(t, false)} },
			live:    true,
		},
		{
			name:    "the only engine overdue",
			engines: func(t *testing.T) []*runningEngine { return []*runningEngine{engineWhoseLoop(t, true)} },
		},
		{
			name: "one engine overdue, another on time",
			engines: func(t *testing.T) []*runningEngine {
				return []*runningEngine{engineWhoseLoop(t, true), engineWhoseLoop(t, false)}
			},
			live: true,
		},
		{
			name: "every engine overdue",
			engines: func(t *testing.T) []*runningEngine {
				return []*runningEngine{engineWhoseLoop(t, true), engineWhoseLoop(t, true)}
			},
		},
		{
			name:    "only engines that panicked, waiting for their successors",
			engines: func(t *testing.T) []*runningEngine { return []*runningEngine{crashedEngine(t)} },
			live:    true,
		},
		{
			name: "an engine that panicked beside one overdue",
			engines: func(t *testing.T) []*runningEngine {
				return []*runningEngine{crashedEngine(t), engineWhoseLoop(t, true)}
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r := &ClusterAutoscalerReconciler{}
			for i, engine := range tt.engines(t) {
				r.engines.put(client.ObjectKey{Namespace: "default", Name: string(rune('a' + i))}, engine)
			}

			err := r.CheckEnginesProgress(nil)

			if tt.live {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring("overdue")))
			}
		})
	}
}

func TestAnOverdueLoopIsReportedOnItsClusterAutoscalerUntilALoopFinishes(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Now())
	running := engineOn(t, clock)
	recorder := record.NewFakeRecorder(10)
	r := &ClusterAutoscalerReconciler{Clock: clock, Recorder: recorder}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "autoscaler"},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "workload"},
	}
	reconcile := func() time.Duration {
		s := newReconcileScope(ca)
		s.engine = running
		s.loop = running.engine.Status()
		recheck := r.watchLoopProgress(context.Background(), s)
		updateStatus(s)
		return recheck
	}

	g.Expect(reconcile()).To(Equal(autoscaler.DefaultLoopTimeout+time.Second), "looked at again once the first loop is due")
	g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).To(BeNil())

	clock.Step(autoscaler.DefaultLoopTimeout + time.Second)
	g.Expect(reconcile()).To(BeZero(), "the loop that finishes reconciles")
	ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)
	g.Expect(ready).To(HaveField("Status", metav1.ConditionFalse))
	g.Expect(ready).To(HaveField("Reason", autoscalingv1alpha1.LoopStalledReason))
	g.Expect(ready.Message).To(ContainSubstring("The autoscaling loop of Cluster default/workload was due to finish by"))
	g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).To(HaveField("Reason", autoscalingv1alpha1.LoopStalledReason))
	g.Expect(recorder.Events).To(Receive(HavePrefix("Warning LoopStalled The autoscaling loop of Cluster default/workload was due")))
	reconcile()
	g.Expect(recorder.Events).NotTo(Receive(), "one event when it becomes overdue")

	// A loop that finishes at last.
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = running.engine.Run(ctx)
	}()
	g.Eventually(func() bool { return running.engine.Status().Time.IsZero() }).Should(BeFalse())
	cancel()
	<-stopped
	config := autoscaler.DefaultConfig()
	g.Expect(reconcile()).To(Equal(config.ScanInterval+config.TriggerBatchWindow+autoscaler.DefaultLoopTimeout+time.Second), "looked at again when the next loop is due")
	g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).NotTo(HaveField("Reason", autoscalingv1alpha1.LoopStalledReason))
	g.Expect(conditions.Get(ca, autoscalingv1alpha1.ScalingActiveCondition)).NotTo(HaveField("Reason", autoscalingv1alpha1.LoopStalledReason))
	g.Expect(ca.Status.LastLoopTime).NotTo(BeNil())
}
