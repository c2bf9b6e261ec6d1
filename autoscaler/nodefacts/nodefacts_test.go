package nodefacts_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

var created = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// node is a node created at created, with the Ready condition status and
// a NoSchedule taint for each key.
func node(ready corev1.ConditionStatus, taintKeys ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "md-0-abc", CreationTimestamp: metav1.NewTime(created)},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}},
	}
	for _, key := range taintKeys {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
	}
	return n
}

// transitioned sets when node's Ready condition last changed, after its creation.
func transitioned(node *corev1.Node, after time.Duration) *corev1.Node {
	node.Status.Conditions[0].LastTransitionTime = metav1.NewTime(created.Add(after))
	return node
}

func TestReadiness(t *testing.T) {
	rules := nodefacts.NewRules([]string{"example.com/cni-not-ready"}, []string{"example.com/gpu-health"})
	young, old := created.Add(time.Minute), created.Add(nodefacts.MaxStartupTime)
	tests := []struct {
		name string
		node *corev1.Node
		now  time.Time
		want nodefacts.Readiness
	}{
		{name: "ready", node: node(corev1.ConditionTrue), now: old, want: nodefacts.Ready},
		{name: "ready with a taint of its own", node: node(corev1.ConditionTrue, "dedicated"), now: old, want: nodefacts.Ready},
		{name: "young and not ready", node: node(corev1.ConditionFalse), now: young, want: nodefacts.NotStarted},
		{name: "old and not ready", node: node(corev1.ConditionFalse), now: old, want: nodefacts.Unready},
		{name: "young, Ready, awaiting its DRA devices", node: nodefacts.AwaitingDevices(transitioned(node(corev1.ConditionTrue), 30*time.Second), []string{"gpu.example.com"}), now: created.Add(5 * time.Minute), want: nodefacts.NotStarted},
		{name: "old, awaiting its DRA devices", node: nodefacts.AwaitingDevices(node(corev1.ConditionTrue), []string{"gpu.example.com"}), now: old, want: nodefacts.Unready},
		{name: "young, not ready since its start", node: transitioned(node(corev1.ConditionFalse), time.Second), now: young, want: nodefacts.NotStarted},
		{name: "young, went down after it had started", node: transitioned(node(corev1.ConditionFalse), 5*time.Minute), now: created.Add(6 * time.Minute), want: nodefacts.Unready},
		{name: "young, unreachable after it had started", node: transitioned(node(corev1.ConditionUnknown, corev1.TaintNodeUnreachable), 5*time.Minute), now: created.Add(6 * time.Minute), want: nodefacts.Unready},
		{name: "young, a startup taint outlives a late Ready", node: transitioned(node(corev1.ConditionTrue, nodefacts.StartupTaintPrefix+"foo"), 5*time.Minute), now: created.Add(6 * time.Minute), want: nodefacts.NotStarted},
		{name: "no Ready condition", node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(created)}}, now: young, want: nodefacts.NotStarted},
		{name: "Ready but the not-ready taint not lifted yet", node: node(corev1.ConditionTrue, corev1.TaintNodeNotReady), now: young, want: nodefacts.NotStarted},
		{name: "Ready but unreachable", node: node(corev1.ConditionTrue, corev1.TaintNodeUnreachable), now: old, want: nodefacts.Unready},
		{name: "startup taint prefix", node: node(corev1.ConditionTrue, nodefacts.StartupTaintPrefix+"foo"), now: young, want: nodefacts.NotStarted},
		{name: "ignore taint prefix", node: node(corev1.ConditionTrue, nodefacts.IgnoreTaintPrefix+"foo"), now: young, want: nodefacts.NotStarted},
		{name: "Cluster API's uninitialized taint", node: node(corev1.ConditionTrue, nodefacts.ClusterAPIUninitializedTaint), now: young, want: nodefacts.NotStarted},
		{name: "configured startup taint", node: node(corev1.ConditionTrue, "example.com/cni-not-ready"), now: young, want: nodefacts.NotStarted},
		{name: "startup taint kept past the startup time", node: node(corev1.ConditionTrue, nodefacts.StartupTaintPrefix+"foo"), now: old, want: nodefacts.Unready},
		{name: "status taint prefix", node: node(corev1.ConditionTrue, nodefacts.StatusTaintPrefix+"foo"), now: young, want: nodefacts.Ready},
		{name: "configured status taint", node: node(corev1.ConditionTrue, "example.com/gpu-health"), now: young, want: nodefacts.Ready},
		{name: "autoscaler's taints", node: node(corev1.ConditionTrue, nodefacts.ToBeDeletedTaint, nodefacts.DeletionCandidateTaint), now: young, want: nodefacts.Ready},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(rules.Readiness(tt.node, tt.now)).To(Equal(tt.want))
			g.Expect(rules.Ready(tt.node)).To(Equal(tt.want == nodefacts.Ready))
		})
	}
}

func TestStartupTaintsAreConfiguredPerCluster(t *testing.T) {
	g := NewWithT(t)
	tainted := node(corev1.ConditionTrue, "example.com/cni-not-ready")
	g.Expect(nodefacts.Rules{}.Ready(tainted)).To(BeTrue(), "an unlisted taint is the node's own")
	g.Expect(nodefacts.NewRules([]string{"example.com/cni-not-ready"}, nil).Ready(tainted)).To(BeFalse())
}

