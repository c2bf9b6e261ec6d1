package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// deployment is a Deployment of the demo's workload.
type deployment struct {
	name     string
	replicas int32
	cpu      string
	memory   string
}

// workload needs more than md-general's one node. Least-waste prefers five
// md-general nodes for web (a quarter of their cpu and memory idle) to two
// md-large nodes for everything; batch fits only on md-large, which starts
// at zero.
var workload = []deployment{
	{name: "web", replicas: 6, cpu: "1500m", memory: "3Gi"},
	{name: "batch", replicas: 1, cpu: "6", memory: "24Gi"},
}

// phaseResult is what a scale-up or scale-down took.
type phaseResult struct {
	// duration is from applying or removing the workload until the phase
	// is done.
	duration time.Duration
	// firstDecision is from the start of the phase until the autoscaler's
	// first decision.
	firstDecision time.Duration
	// pods and nodes are counted at the end of the phase.
	pods, nodes int
}

// scaleUp applies the workload and waits until all its pods run.
func (d *demo) scaleUp(ctx context.Context) (phaseResult, error) {
	var wanted int
	for _, w := range workload {
		d.progress.step("Applying Deployment %s/%s: %d × (%s cpu, %s)", namespace, w.name, w.replicas, w.cpu, w.memory)
		wanted += int(w.replicas)
	}
	started := time.Now()
	for _, w := range workload {
		if err := d.workload.Create(ctx, w.object()); err != nil {
			return phaseResult{}, fmt.Errorf("creating Deployment %s: %w", w.name, err)
		}
	}
	s, err := d.watch(ctx, "Scale-up", started, func(s *state) bool { return s.runningPods == wanted && s.pendingPods == 0 })
	if err != nil {
		return phaseResult{}, fmt.Errorf("the %d pods of the workload did not all run: %w", wanted, err)
	}
	result := s.result(started)
	d.progress.done("All %s run, on %s (%s)", plural(result.pods, "pod"), plural(result.nodes, "node"), result.duration)
	return result, nil
}

// scaleDown removes the workload and waits until the node groups are back
// at their min size.
func (d *demo) scaleDown(ctx context.Context) (phaseResult, error) {
	d.progress.step("Removing the workload; nodes unneeded for %s are removed", unneededTime)
	started := time.Now()
	for _, w := range workload {
		if err := d.workload.Delete(ctx, w.object(), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
			return phaseResult{}, fmt.Errorf("deleting Deployment %s: %w", w.name, err)
		}
	}
	var minNodes int
	for _, g := range nodeGroups {
		minNodes += int(g.min)
	}
	s, err := d.watch(ctx, "Scale-down", started, func(s *state) bool {
		for _, row := range s.groups {
			if row.replicas != row.min || row.machines != row.min || row.ready != row.min {
				return false
			}
		}
		return s.totalPods() == 0 && s.nodes == minNodes
	})
	if err != nil {
		return phaseResult{}, fmt.Errorf("the node groups did not return to their min size: %w", err)
	}
	result := s.result(started)
	d.progress.done("Node groups back at their min size, %s left (%s)", plural(result.nodes, "node"), result.duration)
	return result, nil
}

func (w deployment) object() *appsv1.Deployment {
	labels := map[string]string{"app": w.name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: w.name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:  "app",
						Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU:    resource.MustParse(w.cpu),
							corev1.ResourceMemory: resource.MustParse(w.memory),
						}},
					}},
				},
			},
		},
	}
}
