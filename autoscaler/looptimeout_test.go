package autoscaler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// unsyncedProvider discovers node groups the way a cache whose informer
// cannot sync does (its list forbidden by RBAC, say): it waits until the
// context is done.
type unsyncedProvider struct{}

func (unsyncedProvider) NodeGroups(ctx context.Context) (nodegroups.List, error) {
	<-ctx.Done()
	return nodegroups.List{}, fmt.Errorf("waiting for the MachineDeployment informer to sync: %w", ctx.Err())
}

// A loop that waits on a read that never returns fails within the loop
// timeout, with the cause on its status, and the next loop runs.
func TestLoopThatDoesNotFinishFailsAtItsTimeout(t *testing.T) {
	g := NewWithT(t)
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload",
		Owner:       testOwner,
		Settings:    mustSettings(t, autoscaler.DefaultConfig(), clock.RealClock{}),
		NodeGroups:  unsyncedProvider{},
		Cluster:     fake.NewClientBuilder().Build(),
		Clientset:   kubefake.NewClientset(),
		Recorder:    record.NewFakeRecorder(10),
		LoopTimeout: 50 * time.Millisecond,
	})
	g.Expect(err).NotTo(HaveOccurred())

	for range 2 {
		status := engine.RunOnce(context.Background(), st.Now)
		g.Expect(status.Err).To(MatchError(ContainSubstring("the loop did not finish within 50ms")))
		g.Expect(status.Err).To(MatchError(ContainSubstring("waiting for the MachineDeployment informer to sync")))
		g.Expect(status.Err).To(MatchError(context.DeadlineExceeded))
		g.Expect(engine.Status().Err).To(Equal(status.Err), "the status reports the failed loop")
	}
}
