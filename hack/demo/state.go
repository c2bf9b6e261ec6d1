package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/test/framework/infrastructure/api/v1alpha1"
)

// decisionReasons are the reasons of the autoscaler's events worth showing.
var decisionReasons = sets.New(
	"TriggeredScaleUp", "NotTriggerScaleUp", "ScaledUpGroup", "FailedToScaleUpGroup", "ScaleUpTimedOut",
	"DeleteUnregistered", "ScaleDown", "ScaleDownFailed",
)

// state is what the demo shows of the clusters at one moment.
type state struct {
	groups                                    []groupRow
	nodes, readyNodes                         int
	runningPods, pendingPods, terminatingPods int
	autoscalerCreated, autoscalerReady        bool
	autoscalerReason                          string
	autoscaledGroups                          int
	unschedulablePods                         int32
	lastScaleUp, lastScaleDown                *metav1.Time
	decisions                                 []decision
}

// groupRow is one node group: the MachineDeployment, its template's
// capacity and the autoscaler's view of it.
type groupRow struct {
	name     string
	min, max int32
	// nodeCapacity is published in the SimMachineTemplate's status, for
	// scaling from zero; empty until then.
	nodeCapacity string
	// replicas is the desired size, machines the Machines that exist and
	// ready those whose Node is Ready.
	replicas, machines, ready int32
	// upcoming are the nodes the autoscaler asked for that have not
	// registered yet.
	upcoming int32
}

// decision is one or more events of the autoscaler with the same reason
// and message, recorded at about the same time on objects of one kind.
type decision struct {
	time    time.Time
	reason  string
	kind    string
	name    string
	others  int
	message string
}

func (d decision) String() string {
	object := d.kind + " " + d.name
	if d.others > 0 {
		object += fmt.Sprintf(" (+%d more)", d.others)
	}
	return fmt.Sprintf("%-17s %s: %s", d.reason, object, d.message)
}

// watch shows the state of the clusters every second until done, and
// returns the last state. It fails after the demo's phase timeout.
func (d *demo) watch(ctx context.Context, title string, started time.Time, done func(*state) bool) (*state, error) {
	defer d.progress.endFrame()
	deadline := time.Now().Add(d.timeout)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		// Errors are retried until the deadline, and reported if the last
		// attempt failed.
		s, err := d.observe(ctx, started)
		if err == nil {
			d.progress.show(title, started, s)
			if done(s) {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("not done within %s; last error: %w", d.timeout, err)
			}
			return nil, fmt.Errorf("not done within %s", d.timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ticker.C:
		}
	}
}

// observe reads the state of both clusters, with the decisions made since
// the start of the phase, oldest first.
func (d *demo) observe(ctx context.Context, phaseStarted time.Time) (*state, error) {
	s := &state{}
	if err := d.observeGroups(ctx, s); err != nil {
		return nil, err
	}

	nodes := &corev1.NodeList{}
	if err := d.workload.List(ctx, nodes); err != nil {
		return nil, err
	}
	for _, node := range nodes.Items {
		if !strings.HasPrefix(node.Spec.ProviderID, infrav1.ProviderIDPrefix+namespace+"/") {
			continue
		}
		s.nodes++
		if nodefacts.KubeletReady(&node) {
			s.readyNodes++
		}
	}

	pods := &corev1.PodList{}
	if err := d.workload.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	for _, pod := range pods.Items {
		switch {
		case pod.DeletionTimestamp != nil:
			s.terminatingPods++
		case pod.Status.Phase == corev1.PodRunning:
			s.runningPods++
		case pod.Status.Phase == corev1.PodPending:
			s.pendingPods++
		}
	}

	clusters := []client.Client{d.mgmt}
	if d.separate {
		clusters = append(clusters, d.workload)
	}
	for _, c := range clusters {
		events := &corev1.EventList{}
		if err := c.List(ctx, events); err != nil {
			return nil, err
		}
		s.decisions = append(s.decisions, decisionsOf(events.Items, phaseStarted)...)
	}
	slices.SortStableFunc(s.decisions, func(a, b decision) int {
		return cmp.Or(a.time.Compare(b.time), strings.Compare(a.reason, b.reason), strings.Compare(a.name, b.name))
	})
	return s, nil
}

