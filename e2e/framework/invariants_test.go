package framework

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
)

// TestUnevictedPods checks, on pods fabricated as a node's at its
// removal, that only those neither evicted nor terminating by then are
// flagged.
func TestUnevictedPods(t *testing.T) {
	removed := time.Date(2026, 12, 7, 4, 0, 10, 0, time.UTC)
	pod := func(name string, mutate func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "soak-x", Name: name}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if mutate != nil {
			mutate(&p)
		}
		return p
	}
	terminatingSince := func(start time.Time) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.DeletionGracePeriodSeconds = ptr.To[int64](30)
			p.DeletionTimestamp = ptr.To(metav1.NewTime(start.Add(30 * time.Second)))
		}
	}
	pods := []corev1.Pod{
		pod("running", nil),
		pod("evicted", terminatingSince(removed.Add(-2*time.Second))),
		pod("evicted-after", terminatingSince(removed.Add(2*time.Second))),
		pod("daemon", func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "ds"}}, appsv1.SchemeGroupVersion.WithKind("DaemonSet"))}
		}),
		pod("mirror", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }),
		pod("done", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
	}
	want := []string{"soak-x/running", "soak-x/evicted-after"}
	if got := UnevictedPods(pods, removed); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestRemediatedByItsOwner checks that only a Machine its MachineSet says
// it deletes for remediation counts as remediated, not one whose health
// check merely failed.
func TestRemediatedByItsOwner(t *testing.T) {
	machine := func(conditions ...metav1.Condition) *clusterv1.Machine {
		return &clusterv1.Machine{Status: clusterv1.MachineStatus{Conditions: conditions}}
	}
	unhealthy := metav1.Condition{Type: clusterv1.MachineHealthCheckSucceededCondition, Status: metav1.ConditionFalse, Reason: clusterv1.MachineHealthCheckUnhealthyNodeReason}
	waiting := metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.MachineOwnerRemediatedWaitingForRemediationReason}
	deleting := metav1.Condition{Type: clusterv1.MachineOwnerRemediatedCondition, Status: metav1.ConditionFalse, Reason: clusterv1.MachineSetMachineRemediationMachineDeletingReason}
	for name, tc := range map[string]struct {
		machine *clusterv1.Machine
		want    bool
	}{
		"health check failed, no remediation asked (its MachineHealthCheck deleted)": {machine(unhealthy), false},
		"remediation asked, not started":                                             {machine(unhealthy, waiting), false},
		"deleted by its MachineSet to remediate it":                                  {machine(unhealthy, deleting), true},
		"healthy": {machine(), false},
	} {
		if got := RemediatedByItsOwner(tc.machine); got != tc.want {
			t.Errorf("%s: RemediatedByItsOwner = %v, want %v", name, got, tc.want)
		}
	}
}

// TestReplicasUnderScheduledMinimums checks the bounds the watch holds a
// MachineDeployment to: its annotations without scheduled minimums; with
// them, a group may sleep below its min-size annotation, or wait below a
// raised minimum, but is never lowered below the minimum in effect.
func TestReplicasUnderScheduledMinimums(t *testing.T) {
	opened := time.Now().UTC().Add(-time.Minute)
	window := func(name string, minSize int32) autoscalingv1alpha1.ScheduledMinimum {
		return autoscalingv1alpha1.ScheduledMinimum{
			Name: name, NodeGroups: autoscalingv1alpha1.ScheduledNodeGroups{Names: []string{name}},
			Schedule: fmt.Sprintf("%d %d * * *", opened.Minute(), opened.Hour()),
			Duration: metav1.Duration{Duration: time.Hour}, MinSize: minSize,
		}
	}
	inv := &Invariants{minimums: minimums.New(engineconfig.ScheduledMinimums([]autoscalingv1alpha1.ScheduledMinimum{
		window("asleep", 0), window("warm", 4),
	}))}
	md := func(name string, replicas int32) *clusterv1.MachineDeployment {
		return &clusterv1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Annotations: map[string]string{
				clusterv1.AutoscalerMinSizeAnnotation: "2", clusterv1.AutoscalerMaxSizeAnnotation: "5",
			}},
			Spec: clusterv1.MachineDeploymentSpec{Replicas: ptr.To(replicas)},
		}
	}
	for _, tc := range []struct {
		name               string
		group              string
		previous, replicas int32
		violation          bool
	}{
		{name: "a group no window selects, below its annotated minimum", group: "plain", previous: 2, replicas: 1, violation: true},
		{name: "a group no window selects, above its maximum", group: "plain", previous: 5, replicas: 6, violation: true},
		{name: "a sleeping group lowered to 0", group: "asleep", previous: 1, replicas: 0},
		{name: "a sleeping group above its maximum", group: "asleep", previous: 5, replicas: 6, violation: true},
		{name: "a warmed-up group raised towards its minimum", group: "warm", previous: 0, replicas: 2},
		{name: "a warmed-up group lowered below its minimum", group: "warm", previous: 4, replicas: 3, violation: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv.violations = nil
			previous := tc.previous
			inv.checkReplicas(md(tc.group, tc.replicas), &previous)
			if got := len(inv.violations) > 0; got != tc.violation {
				t.Fatalf("violation: got %v (%v), want %v", got, inv.violations, tc.violation)
			}
		})
	}
}
