package scaleup_test

import (
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func sizedGroup(name, cpu, memory string, max int) *st.NodeGroup {
	return &st.NodeGroup{Name: name, Max: max, Template: st.Node(name+"-template", cpu, memory)}
}

func TestExpanders(t *testing.T) {
	tests := []struct {
		name      string
		expanders []string
		// priorities for the priority expander.
		priorities map[int32][]string
		groups     []*st.NodeGroup
		pods       []*corev1.Pod
		want       map[string]int
	}{
		{
			name:      "most-pods picks the group that schedules the most pods",
			expanders: []string{scaleup.ExpanderMostPods},
			// b-large takes all 8 pods, a-small 4: nothing is left for a second round.
			groups: []*st.NodeGroup{sizedGroup("a-small", "4", "8Gi", 1), sizedGroup("b-large", "8", "16Gi", 1)},
			pods:   st.Replicas("web", 8, "1", "1Gi"),
			want:   map[string]int{"b-large": 1},
		},
		{
			name:      "least-waste picks the group leaving the least cpu and memory idle",
			expanders: []string{scaleup.ExpanderLeastWaste},
			// 3 pods of 3 cpu: 3 nodes of 4 cpu waste 25% cpu, 2 of 8 cpu waste 44%.
			groups: []*st.NodeGroup{sizedGroup("a-large", "8", "16Gi", 10), sizedGroup("b-small", "4", "8Gi", 10)},
			pods:   st.Replicas("web", 3, "3", "1Gi"),
			want:   map[string]int{"b-small": 3},
		},
		{
			name:       "priority picks the group with the highest matching priority",
			expanders:  []string{scaleup.ExpanderPriority},
			priorities: map[int32][]string{10: {"spot"}, 5: {".*"}},
			groups:     []*st.NodeGroup{sizedGroup("on-demand", "4", "8Gi", 10), sizedGroup("spot", "4", "8Gi", 10), sizedGroup("unmatched", "4", "8Gi", 10)},
			pods:       st.Replicas("web", 2, "3", "1Gi"),
			want:       map[string]int{"spot": 2},
		},
		{
			name:       "ties pass to the next expander",
			expanders:  []string{scaleup.ExpanderPriority, scaleup.ExpanderLeastWaste},
			priorities: map[int32][]string{10: {"^a-", "^b-"}},
			groups:     []*st.NodeGroup{sizedGroup("a-large", "8", "16Gi", 10), sizedGroup("b-small", "4", "8Gi", 10), sizedGroup("c-small", "4", "8Gi", 10)},
			pods:       st.Replicas("web", 3, "3", "1Gi"),
			want:       map[string]int{"b-small": 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			opts := options(func(o *scaleup.Options) {
				o.Expanders = tt.expanders
				o.Priorities = tt.priorities
			})
			plan := planFor(t, opts, cluster{groups: tt.groups, pods: tt.pods}, scaleup.State{})
			g.Expect(increases(plan)).To(Equal(tt.want))
		})
	}
}

func TestRandomExpanderPicksAmongTheTiesItIsGiven(t *testing.T) {
	g := NewWithT(t)
	chosen := map[string]int{}
	for seed := range uint64(40) {
		opts := options(func(o *scaleup.Options) {
			o.Expanders = []string{scaleup.ExpanderMostPods, scaleup.ExpanderRandom}
			o.Rand = rand.New(rand.NewPCG(seed, seed))
		})
		groups := []*st.NodeGroup{sizedGroup("a", "8", "16Gi", 1), sizedGroup("b", "8", "16Gi", 1), sizedGroup("c-small", "4", "8Gi", 1)}
		plan := planFor(t, opts, cluster{groups: groups, pods: st.Replicas("web", 8, "1", "1Gi")}, scaleup.State{})
		g.Expect(plan.Increases).To(HaveLen(1))
		chosen[plan.Increases[0].Group.ID()]++
	}
	g.Expect(chosen).To(HaveLen(2), "both tied groups get picked, never the one with fewer pods: %v", chosen)
	g.Expect(chosen).To(HaveKey("a"))
	g.Expect(chosen).To(HaveKey("b"))
}

func TestNewRejectsBadOptions(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*scaleup.Options)
		wantErr string
	}{
		{name: "unknown expander", mutate: func(o *scaleup.Options) { o.Expanders = []string{"cheapest"} }, wantErr: `unknown expander "cheapest"`},
		{name: "bad pattern", mutate: func(o *scaleup.Options) { o.Priorities = map[int32][]string{1: {"("}} }, wantErr: "invalid node group pattern"},
		{name: "no clock", mutate: func(o *scaleup.Options) { o.Clock = nil }, wantErr: "clock"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := scaleup.New(options(tt.mutate))
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}
