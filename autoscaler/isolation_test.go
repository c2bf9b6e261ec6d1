package autoscaler_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

func TestAPanicInALoopEndsRunWithAPanicErrorAndGivesBackTheDrains(t *testing.T) {
	g := NewWithT(t)
	f, group, nodes := drainingFixture(t)
	group.checkPanic = "a bug in a node group"

	// The first loop of Run carries on the drain, which checks the group.
	err := f.engine.Run(context.Background())

	var panicked *autoscaler.PanicError
	g.Expect(errors.As(err, &panicked)).To(BeTrue(), "Run returns the panic instead of passing it on: %v", err)
	g.Expect(panicked.Value).To(Equal("a bug in a node group"))
	g.Expect(f.tainted(t, nodes[1].Name)).To(BeFalse(), "a panic gives back the drains in progress, as a stop does")
	g.Expect(f.podEvents()).To(ContainElement(ContainSubstring("ScaleDownCancelled")))
	g.Expect(group.deletedNodes).To(BeEmpty())
	g.Expect(f.metric(t, "cluster_autoscaler_engine_panics_total", "")).To(Equal(1.0))
}

// failingProvider fails every discovery, as an unreachable cluster does.
type failingProvider struct{}

func (failingProvider) NodeGroups(context.Context) (nodegroups.List, error) {
	return nodegroups.List{}, errors.New("the workload cluster cannot be reached")
}

func TestAnEngineWhoseLoopsFinishIsNotStalledWhateverTheirOutcome(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	config := autoscaler.DefaultConfig()
	config.ScanInterval = time.Hour
	loops := make(chan autoscaler.Status, 10)
	engine := f.start(t, failingProvider{}, config, func(s autoscaler.Status) { loops <- s })

	for range 3 {
		g.Eventually(loops).Should(Receive(HaveField("Err", HaveOccurred())))
		g.Eventually(f.clock.HasWaiters).Should(BeTrue())
		f.clock.Step(59 * time.Minute)
		g.Expect(engine.Stalled()).To(BeFalse(), "a loop that fails has finished; the next is due after the hour-long scan interval")
		f.clock.Step(time.Minute)
	}
}

func TestAnEngineWhoseLoopDoesNotFinishIsStalledUntilItDoes(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t, nil)
	blocked, release := make(chan struct{}), make(chan struct{})
	// As a controller that no longer takes the statuses would.
	engine := f.start(t, f.provider, autoscaler.DefaultConfig(), func(autoscaler.Status) {
		close(blocked)
		<-release
	})
	g.Eventually(blocked).Should(BeClosed())

	f.clock.Step(autoscaler.DefaultLoopTimeout)
	g.Expect(engine.Stalled()).To(BeFalse(), "a loop may take up to the loop timeout")
	f.clock.Step(time.Second)
	g.Expect(engine.Stalled()).To(BeTrue())

	close(release)
	g.Eventually(engine.Stalled).Should(BeFalse(), "the loop finished, the next one is due later")
}
