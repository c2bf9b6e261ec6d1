package framework

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Second)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Second, 99: 99 * time.Second, 100: 100 * time.Second, 1: time.Second} {
		if got := Percentile(sorted, p); got != want {
			t.Errorf("p%v = %s, want %s", p, got, want)
		}
	}
	if got := Percentile(sorted[:3], 50); got != 2*time.Second {
		t.Errorf("p50 of 1s, 2s, 3s = %s, want 2s", got)
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %s, want 0", got)
	}
}

// TestReadyToRunningSteps feeds the watches' handlers a node and a pod
// through their steps on a fake clock, and checks what the report makes
// of them: a node there before the burst and its pod are left out.
func TestReadyToRunningSteps(t *testing.T) {
	start := time.Date(2026, 12, 7, 14, 0, 0, 0, time.UTC)
	now := start
	r := newReadyToRunning(func() time.Time { return now })
	at := func(d time.Duration) { now = start.Add(d) }

	old := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "old"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	r.seeNode(old)
	early := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "early", UID: "early"}, Spec: corev1.PodSpec{NodeName: "old"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	r.seePod(early)

	burst := start.Add(time.Second)
	at(time.Second)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "web"}}
	r.seePod(pod)
	unschedulable := func(message string) {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message}}
	}
	at(1100 * time.Millisecond)
	unschedulable("0/1 nodes")
	r.seePod(pod)
	r.seeMachine(machineNamed("n1"))
	at(1500 * time.Millisecond)
	pod.Status.NominatedNodeName = "n1"
	r.seePod(pod)
	r.seePod(pod) // the same again: no new report, no new nomination

	at(46 * time.Second)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}}}
	r.seeNode(node)
	at(46100 * time.Millisecond)
	unschedulable("0/2 nodes")
	pod.Status.NominatedNodeName = ""
	r.seePod(pod)
	at(46200 * time.Millisecond)
	pod.Status.NominatedNodeName = "n1"
	r.seePod(pod)
	at(46300 * time.Millisecond)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	r.seeNode(node)
	at(46400 * time.Millisecond)
	node.Spec.Taints = nil
	r.seeNode(node)
	at(49300 * time.Millisecond)
	pod.Spec.NodeName, pod.Status.NominatedNodeName = "n1", "" // binding clears the nomination
	r.seePod(pod)
	at(49500 * time.Millisecond)
	pod.Status.Phase = corev1.PodRunning
	r.seePod(pod)

	nodes, pods := r.Steps()
	report := NewReadyToRunningReport(nodes, pods, burst)
	if report.Pods != 1 || report.Nodes != 1 {
		t.Fatalf("%d pods on %d nodes, want the burst's 1 on 1:\n%s", report.Pods, report.Nodes, report)
	}
	if report.NominatedToNode != 1 || report.BoundAsLastNominated != 1 || report.BoundWithoutNomination != 0 || report.Nominations != 2 || report.Clearings != 1 {
		t.Errorf("nominations: %d to the node when Ready, %d bound as last nominated, %d without nomination, %d nominations, %d clearings; want 1, 1, 0, 2, 1",
			report.NominatedToNode, report.BoundAsLastNominated, report.BoundWithoutNomination, report.Nominations, report.Clearings)
	}
	want := map[string]time.Duration{
		"node: Machine created → Node created (boot)":                       44900 * time.Millisecond,
		"node: Node created → Ready (kwok)":                                 300 * time.Millisecond,
		"node: Ready → not-ready taint removed (node lifecycle controller)": 100 * time.Millisecond,
		"pod: its node Ready → last Unschedulable report (kube-scheduler)":  -200 * time.Millisecond,
		"pod: its node Ready → bound (kube-scheduler)":                      3 * time.Second,
		"pod: its node's not-ready taint removed → bound (kube-scheduler)":  2900 * time.Millisecond,
		"pod: bound → Running (kwok)":                                       200 * time.Millisecond,
		"pod: its node Ready → Running":                                     3200 * time.Millisecond,
	}
	for _, row := range report.Rows {
		if d, ok := want[row.Step]; ok {
			delete(want, row.Step)
			if row.N != 1 || row.Max != d {
				t.Errorf("%s: %d values, max %s; want 1, %s", row.Step, row.N, row.Max, d)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("steps missing from the report: %v", want)
	}
	if report.LastReadyToAllRunning != 3200*time.Millisecond {
		t.Errorf("every pod Running %s after the last node Ready, want 3.2s", report.LastReadyToAllRunning)
	}
	if len(report.Slowest) != 1 || !strings.Contains(report.Slowest[0], "node untainted 100ms, bound 3s") {
		t.Errorf("timelines %q, want the pod's, its node untainted 100ms after Ready", report.Slowest)
	}
}

func machineNamed(name string) *clusterv1.Machine {
	return &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
