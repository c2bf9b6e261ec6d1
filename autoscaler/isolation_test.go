package autoscaler_test

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
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