// observeGroups reads the node groups and the ClusterAutoscaler.
func (d *demo) observeGroups(ctx context.Context, s *state) error {
	ca := &autoscalingv1alpha1.ClusterAutoscaler{}
	switch err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: clusterName}, ca); {
	case err == nil:
		s.autoscalerCreated = true
	case !apierrors.IsNotFound(err):
		return err
	}
	if ready := meta.FindStatusCondition(ca.Status.Conditions, autoscalingv1alpha1.ReadyCondition); ready != nil {
		s.autoscalerReady = ready.Status == metav1.ConditionTrue
		s.autoscalerReason = ready.Reason
	}
	s.autoscaledGroups = int(ca.Status.NodeGroupCount)
	s.unschedulablePods = ca.Status.UnschedulablePods
	s.lastScaleUp, s.lastScaleDown = ca.Status.LastScaleUpTime, ca.Status.LastScaleDownTime

	for _, group := range nodeGroups {
		row := groupRow{name: group.name, min: group.min, max: group.max}
		md := &clusterv1.MachineDeployment{}
		if err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: group.name}, md); err != nil {
			return err
		}
		row.replicas = ptr.Deref(md.Spec.Replicas, 0)
		row.machines = ptr.Deref(md.Status.Replicas, 0)
		row.ready = ptr.Deref(md.Status.ReadyReplicas, 0)

		template := &infrav1.SimMachineTemplate{}
		if err := d.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: group.name}, template); err != nil {
			return err
		}
		if capacity := template.Status.Capacity; len(capacity) > 0 {
			row.nodeCapacity = fmt.Sprintf("%s cpu, %s", capacity.Cpu(), capacity.Memory())
		}

		id := scalable.ID(scalable.KindMachineDeployment, namespace, group.name)
		for _, status := range ca.Status.NodeGroups {
			if status.ID == id {
				row.upcoming = status.Upcoming
			}
		}
		s.groups = append(s.groups, row)
	}
	return nil
}

// result measures a phase that started at started and ends in s.
func (s *state) result(started time.Time) phaseResult {
	r := phaseResult{duration: since(started), pods: s.totalPods(), nodes: s.nodes}
	if len(s.decisions) > 0 {
		// Event times have a resolution of one second.
		r.firstDecision = max(0, s.decisions[0].time.Sub(started.Truncate(time.Second)))
	}
	return r
}

func (s *state) totalPods() int {
	return s.runningPods + s.pendingPods + s.terminatingPods
}

// decisionsOf returns the autoscaler's events since the start of a phase,
// one decision per event.
func decisionsOf(events []corev1.Event, phaseStarted time.Time) []decision {
	var decisions []decision
	for _, e := range events {
		t := eventTime(&e)
		if !decisionReasons.Has(e.Reason) || t.Before(phaseStarted.Truncate(time.Second)) {
			continue
		}
		decisions = append(decisions, decision{time: t, reason: e.Reason, kind: e.InvolvedObject.Kind, name: e.InvolvedObject.Name, message: e.Message})
	}
	return decisions
}

// mergeDecisions merges decisions, sorted by time, with the same reason,
// kind and message recorded within two seconds, such as the
// TriggeredScaleUp events of all the pods a scale-up helps.
func mergeDecisions(decisions []decision) []decision {
	var merged []decision
	for _, d := range decisions {
		if n := len(merged); n > 0 {
			last := &merged[n-1]
			if last.reason == d.reason && last.kind == d.kind && last.message == d.message && d.time.Sub(last.time) <= 2*time.Second {
				last.others++
				continue
			}
		}
		merged = append(merged, d)
	}
	return merged
}

// eventTime is when an event last happened, whichever API recorded it.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	default:
		return e.CreationTimestamp.Time
	}
}
