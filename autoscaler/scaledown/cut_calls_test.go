package scaledown_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// A call to the workload API server cut by the end of its context (the
// loop's timeout, the engine stopped) is a failure, not a success: the
// soak (seed 322) saw the engine panic on the node it had not read, when
// the workload API server was unreachable as the loop's deadline passed.
func TestCallsCutByTheirContextFail(t *testing.T) {
	cutGets := func(f *actuatorFixture) *atomic.Bool {
		cut := &atomic.Bool{}
		f.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			if cut.Load() {
				return true, nil, fmt.Errorf("reading the node: %w", context.DeadlineExceeded)
			}
			return false, nil, nil
		})
		return cut
	}

	t.Run("the taint of an empty node", func(t *testing.T) {
		g := NewWithT(t)
		a1 := node("a1")
		f := newActuatorFixture(t, a1)
		group := newGroup("ng", a1)
		cut := cutGets(f)
		cut.Store(true)

		g.Expect(func() { f.start(g, &scaledown.Plan{Empty: []scaledown.Removal{{Node: a1, Group: group}}}) }).NotTo(Panic())

		cut.Store(false)
		g.Expect(group.Deleted).To(BeEmpty())
		expectTainted(g, f.node(g, "a1"), false)
		g.Expect(f.actuator.Progress().LastFailure).NotTo(BeZero())
		g.Expect(f.events()).To(ContainElement(ContainSubstring("failed to taint node: reading the node: context deadline exceeded")))
	})

	t.Run("the release of a tainted node", func(t *testing.T) {
		g := NewWithT(t)
		a1 := node("a1")
		f := newActuatorFixture(t, a1)
		cut := cutGets(f)
		cut.Store(true)

		_, err := scaledown.ReleaseNode(f.ctx, f.client, testOwner, "a1")

		g.Expect(err).To(MatchError(context.DeadlineExceeded), "a release that did not happen is not reported as nothing to release")
	})
}
