package clusterstate_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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

func TestUnregisteredTimeCountsFromFirstSight(t *testing.T) {
	const provisionTime = 15 * time.Minute
	// step is one Update, at after since the first.
	type step struct {
		after time.Duration
		// node: the instance has its registered node; gone: the group is
		// not in this Update.
		node, gone bool
		wantLong   bool
	}
	tests := []struct {
		name string
		// unremovable: DeleteInstances cannot remove the instance.
		unremovable bool
		steps       []step
	}{
		{
			name: "an old instance first seen without a node waits the provision time from then",
			steps: []step{
				{after: 0},
				{after: provisionTime - time.Second},
				{after: provisionTime, wantLong: true},
			},
		},
		{
			name: "an instance that registers and then loses its node starts again",
			steps: []step{
				{after: 0},
				{after: 10 * time.Minute, node: true},
				{after: 20 * time.Minute},
				{after: 20*time.Minute + provisionTime - time.Second},
				{after: 20*time.Minute + provisionTime, wantLong: true},
			},
		},
		{
			name: "a group that disappears and comes back starts again",
			steps: []step{
				{after: 0},
				{after: 10 * time.Minute, gone: true},
				{after: 20 * time.Minute},
				{after: 20*time.Minute + provisionTime, wantLong: true},
			},
		},
		{
			name:        "an instance that cannot be removed is never given up",
			unremovable: true,
			steps: []step{
				{after: 0},
				{after: 2 * provisionTime},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			registry := clusterstate.NewRegistry(clusterstate.Options{Groups: nodegroups.Settings{MaxNodeProvisionTime: provisionTime}})
			start := time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)
			// However old the instance, the Registry counts from when it
			// saw it without a node.
			instance := nodegroups.Instance{ID: "fake://m-0", State: nodegroups.InstanceCreating, Removable: !tt.unremovable}
			md := &group{target: 1}
			for _, s := range tt.steps {
				md.instances = []nodegroups.Instance{instance}
				var nodes []*corev1.Node
				if s.node {
					md.instances[0].NodeName, md.instances[0].State = "m-0", nodegroups.InstanceRunning
					nodes = []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "m-0"}}}
				}
				var groups []nodegroups.NodeGroup
				if !s.gone {
					groups = []nodegroups.NodeGroup{md}
				}
				registry.Update(groups, nodes, start.Add(s.after))
				if s.gone {
					continue
				}
				state := registry.Group(md.ID())
				if s.wantLong {
					g.Expect(state.LongUnregistered).To(ConsistOf(HaveField("ID", instance.ID)), "after %s", s.after)
					g.Expect(state.Upcoming).To(BeZero(), "an instance given up on is not awaited")
				} else {
					g.Expect(state.LongUnregistered).To(BeEmpty(), "after %s", s.after)
				}
			}
		})
	}
}
