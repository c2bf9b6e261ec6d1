package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/view"
)

// state is what the demo shows of the clusters at one moment.
type state struct {
	// view is the ClusterAutoscaler as `kubectl capi-autoscaler top` shows it.
	view                                      *view.StatusView
	groups                                    []groupRow
	nodes, readyNodes                         int
	runningPods, pendingPods, terminatingPods int
	autoscalerReady                           bool
	autoscaledGroups                          int
	// firstDecision is when the autoscaler first scaled up or down in the
	// phase, zero until it did.
	firstDecision time.Time
}

// groupRow is one node group: its MachineDeployment and template.
type groupRow struct {
	name string
	min  int32
	// nodeCapacity is published in the SimMachineTemplate's status, for
	// scaling from zero; empty until then.
	nodeCapacity string
	// replicas is the desired size, machines the Machines that exist and
	// ready those whose Node is Ready.
	replicas, machines, ready int32
}

// watch shows the state of the clusters every second until done, and
// returns the last state. It fails after the demo's phase timeout.
func (d *demo) watch(ctx context.Context, title string, started time.Time, done func(*state) bool) (*state, error) {
	defer d.progress.endFrame()
	deadline := time.Now().Add(d.timeout)
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var firstDecision time.Time
	for {
		// Errors are retried until the deadline, and reported if the last
		// attempt failed.
		s, err := d.observe(ctx)
		if err == nil {
			// Status times have a resolution of one second.
			if decision := s.lastDecision(); firstDecision.IsZero() && !decision.Before(started.Truncate(time.Second)) {
				firstDecision = decision
			}
			s.firstDecision = firstDecision
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

// observe reads the state of both clusters.
func (d *demo) observe(ctx context.Context) (*state, error) {
	view, err := view.Observe(ctx, d.mgmt, cli.Scope{Namespace: namespace, Cluster: clusterName})
	if err != nil {
		return nil, err
	}
	s := &state{view: view}
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
	return s, nil
}

// observeGroups reads the node groups, and from the view whether the
// autoscaler runs and manages them.
func (d *demo) observeGroups(ctx context.Context, s *state) error {
	for _, cluster := range s.view.Clusters {
		for _, condition := range cluster.Conditions {
			if condition.Type == autoscalingv1alpha1.ReadyCondition {
				s.autoscalerReady = condition.Status == metav1.ConditionTrue
			}
		}
		for _, group := range cluster.NodeGroups {
			if group.MaxSize != nil {
				s.autoscaledGroups++
			}
		}
	}

	for _, group := range nodeGroups {
		row := groupRow{name: group.name, min: group.min}
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
		s.groups = append(s.groups, row)
	}
	return nil
}

// result measures a phase that started at started and ends in s.
func (s *state) result(started time.Time) phaseResult {
	r := phaseResult{duration: since(started), pods: s.totalPods(), nodes: s.nodes}
	if !s.firstDecision.IsZero() {
		r.firstDecision = max(0, s.firstDecision.Sub(started.Truncate(time.Second)))
	}
	return r
}

func (s *state) totalPods() int {
	return s.runningPods + s.pendingPods + s.terminatingPods
}

// lastDecision is when the autoscaler last scaled up or down.
func (s *state) lastDecision() time.Time {
	var last time.Time
	for _, cluster := range s.view.Clusters {
		for _, t := range []*metav1.Time{cluster.LastScaleUpTime, cluster.LastScaleDownTime} {
			if t != nil && t.After(last) {
				last = t.Time
			}
		}
	}
	return last
}
