package scaleup_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func zonalGroup(name, zone string, target, max int, opts ...st.NodeOption) *st.NodeGroup {
	opts = append([]st.NodeOption{st.WithNodeLabels(corev1.LabelTopologyZone, zone, "pool", "workers")}, opts...)
	return group(name, target, max, opts...)
}

func TestBalanceSimilarNodeGroups(t *testing.T) {
	tests := []struct {
		name    string
		disable bool
		groups  []*st.NodeGroup
		// pods is the number of pending 3-cpu pods, one per new node.
		pods int
		want map[string]int
	}{
		{
			name:   "one node goes to the smallest group",
			groups: []*st.NodeGroup{zonalGroup("a", "z1", 1, 10), zonalGroup("b", "z2", 3, 10), zonalGroup("c", "z3", 6, 10)},
			pods:   1,
			want:   map[string]int{"a": 1},
		},
		{
			name:   "four nodes even out the sizes: 1, 3, 6 become 4, 4, 6",
			groups: []*st.NodeGroup{zonalGroup("a", "z1", 1, 10), zonalGroup("b", "z2", 3, 10), zonalGroup("c", "z3", 6, 10)},
			pods:   4,
			want:   map[string]int{"a": 3, "b": 1},
		},
		{
			name:   "max sizes are respected",
			groups: []*st.NodeGroup{zonalGroup("a", "z1", 1, 2), zonalGroup("b", "z2", 3, 10), zonalGroup("c", "z3", 6, 10)},
			pods:   4,
			want:   map[string]int{"a": 1, "b": 3},
		},
		{
			name:    "without balancing the chosen group takes all",
			disable: true,
			groups:  []*st.NodeGroup{zonalGroup("a", "z1", 1, 10), zonalGroup("b", "z2", 3, 10), zonalGroup("c", "z3", 6, 10)},
			pods:    4,
			want:    map[string]int{"a": 4},
		},
		{
			name: "groups with other labels, capacity or room are not similar",
			groups: []*st.NodeGroup{
				zonalGroup("a", "z1", 1, 10),
				zonalGroup("b-other-labels", "z2", 0, 10, st.WithNodeLabels("pool", "batch")),
				{Name: "c-bigger", Max: 10, Template: st.Node("c", "8", "8Gi", st.WithNodeLabels(corev1.LabelTopologyZone, "z3", "pool", "workers"))},
				zonalGroup("d-less-allocatable", "z4", 0, 10, st.WithAllocatable(corev1.ResourceCPU, "3500m")),
				zonalGroup("e-slightly-less-allocatable", "z5", 0, 10, st.WithAllocatable(corev1.ResourceCPU, "3900m")),
			},
			pods: 2,
			want: map[string]int{"e-slightly-less-allocatable": 2},
		},
		{
			name: "groups the pods do not fit are left out",
			groups: []*st.NodeGroup{
				zonalGroup("a", "z1", 1, 10),
				zonalGroup("b-tainted", "z2", 0, 10, st.WithTaint("dedicated", "x", corev1.TaintEffectNoSchedule)),
				zonalGroup("c", "z3", 1, 10),
			},
			pods: 2,
			want: map[string]int{"a": 1, "c": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			opts := options(func(o *scaleup.Options) { o.BalanceSimilarNodeGroups = !tt.disable })
			c := cluster{groups: tt.groups, pods: st.Replicas("web", tt.pods, "3", "1Gi")}
			// No nodes are on their way: targets are what the groups have.
			plan := planFor(t, opts, c, scaleup.State{Upcoming: map[string]int{}})
			g.Expect(increases(plan)).To(Equal(tt.want))
			g.Expect(plan.Helped).To(HaveLen(tt.pods))
		})
	}
}
