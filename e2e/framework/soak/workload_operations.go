package soak

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
)

// FitsLabel on a soak's pod says whether it fits some node group's
// template ("true") or none ("false"): once the soak is quiet, every pod
// that fits must run.
const FitsLabel = "soak.e2e.capi-autoscaler.io/fits"

// unfitCPU is more than any group's machines have.
const unfitCPU = "16"

// steadyName is the name of a steady Deployment.
func steadyName(i int) string { return fmt.Sprintf("steady-%d", i) }

// deployment is a Deployment of pause pods on the soak's Cluster.
func (env *Env) deployment(name string, replicas int, cpu string, fits bool, mutate func(*corev1.PodTemplateSpec)) *appsv1.Deployment {
	return framework.WorkloadDeployment(framework.WorkloadInput{
		Namespace: env.Namespace, Name: name, Replicas: int32(replicas),
		Requests:     framework.CPURequest(cpu),
		NodeSelector: map[string]string{framework.ClusterLabel: env.Cluster.Name},
		Mutate: func(template *corev1.PodTemplateSpec) {
			template.Labels[FitsLabel] = fmt.Sprint(fits)
			if mutate != nil {
				mutate(template)
			}
		},
	})
}

// scaleDeployment creates the Deployment, or sets its replicas when it
// exists.
func (env *Env) scaleDeployment(ctx context.Context, deployment *appsv1.Deployment) (Result, error) {
	c := env.Stack.Workload.Client
	result := Result{Target: "Deployment " + klog.KObj(deployment).String()}
	err := c.Create(ctx, deployment)
	if apierrors.IsAlreadyExists(err) {
		replicas := deployment.Spec.Replicas
		err = update(ctx, c, deployment, func(d *appsv1.Deployment) error {
			d.Spec.Replicas = replicas
			return nil
		})
	}
	return result, err
}

func scaleWorkload(ctx context.Context, env *Env, op Operation) (Result, error) {
	cpu := resource.NewMilliQuantity(SteadyCPUMilli[op.Workload], resource.DecimalSI).String()
	return env.scaleDeployment(ctx, env.deployment(steadyName(op.Workload), op.Replicas, cpu, true, spreadPreferred))
}

func createBurst(ctx context.Context, env *Env, op Operation) (Result, error) {
	cpu := resource.NewMilliQuantity(op.CPUMilli, resource.DecimalSI).String()
	deployment := env.deployment(op.Burst, op.Replicas, cpu, true, func(template *corev1.PodTemplateSpec) {
		switch op.Placement {
		case AntiAffine:
			template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey:   corev1.LabelHostname,
					LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": op.Burst}},
				}},
			}}
		case Spread:
			template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": op.Burst}},
			}}
		}
	})
	return Result{Target: "Deployment " + klog.KObj(deployment).String()}, env.Stack.Workload.Client.Create(ctx, deployment)
}

func endBurst(ctx context.Context, env *Env, op Operation) (Result, error) {
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: op.Burst}}
	err := env.Stack.Workload.Client.Delete(ctx, deployment, client.PropagationPolicy(metav1.DeletePropagationBackground))
	return Result{Target: "Deployment " + klog.KObj(deployment).String()}, err
}

func createUnfitPods(ctx context.Context, env *Env, op Operation) (Result, error) {
	return env.scaleDeployment(ctx, env.deployment("unfit", op.Replicas, unfitCPU, false, nil))
}

func deletePod(ctx context.Context, env *Env, op Operation) (Result, error) {
	c := env.Stack.Workload.Client
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(env.Namespace)); err != nil {
		return Result{}, err
	}
	var names []string
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			names = append(names, pod.Name)
		}
	}
	name, ok := pick(names, op.Pick)
	if !ok {
		return Result{Skipped: "no pod"}, nil
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
	return Result{Target: "Pod " + klog.KObj(pod).String()}, ignoreGone(c.Delete(ctx, pod))
}

func togglePDB(ctx context.Context, env *Env, op Operation) (Result, error) {
	c := env.Stack.Workload.Client
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: steadyName(op.Workload)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(1)),
			Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": steadyName(op.Workload)}},
		},
	}
	target := "PodDisruptionBudget " + klog.KObj(pdb).String()
	err := c.Create(ctx, pdb)
	if apierrors.IsAlreadyExists(err) {
		return Result{Target: target + " (deleted)"}, ignoreGone(c.Delete(ctx, pdb))
	}
	return Result{Target: target + " (created)"}, err
}

// spreadPreferred prefers a node of its own for each pod of a Deployment,
// as replicated services do.
func spreadPreferred(template *corev1.PodTemplateSpec) {
	template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey:   corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": template.Labels["app"]}},
			},
		}},
	}}
}
