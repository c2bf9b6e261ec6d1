package clusterstate_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/clusterstate"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// group is a node group with given instances; only what Update reads.
type group struct {
	nodegroups.NodeGroup
	target    int
	instances []nodegroups.Instance
}

func (g *group) ID() string                                         { return "MachineDeployment/default/md-0" }
func (g *group) TargetSize() int                                    { return g.target }
func (g *group) Instances() []nodegroups.Instance                   { return g.instances }
func (g *group) Options() nodegroups.GroupOptions                   { return nodegroups.GroupOptions{} }
func (g *group) TemplateNode(context.Context) (*corev1.Node, error) { return nil, nil }

func failedInstance(id string) nodegroups.Instance {
	return nodegroups.Instance{ID: id, State: nodegroups.InstanceCreating,
		Error: &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "quota exceeded"}}
}

func TestAFailedInstanceIsNewOnlyInTheFirstUpdateThatSeesIt(t *testing.T) {
	g := NewWithT(t)
	registry := clusterstate.NewRegistry(clusterstate.Options{Groups: nodegroups.Settings{MaxNodeProvisionTime: 15 * time.Minute}})
	now := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
	md := &group{target: 2, instances: []nodegroups.Instance{failedInstance("a")}}

	registry.Update([]nodegroups.NodeGroup{md}, nil, now)
	g.Expect(registry.Group(md.ID()).NewlyFailed).To(HaveLen(1))

	md.instances = append(md.instances, failedInstance("b"))
	registry.Update([]nodegroups.NodeGroup{md}, nil, now.Add(time.Second))
	state := registry.Group(md.ID())
	g.Expect(state.Failed).To(HaveLen(2), "both are still there to delete")
	g.Expect(state.NewlyFailed).To(ConsistOf(failedInstance("b")), "only the second is a new failure")

	md.instances = nil
	registry.Update([]nodegroups.NodeGroup{md}, nil, now.Add(2*time.Second))
	md.instances = []nodegroups.Instance{failedInstance("a")}
	registry.Update([]nodegroups.NodeGroup{md}, nil, now.Add(3*time.Second))
	g.Expect(registry.Group(md.ID()).NewlyFailed).To(HaveLen(1), "an instance that comes back failed is a new failure")
}
