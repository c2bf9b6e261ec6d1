package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
	if overdue {
		clock.Step(autoscaler.DefaultLoopTimeout + time.Second)
	}
	return &runningEngine{engine: engine, done: make(chan struct{})}
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
