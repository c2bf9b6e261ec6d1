package soak

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

func eventBody(t *testing.T, reason string) []byte {
	t.Helper()
	event := &corev1.Event{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Event"}, Reason: reason, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "n1"}}
	body, err := runtime.Encode(requestCodecs.LegacyCodec(corev1.SchemeGroupVersion), event)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestDryRunWrite checks that the requests of the DryRun
// ClusterAutoscaler's engine are told apart by their user agent, and that
// any write of it but a Would* event is flagged, accepted or not.
func TestDryRunWrite(t *testing.T) {
	trial := types.NamespacedName{Namespace: "soak-x", Name: "soak-x-trial"}
	trialAgent := "capi-autoscaler (ClusterAutoscaler soak-x/soak-x-trial)"
	activeAgent := "capi-autoscaler (ClusterAutoscaler soak-x/soak-x)"
	for _, tt := range []struct {
		name string
		r    faultproxy.Request
		want string
	}{
		{name: "the Active one's eviction", r: faultproxy.Request{UserAgent: activeAgent, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "soak-x", Name: "p", Status: 201}},
		{name: "a read", r: faultproxy.Request{UserAgent: trialAgent, Verb: "list", Resource: "pods", Status: 200}},
		{name: "a Would event", r: faultproxy.Request{UserAgent: trialAgent, Verb: "create", Resource: "events", Status: 201, Body: eventBody(t, "WouldScaleDown")}},
		{name: "an event's count", r: faultproxy.Request{UserAgent: trialAgent, Verb: "patch", Resource: "events", Status: 200}},
		{
			name: "an eviction", r: faultproxy.Request{UserAgent: trialAgent, Verb: "create", Resource: "pods", Subresource: "eviction", Namespace: "soak-x", Name: "p", Status: 201},
			want: "the engine of the DryRun ClusterAutoscaler soak-x/soak-x-trial tried to create pods/eviction soak-x/p (status 201)",
		},
		{
			name: "a taint refused by a fault", r: faultproxy.Request{UserAgent: trialAgent, Verb: "update", Resource: "nodes", Name: "n1", Status: 500},
			want: "tried to update nodes n1 (status 500)",
		},
		{
			name: "an event of an action", r: faultproxy.Request{UserAgent: trialAgent, Verb: "create", Resource: "events", Status: 201, Body: eventBody(t, scaledown.EventReasonScaleDown)},
			want: "recorded a ScaleDown event on Node n1",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := dryRunWrite(tt.r, trial)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDryRunStamps checks that marks, taints and cordons stamped with a
// DryRun ClusterAutoscaler's UID, and its events of an action, are
// flagged, and those of the Active one not.
func TestDryRunStamps(t *testing.T) {
	const active, trial types.UID = "active-uid", "trial-uid"
	machine := func(name string, placer types.UID) clusterv1.Machine {
		m := clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: "soak-x", Name: name, Annotations: map[string]string{
			clusterv1.DeleteMachineAnnotation: "", scalable.MarkedAnnotation: ownership.Stamp(placer, "2026-12-07T04:00:00Z"),
		}}}
		return m
	}
	node := func(name, annotation string, placer types.UID) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotation: ownership.Stamp(placer, "1767268800")}}}
	}
	event := func(uid types.UID, reason string) corev1.Event {
		return corev1.Event{Reason: reason, InvolvedObject: corev1.ObjectReference{Kind: "ClusterAutoscaler", Namespace: "soak-x", Name: "ca", UID: uid}}
	}
	clean := dryRunStamps([]types.UID{trial},
		[]clusterv1.Machine{machine("m1", active)},
		[]corev1.Node{node("n1", scaledown.TaintedAnnotation, active), node("n2", scaledown.CordonedAnnotation, active)},
		[]corev1.Event{event(trial, "WouldScaleDown"), event(active, autoscaler.EventScaledUpGroup)})
	if len(clean) > 0 {
		t.Fatalf("the Active one's stamps and the DryRun one's Would* events flagged: %v", clean)
	}
	flagged := dryRunStamps([]types.UID{"earlier-trial-uid", trial},
		[]clusterv1.Machine{machine("m1", trial)},
		[]corev1.Node{node("n1", scaledown.TaintedAnnotation, trial), node("n2", scaledown.CordonedAnnotation, trial)},
		[]corev1.Event{event(trial, scaledown.EventReasonScaleDown)})
	if len(flagged) != 4 {
		t.Fatalf("want the mark, the taint, the cordon and the event flagged: %v", flagged)
	}
}
