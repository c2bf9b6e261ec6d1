package soak

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/secret"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
)

// DryRunName is the DryRun ClusterAutoscaler ToggleDryRun creates beside
// the Active one.
func (env *Env) DryRunName() string { return env.Cluster.Name + "-trial" }

// toggleDryRun creates a DryRun ClusterAutoscaler trialling a shorter
// unneededTime beside the Active one, or deletes it. It names the same
// Secret: the Active one owns the Cluster's connection.
func toggleDryRun(ctx context.Context, env *Env, _ Operation) (Result, error) {
	mgmt := env.Stack.Management.Client
	spec := framework.FastClusterAutoscalerSpec(env.Cluster.Name)
	spec.Mode = autoscalingv1alpha1.DryRunMode
	spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: 5 * time.Second}
	trial := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: env.DryRunName()}, Spec: spec}
	target := "ClusterAutoscaler " + klog.KObj(trial).String()
	err := mgmt.Create(ctx, trial)
	if apierrors.IsAlreadyExists(err) {
		return Result{Target: target + " (deleted)"}, ignoreGone(mgmt.Delete(ctx, trial))
	}
	if err == nil {
		env.dryRuns = append(env.dryRuns, trial.UID)
	}
	return Result{Target: target + " (created)"}, err
}

func configure(ctx context.Context, env *Env, op Operation) (Result, error) {
	ca := env.ClusterAutoscaler.DeepCopy()
	return Result{Target: "ClusterAutoscaler " + klog.KObj(ca).String()},
		update(ctx, env.Stack.Management.Client, ca, func(ca *autoscalingv1alpha1.ClusterAutoscaler) error {
			ca.Spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: op.UnneededTime}
			return nil
		})
}

// rotateKubeconfig writes a new token of the workload ServiceAccount into
// the Secret the Active ClusterAutoscaler names, as a token refresher does.
func rotateKubeconfig(ctx context.Context, env *Env, _ Operation) (Result, error) {
	sa := framework.WorkloadServiceAccount
	kubeconfig, err := env.Stack.WorkloadServiceAccountKubeconfig(ctx, sa.Namespace, sa.Name)
	if err != nil {
		return Result{}, err
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: env.ClusterAutoscaler.Spec.WorkloadKubeconfigSecretRef.Name}}
	return Result{Target: "Secret " + klog.KObj(s).String()}, update(ctx, env.Stack.Management.Client, s, func(s *corev1.Secret) error {
		s.Data[secret.KubeconfigDataName] = kubeconfig
		return nil
	})
}

// setBuffer creates, resizes or, at 0 replicas, deletes the CapacityBuffer
// of BufferCPUMilli pods.
func setBuffer(ctx context.Context, env *Env, op Operation) (Result, error) {
	workload := env.Stack.Workload.Client
	buffer := &capacitybufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: "soak"}}
	result := Result{Target: "CapacityBuffer " + klog.KObj(buffer).String()}
	if op.Replicas == 0 {
		return result, ignoreGone(workload.Delete(ctx, buffer))
	}
	buffer.Spec = capacitybufferv1beta1.CapacityBufferSpec{
		PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: env.BufferTemplate},
		Replicas:       ptr.To(int32(op.Replicas)),
	}
	err := workload.Create(ctx, buffer)
	if apierrors.IsAlreadyExists(err) {
		err = update(ctx, workload, buffer, func(b *capacitybufferv1beta1.CapacityBuffer) error {
			b.Spec.Replicas = ptr.To(int32(op.Replicas))
			return nil
		})
	}
	return result, err
}

// BufferPodTemplate is the PodTemplate of the soak's CapacityBuffer: pods
// of BufferCPUMilli on the soak's Cluster.
func BufferPodTemplate(namespace, cluster string) *corev1.PodTemplate {
	return &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "soak-buffer"},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{framework.ClusterLabel: cluster},
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: framework.CPURequest("1")},
			}},
		}},
	}
}

// provision creates a PodTemplate of pods of op.CPUMilli on the soak's
// Cluster and a ProvisioningRequest of op.Class for op.Replicas of them,
// both named op.Request.
func provision(ctx context.Context, env *Env, op Operation) (Result, error) {
	workload := env.Stack.Workload.Client
	template := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: op.Request},
		Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{framework.ClusterLabel: env.Cluster.Name},
			Containers: []corev1.Container{{
				Name: "worker", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: *resource.NewMilliQuantity(op.CPUMilli, resource.DecimalSI),
				}},
			}},
		}},
	}
	request := &provisioningv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: op.Request},
		Spec: provisioningv1.ProvisioningRequestSpec{
			ProvisioningClassName: op.Class,
			PodSets:               []provisioningv1.PodSet{{PodTemplateRef: provisioningv1.Reference{Name: template.Name}, Count: int32(op.Replicas)}},
		},
	}
	result := Result{Target: "ProvisioningRequest " + klog.KObj(request).String()}
	if err := workload.Create(ctx, template); err != nil {
		return result, err
	}
	return result, workload.Create(ctx, request)
}

// endProvision deletes the ProvisioningRequest op.Request and its
// PodTemplate.
func endProvision(ctx context.Context, env *Env, op Operation) (Result, error) {
	workload := env.Stack.Workload.Client
	request := &provisioningv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: op.Request}}
	template := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: op.Request}}
	return Result{Target: "ProvisioningRequest " + klog.KObj(request).String()},
		errors.Join(ignoreGone(workload.Delete(ctx, request)), ignoreGone(workload.Delete(ctx, template)))
}
