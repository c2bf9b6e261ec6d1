package scaleup_test

import (
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func sizedGroup(name, cpu, memory string, max int) *st.NodeGroup {
	return &st.NodeGroup{Name: name, Max: max, Template: st.Node(name+"-template", cpu, memory)}
}

// priced gives the group a price of its own, as its price annotation does.
func priced(group *st.NodeGroup, price string) *st.NodeGroup {
	perHour, err := pricing.Parse(price)
	if err != nil {
		panic(err)
	}
	group.Price = &perHour
	return group
}

// ofInstanceType labels the group's template with an instance type.
func ofInstanceType(group *st.NodeGroup, instanceType string) *st.NodeGroup {
	group.Template.Labels[corev1.LabelInstanceTypeStable] = instanceType
	return group
}

func TestExpanders(t *testing.T) {
	tests := []struct {
		name      string
		expanders []string
		// priorities for the priority expander.
		priorities map[int32][]string
		// instanceTypePrices for the price expander.
		instanceTypePrices pricing.Table
		groups             []*st.NodeGroup
		pods               []*corev1.Pod
		want               map[string]int
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
			name:      "price picks the group whose new nodes cost least for the pods",
			expanders: []string{scaleup.ExpanderPrice},
			// Both take all 8 pods: 2 small nodes cost 0.40, 1 large node 0.30.
			// least-waste would tie them and take a-small, the first by ID.
			groups: []*st.NodeGroup{priced(sizedGroup("a-small", "4", "8Gi", 10), "0.20"), priced(sizedGroup("b-large", "8", "16Gi", 10), "0.30")},
			pods:   st.Replicas("web", 8, "1", "1Gi"),
			want:   map[string]int{"b-large": 1},
		},
		{
			name:      "price weighs the cost against the pods helped, round by round",
			expanders: []string{scaleup.ExpanderPrice},
			// a-tiny helps 2 pods for 0.05, b-dear 4 pods for 0.50 (two
			// nodes): a-tiny first, as 0.025 a pod beats 0.125; once it is
			// at its max, b-dear takes the 2 pods left.
			groups: []*st.NodeGroup{priced(sizedGroup("a-tiny", "2", "4Gi", 1), "0.05"), priced(sizedGroup("b-dear", "2", "4Gi", 10), "0.25")},
			pods:   st.Replicas("web", 4, "1", "1Gi"),
			want:   map[string]int{"a-tiny": 1, "b-dear": 1},
		},
		{
			name:      "unpriced groups cost the default for their capacity",
			expanders: []string{scaleup.ExpanderPrice},
			// The same nodes: b-default costs 4 × 0.033174 + 8 × 0.004446 = 0.168264, less than a-priced.
			groups: []*st.NodeGroup{priced(sizedGroup("a-priced", "4", "8Gi", 10), "0.17"), sizedGroup("b-default", "4", "8Gi", 10)},
			pods:   st.Replicas("web", 2, "1", "1Gi"),
			want:   map[string]int{"b-default": 1},
		},
		{
			name:      "the table prices a group by its instance type",
			expanders: []string{scaleup.ExpanderPrice},
			groups: []*st.NodeGroup{ofInstanceType(sizedGroup("a-default", "4", "8Gi", 10), "unlisted"),
				ofInstanceType(sizedGroup("b-listed", "4", "8Gi", 10), "m5.xlarge")},
			instanceTypePrices: pricing.Table{"m5.xlarge": 100_000},
			pods:               st.Replicas("web", 2, "1", "1Gi"),
			want:               map[string]int{"b-listed": 1},
		},
		{
			name:      "a group's own price beats the table's for its instance type",
			expanders: []string{scaleup.ExpanderPrice},
			// By the table a-annotated would cost 1.00, more than b-default.
			groups: []*st.NodeGroup{priced(ofInstanceType(sizedGroup("a-annotated", "4", "8Gi", 10), "m5.xlarge"), "0.10"),
				sizedGroup("b-default", "4", "8Gi", 10)},
			instanceTypePrices: pricing.Table{"m5.xlarge": 1_000_000},
			pods:               st.Replicas("web", 2, "1", "1Gi"),
			want:               map[string]int{"a-annotated": 1},
		},
		{
			name:       "price passes its ties to the next expander",
			expanders:  []string{scaleup.ExpanderPrice, scaleup.ExpanderPriority},
			priorities: map[int32][]string{10: {"^c-"}},
			// 3 nodes at 0.10 cost what 1 node at 0.30 does: a tie, which
			// priority breaks.
			groups: []*st.NodeGroup{priced(sizedGroup("a-pricier", "12", "24Gi", 10), "0.31"), priced(sizedGroup("b-small", "4", "8Gi", 10), "0.10"),
				priced(sizedGroup("c-large", "12", "24Gi", 10), "0.30")},
			pods: st.Replicas("web", 3, "4", "1Gi"),
			want: map[string]int{"c-large": 1},
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
				o.InstanceTypePrices = tt.instanceTypePrices
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

// With the price expander in the chain, the last node of the option chosen
// runs its pods on a cheaper node of another group when one takes them
// all: 9 one-cpu pods take 2 large nodes (0.60), the last with one pod,
// where 1 large and 1 small node cost 0.44. The expanders ahead of price
// still choose the option for the last node's pods, and without price in
// the chain nothing changes. Similar groups stay balanced.
func TestPriceSizesTheLastNodeOfAnOptionToItsPods(t *testing.T) {
	large := func(name string) *st.NodeGroup {
		return priced(&st.NodeGroup{Name: name, Max: 10, Template: st.Node(name+"-template", "8", "16Gi", st.WithNodeLabels("pool", "workers"))}, "0.30")
	}
	small := func() *st.NodeGroup { return priced(sizedGroup("b-small", "2", "4Gi", 10), "0.14") }
	tests := []struct {
		name       string
		expanders  []string
		priorities map[int32][]string
		balance    bool
		groups     []*st.NodeGroup
		pods       int
		want       map[string]int
	}{
		{
			name:      "price: one large node and one small one",
			expanders: []string{scaleup.ExpanderPrice, scaleup.ExpanderLeastWaste},
			groups:    []*st.NodeGroup{large("a-large"), small()},
			pods:      9,
			want:      map[string]int{"a-large": 1, "b-small": 1},
		},
		{
			name:       "priority ahead of price chooses the large group for the last pod too",
			expanders:  []string{scaleup.ExpanderPriority, scaleup.ExpanderPrice},
			priorities: map[int32][]string{10: {"^a-"}},
			groups:     []*st.NodeGroup{large("a-large"), small()},
			pods:       9,
			want:       map[string]int{"a-large": 2},
		},
		{
			name:       "priority alone: the option as it is",
			expanders:  []string{scaleup.ExpanderPriority},
			priorities: map[int32][]string{10: {"^a-"}},
			groups:     []*st.NodeGroup{large("a-large"), small()},
			pods:       9,
			want:       map[string]int{"a-large": 2},
		},
		{
			name:      "balanced over similar groups, the last node sized",
			expanders: []string{scaleup.ExpanderPrice, scaleup.ExpanderLeastWaste},
			balance:   true,
			groups:    []*st.NodeGroup{large("a-large-1"), large("a-large-2"), small()},
			pods:      17,
			want:      map[string]int{"a-large-1": 1, "a-large-2": 1, "b-small": 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := options(func(o *scaleup.Options) {
				o.Expanders = tt.expanders
				o.Priorities = tt.priorities
				o.BalanceSimilarNodeGroups = tt.balance
			})
			plan := planFor(t, opts, cluster{groups: tt.groups, pods: st.Replicas("web", tt.pods, "1", "1Gi")}, scaleup.State{})
			g := NewWithT(t)
			g.Expect(increases(plan)).To(Equal(tt.want))
			g.Expect(plan.Helped).To(HaveLen(tt.pods))
		})
	}
}
