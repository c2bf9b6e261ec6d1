package compare

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

func TestParseScaleUpMessage(t *testing.T) {
	group := func(id string, from, to, maxSize int32) GroupChange {
		return GroupChange{ID: id, Delta: to - from, From: &from, To: &to, Max: &maxSize}
	}
	cases := []struct {
		message     string
		want        []GroupChange
		wantProblem string
	}{
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)}]", want: []GroupChange{group(plugintest.MD0, 1, 3, 5)}},
		{
			message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->2 (max: 5)} {MachineDeployment/clusters/prod-md-1 0->1 (max: 3)}]",
			want:    []GroupChange{group(plugintest.MD0, 1, 2, 5), group(plugintest.MD1, 0, 1, 3)},
		},
		{
			message: "  pod triggered scale-up:[ { MachineDeployment/clusters/prod-md-0  1 -> 3 ( max:5 ) } ] ",
			want:    []GroupChange{group(plugintest.MD0, 1, 3, 5)},
		},
		{
			message: "pod triggered scale-up: {MachineSet/clusters/prod-ms-0 0->2}",
			want:    []GroupChange{{ID: "MachineSet/clusters/prod-ms-0", Delta: 2, From: ptr.To[int32](0), To: ptr.To[int32](2)}},
		},
		{
			message:     "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)} {MachineDeployment/clusters/prod-md-1 one->two}]",
			want:        []GroupChange{group(plugintest.MD0, 1, 3, 5)},
			wantProblem: `"{MachineDeployment/clusters/prod-md-1 one->two}" is no {group current->new (max: max)}`,
		},
		{message: "pod triggered scale-up: []", wantProblem: "names no node group"},
		{message: "pod triggered scale-up: [MachineDeployment/clusters/prod-md-0 grows]", wantProblem: `"MachineDeployment/clusters/prod-md-0 grows" is no {group`},
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->3 (max: 5)", wantProblem: "is not closed"},
		{message: "pod didn't trigger scale-up: no node group fits", wantProblem: `does not start with "pod triggered scale-up:"`},
		{message: "pod triggered scale-up: [{MachineDeployment/clusters/prod-md-0 1->99999999999 (max: 5)}]", wantProblem: "out of range"},
	}
	for _, c := range cases {
		t.Run(c.message, func(t *testing.T) {
			g := NewWithT(t)
			groups, err := parseScaleUpMessage(c.message)
			g.Expect(groups).To(Equal(c.want))
			if c.wantProblem == "" {
				g.Expect(err).NotTo(HaveOccurred())
			} else {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantProblem)))
			}
		})
	}
}

// The Active engine of capi-autoscaler is the other autoscaler too: its
// messages must read back as it meant them.
func TestParseScaleUpMessageReadsTheEnginesMessages(t *testing.T) {
	g := NewWithT(t)
	message := autoscaler.TriggeredScaleUpMessage([]autoscaler.GroupResize{{ID: plugintest.MD0, From: 1, To: 3, Max: 5}, {ID: plugintest.MD1, From: 0, To: 2, Max: 4}})
	groups, err := parseScaleUpMessage(message)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(groups).To(Equal([]GroupChange{
		{ID: plugintest.MD0, Delta: 2, From: ptr.To[int32](1), To: ptr.To[int32](3), Max: ptr.To[int32](5)},
		{ID: plugintest.MD1, Delta: 2, From: ptr.To[int32](0), To: ptr.To[int32](2), Max: ptr.To[int32](4)},
	}))
}

