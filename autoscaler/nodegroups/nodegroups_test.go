package nodegroups_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// overridingGroup is a node group with per-group overrides.
type overridingGroup struct {
	*st.NodeGroup
	options nodegroups.GroupOptions
}

func (g overridingGroup) Options() nodegroups.GroupOptions { return g.options }

func TestSettingsForAGroupTakeItsOverrides(t *testing.T) {
	cluster := nodegroups.Settings{
		ScaleDownUtilizationThreshold: 0.5,
		ScaleDownUnneededTime:         10 * time.Minute,
		ScaleDownUnreadyTime:          20 * time.Minute,
		MaxNodeProvisionTime:          15 * time.Minute,
	}
	tests := []struct {
		name    string
		options nodegroups.GroupOptions
		want    nodegroups.Settings
	}{
		{name: "no overrides", want: cluster},
		{
			name: "every override",
			options: nodegroups.GroupOptions{
				ScaleDownUtilizationThreshold: ptr.To(0.7),
				ScaleDownUnneededTime:         ptr.To(time.Minute),
				ScaleDownUnreadyTime:          ptr.To(2 * time.Minute),
				MaxNodeProvisionTime:          ptr.To(30 * time.Minute),
			},
			want: nodegroups.Settings{ScaleDownUtilizationThreshold: 0.7, ScaleDownUnneededTime: time.Minute, ScaleDownUnreadyTime: 2 * time.Minute, MaxNodeProvisionTime: 30 * time.Minute},
		},
		{
			name:    "an override of zero is an override",
			options: nodegroups.GroupOptions{ScaleDownUnneededTime: ptr.To(time.Duration(0))},
			want:    nodegroups.Settings{ScaleDownUtilizationThreshold: 0.5, ScaleDownUnreadyTime: 20 * time.Minute, MaxNodeProvisionTime: 15 * time.Minute},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group := overridingGroup{NodeGroup: &st.NodeGroup{Name: "ng"}, options: tt.options}
			NewWithT(t).Expect(cluster.For(group)).To(Equal(tt.want))
		})
	}
}

// instancesGroup is a node group with the given instances.
type instancesGroup struct {
	*st.NodeGroup
	instances []nodegroups.Instance
}

func (g instancesGroup) Instances() []nodegroups.Instance { return g.instances }

func TestExpectedNodeNamesAreKnownOnlyWhereNodesAreNamedAfterTheirMachines(t *testing.T) {
	running := func(machine, node string) nodegroups.Instance {
		return nodegroups.Instance{Name: machine, NodeName: node, State: nodegroups.InstanceRunning}
	}
	booting := func(machine string) nodegroups.Instance {
		return nodegroups.Instance{Name: machine, State: nodegroups.InstanceCreating}
	}
	failed := nodegroups.Instance{Name: "md-failed", State: nodegroups.InstanceCreating, Error: &nodegroups.InstanceError{Reason: "MachineFailed"}}
	tests := []struct {
		name string
		// instances are those of md, and others those of another group
		// of the cluster.
		instances, others []nodegroups.Instance
		want              []string
	}{
		{name: "nodes named after their machines", instances: []nodegroups.Instance{running("md-a", "md-a"), booting("md-b"), booting("md-c")},
			want: []string{"md-b", "md-c"}},
		{name: "a node named otherwise", instances: []nodegroups.Instance{running("md-a", "md-a"), running("md-b", "ip-10-0-0-1"), booting("md-c")}},
		{name: "no node registered yet in the cluster, so no evidence", instances: []nodegroups.Instance{booting("md-b")}},
		{name: "failed and deleting machines get no node", instances: []nodegroups.Instance{running("md-a", "md-a"), failed,
			{Name: "md-gone", State: nodegroups.InstanceDeleting}}},
		{name: "no node registered yet, named as the other groups' nodes", instances: []nodegroups.Instance{booting("md-b")},
			others: []nodegroups.Instance{running("other-a", "other-a")}, want: []string{"md-b"}},
		{name: "no node registered yet, in a cluster whose nodes are named otherwise", instances: []nodegroups.Instance{booting("md-b")},
			others: []nodegroups.Instance{running("other-a", "ip-10-0-0-1")}},
		{name: "the group's own nodes tell, whatever the others'", instances: []nodegroups.Instance{running("md-a", "md-a"), booting("md-b")},
			others: []nodegroups.Instance{running("other-a", "ip-10-0-0-1")}, want: []string{"md-b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := instancesGroup{NodeGroup: &st.NodeGroup{Name: "md"}, instances: tc.instances}
			other := instancesGroup{NodeGroup: &st.NodeGroup{Name: "other"}, instances: tc.others}
			expected := nodegroups.ExpectedNodeNames([]nodegroups.NodeGroup{other, group})
			g.Expect(expected[group.ID()]).To(Equal(tc.want))
			g.Expect(expected).NotTo(HaveKey(other.ID()), "the other group has no machine on its way")
		})
	}
}
