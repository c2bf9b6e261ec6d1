package autoscaler_test

import (
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// groupPerValue returns a node group of 4-cpu nodes for each value of a
// node label, each with one node that its pods keep busy, so that every
// value is a topology domain, as kube-scheduler counts them. The groups
// differ by that label only, and are not similar.
func groupPerValue(label string, values ...string) ([]*fakeGroup, []client.Object) {
	var groups []*fakeGroup
	var objects []client.Object
	for _, value := range values {
		group := &fakeGroup{id: "MachineDeployment/default/md-" + value, max: 10,
			template: st.Node("template-"+value, "4", "16Gi", st.WithNodeLabels(label, value))}
		for _, node := range group.addNodes(1, st.WithNodeLabels(label, value)) {
			objects = append(objects, node, st.Pod("busy-"+node.Name, "4", "1Gi", st.OwnedBy("busy"), st.OnNode(node.Name)))
		}
		groups = append(groups, group)
	}
	return groups, objects
}

// spreadOver spreads pods labelled app=name over the values of a node
// label, at most one pod apart, DoNotSchedule.
func spreadOver(label, name string) st.PodOption {
	return func(pod *corev1.Pod) {
		st.WithPodLabels("app", name)(pod)
		pod.Spec.TopologySpreadConstraints = append(pod.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: 1, TopologyKey: label, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
		})
	}
}

// nodesAdded are the nodes each group was asked for beyond its instances.
func nodesAdded(groups []*fakeGroup) []int {
	added := make([]int, len(groups))
	for i, group := range groups {
		added[i] = group.target - len(group.instances)
	}
	return added
}

// Karpenter's topology tests, through the engine: small pods spread
// (maxSkew 1) over groups that differ by the spread's label. Each round
// of the plan adds a node to one group for one pod, as the spread allows
// no second pod in a domain before every domain has one; then the nodes
// planned take the other pods. Before the rounds reused the nodes planned
// before them, the same loop added 17 nodes (4, 4, 4, 3, 2) and 3 (2, 1).
func TestPodsSpreadOverGroupsByALabelGetOneNodePerGroup(t *testing.T) {
	for _, tt := range []struct {
		name      string
		label     string
		values    []string
		pods      int
		wantAdded []int
	}{
		{name: "should balance pods across a label", label: "example.com/rack",
			values: []string{"a", "b", "c", "d", "e"}, pods: 20, wantAdded: []int{1, 1, 1, 1, 1}},
		{name: "should balance pods across capacity types", label: "example.com/capacity-type",
			values: []string{"on-demand", "spot"}, pods: 4, wantAdded: []int{1, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			groups, objects := groupPerValue(tt.label, tt.values...)
			for i := range tt.pods {
				objects = append(objects, st.Pod(fmt.Sprint("web-", i), "100m", "128Mi", st.OwnedBy("web"), spreadOver(tt.label, "web")))
			}
			f := newFixture(t, groups, objects...)

			f.runOnce(t)
			g.Expect(nodesAdded(groups)).To(Equal(tt.wantAdded))
			g.Expect(f.podEvents()).To(And(HaveLen(tt.pods), HaveEach(ContainSubstring(autoscaler.EventTriggeredScaleUp))), "every pod is helped")
			f.runOnce(t)
			g.Expect(nodesAdded(groups)).To(Equal(tt.wantAdded), "the next loop adds none")
		})
	}
}