func TestUsableAsTemplate(t *testing.T) {
	deleted := node(corev1.ConditionTrue)
	deleted.DeletionTimestamp = &metav1.Time{Time: created}
	cordoned := node(corev1.ConditionTrue)
	cordoned.Spec.Unschedulable = true
	tests := []struct {
		name string
		node *corev1.Node
		want bool
	}{
		{name: "ready", node: node(corev1.ConditionTrue), want: true},
		{name: "still carrying startup taints", node: node(corev1.ConditionTrue, nodefacts.ClusterAPIUninitializedTaint, nodefacts.StartupTaintPrefix+"foo"), want: true},
		{name: "not ready", node: node(corev1.ConditionFalse), want: false},
		{name: "not-ready taint", node: node(corev1.ConditionTrue, corev1.TaintNodeNotReady), want: false},
		{name: "being removed by the autoscaler", node: node(corev1.ConditionTrue, nodefacts.ToBeDeletedTaint), want: false},
		{name: "deleted", node: deleted, want: false},
		{name: "cordoned", node: cordoned, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(nodefacts.UsableAsTemplate(tt.node)).To(Equal(tt.want))
		})
	}
}

func TestTemplateNodeKeepsOnlyTemplateTaints(t *testing.T) {
	rules := nodefacts.NewRules([]string{"example.com/cni-not-ready"}, []string{"example.com/gpu-health"})
	tests := []struct {
		key  string
		kept bool
	}{
		{key: "dedicated", kept: true},
		{key: "nvidia.com/gpu", kept: true},
		{key: nodefacts.StartupTaintPrefix + "foo"},
		{key: nodefacts.IgnoreTaintPrefix + "foo"},
		{key: nodefacts.StatusTaintPrefix + "foo"},
		{key: nodefacts.ClusterAPIUninitializedTaint},
		{key: "example.com/cni-not-ready"},
		{key: "example.com/gpu-health"},
		{key: nodefacts.ToBeDeletedTaint},
		{key: nodefacts.DeletionCandidateTaint},
		{key: corev1.TaintNodeNotReady},
		{key: corev1.TaintNodeUnreachable},
		{key: corev1.TaintNodeUnschedulable},
		{key: corev1.TaintNodeMemoryPressure},
		{key: corev1.TaintNodeDiskPressure},
		{key: corev1.TaintNodePIDPressure},
		{key: corev1.TaintNodeNetworkUnavailable},
		{key: corev1.TaintNodeOutOfService},
		{key: "node.cloudprovider.kubernetes.io/uninitialized"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			g := NewWithT(t)
			taint := corev1.Taint{Key: tt.key, Value: "v", Effect: corev1.TaintEffectNoSchedule}
			member := node(corev1.ConditionTrue)
			member.Spec.Taints = []corev1.Taint{taint}
			template := rules.TemplateNode(member, "MachineDeployment/default/md-0")
			if tt.kept {
				g.Expect(template.Spec.Taints).To(Equal([]corev1.Taint{taint}))
			} else {
				g.Expect(template.Spec.Taints).To(BeEmpty())
			}
		})
	}
}

func TestTemplateNodeIsANewNodeOfTheGroup(t *testing.T) {
	g := NewWithT(t)
	member := node(corev1.ConditionTrue, "dedicated")
	member.UID, member.ResourceVersion = "1234", "42"
	member.Labels = map[string]string{corev1.LabelHostname: "md-0-abc", corev1.LabelTopologyZone: "zone-a", "pool": "workers"}
	member.Annotations = map[string]string{"example.com/note": "x"}
	member.Spec.ProviderID = "test:///md-0-abc"
	member.Spec.Unschedulable = true
	member.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3800m")}

	template := nodefacts.Rules{}.TemplateNode(member, "MachineDeployment/default/md-0")

	g.Expect(template.Name).To(Equal("template-machinedeployment-default-md-0"))
	g.Expect(template.UID).To(BeEmpty())
	g.Expect(template.ResourceVersion).To(BeEmpty())
	g.Expect(template.CreationTimestamp.IsZero()).To(BeTrue())
	g.Expect(template.Spec.ProviderID).To(BeEmpty())
	g.Expect(template.Spec.Unschedulable).To(BeFalse())
	g.Expect(template.Labels).To(Equal(map[string]string{
		corev1.LabelHostname: template.Name, corev1.LabelTopologyZone: "zone-a", "pool": "workers"}))
	g.Expect(template.Annotations).To(Equal(member.Annotations))
	g.Expect(template.Status.Allocatable).To(Equal(member.Status.Allocatable))
	g.Expect(member.Labels).To(HaveKeyWithValue(corev1.LabelHostname, "md-0-abc"), "the member node does not change")
	g.Expect(member.Spec.Taints).To(HaveLen(1))

	fromZero := nodefacts.Rules{}.TemplateNode(&corev1.Node{}, "MachineSet/default/ms-0")
	g.Expect(fromZero.Labels).To(Equal(map[string]string{corev1.LabelHostname: "template-machineset-default-ms-0"}),
		"a node without labels gets a hostname too")
}