func TestScaleDownNode(t *testing.T) {
	on := func(kind, name, reason, message string) *corev1.Event {
		return &corev1.Event{Reason: reason, Message: message, InvolvedObject: corev1.ObjectReference{Kind: kind, Name: name}}
	}
	cases := []struct {
		event    *corev1.Event
		want     string
		wantErr  string
		notANode bool
	}{
		{event: on("Node", "prod-md-0-a", "ScaleDown", "marked the node as toBeDeleted/unschedulable"), want: "prod-md-0-a"},
		{event: on("Node", "prod-md-0-a", "ScaleDownEmpty", "removing empty node prod-md-0-a"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", `Scale-down: removing empty node "prod-md-0-a"`), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", "Scale-down: removing empty node prod-md-0-a"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDownEmpty", "Scale-down: empty node prod-md-0-a removed"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: removing node prod-md-0-a, utilization: {0.1 0.2 0 cpu 0.2}, pods to reschedule: web-0,web-1"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: node prod-md-0-a removed with drain"), want: "prod-md-0-a"},
		{event: on("ConfigMap", "cluster-autoscaler-status", "ScaleDown", "Scale-down: something new"), wantErr: `ScaleDown event "Scale-down: something new" names no node`},
		{event: on("Pod", "web-0", "ScaleDown", "deleting pod for node scale down"), notANode: true},
		{event: on("Node", "prod-md-0-a", "ScaleDownFailed", "failed to drain the node"), notANode: true},
	}
	for _, c := range cases {
		t.Run(c.event.InvolvedObject.Kind+" "+c.event.Reason+" "+c.event.Message, func(t *testing.T) {
			g := NewWithT(t)
			node, err := scaleDownNode(c.event)
			switch {
			case c.notANode:
				g.Expect(err).To(MatchError(errNotAboutANode))
			case c.wantErr != "":
				g.Expect(err).To(MatchError(c.wantErr))
			default:
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(node).To(Equal(c.want))
			}
		})
	}
}

func TestParseTheirStatus(t *testing.T) {
	i := func(n int32) *int32 { return &n }
	groups := []TheirGroupState{
		{ID: plugintest.MD0, Health: "Healthy", Target: i(3), MinSize: i(1), MaxSize: i(5), ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", Candidates: i(1)},
		{ID: plugintest.MD1, Health: "Unhealthy", Target: i(0), MinSize: i(0), MaxSize: i(3), ScaleUp: "Backoff", ScaleDown: "NoCandidates", Candidates: i(0)},
	}
	written := time.Date(2030, time.January, 2, 9, 59, 50, 123456789, time.UTC)
	cases := []struct {
		name string
		data map[string]string
		want TheirStatus
	}{
		{
			name: "yaml",
			data: map[string]string{"status": yamlStatus},
			want: TheirStatus{Format: "yaml", AutoscalerStatus: "Running", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent",
				// YAML leaves out candidates: 0.
				NodeGroups: []TheirGroupState{groups[0], func() TheirGroupState { g := groups[1]; g.Candidates = nil; return g }()}},
		},
		{
			name: "text",
			data: map[string]string{"status": textStatus},
			want: TheirStatus{Format: "text", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", NodeGroups: groups},
		},
		{
			name: "text of versions that did not name the node groups",
			data: map[string]string{"status": strings.ReplaceAll(strings.ReplaceAll(textStatus, "  Name:        "+plugintest.MD0+"\n", ""), "  Name:        "+plugintest.MD1+"\n", "")},
			want: TheirStatus{Format: "text", ClusterHealth: "Healthy", ScaleUp: "NoActivity", ScaleDown: "CandidatesPresent", NodeGroups: func() []TheirGroupState {
				unnamed := []TheirGroupState{groups[0], groups[1]}
				unnamed[0].ID, unnamed[1].ID = "", ""
				return unnamed
			}()},
		},
		{
			name: "text of its own",
			data: map[string]string{"status": "Cluster-autoscaler status at 2030-01-02: Initializing"},
			want: TheirStatus{Format: "text", Problem: "the text status says nothing compare understands"},
		},
		{
			name: "neither",
			data: map[string]string{"status": "{{{"},
			want: TheirStatus{Format: "unknown", Problem: "the status is neither text nor YAML"},
		},
		{
			name: "no status",
			data: map[string]string{},
			want: TheirStatus{Format: "unknown", Problem: `no key "status"`},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			configMap := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cluster-autoscaler-status", Annotations: map[string]string{
					"cluster-autoscaler.kubernetes.io/last-updated": "2030-01-02 09:59:50.123456789 +0000 UTC",
				}},
				Data: c.data,
			}
			got := parseTheirStatus(configMap)
			g.Expect(got.LastUpdated).NotTo(BeNil())
			g.Expect(got.LastUpdated.Time).To(BeTemporally("==", written))
			g.Expect(got.ConfigMap).To(Equal("kube-system/cluster-autoscaler-status"))
			g.Expect(got.Problem).To(HavePrefix(c.want.Problem))
			got.LastUpdated, got.ConfigMap, got.Problem = nil, "", ""
			c.want.Problem = ""
			g.Expect(*got).To(Equal(c.want))
		})
	}
}
