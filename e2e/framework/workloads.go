package framework

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WorkloadInput describes a Deployment of pause pods.
type WorkloadInput struct {
	// Client talks to the workload cluster.
	Client    client.Client
	Namespace string
	Name      string
	Replicas  int32
	// Requests of the pod's only container.
	Requests corev1.ResourceList
	// NodeSelector of the pods; include ClusterLabel to keep them on the
	// spec's Cluster.
	NodeSelector map[string]string
	// PriorityClassName of the pods, when not empty.
	PriorityClassName string
	// Mutate, when set, changes the pod template before the Deployment is
	// created (finalizers, affinity, a grace period...), so that no pod ever
	// runs without the change.
	Mutate func(*corev1.PodTemplateSpec)
}

// CreateWorkload creates a Deployment of pause pods.
func CreateWorkload(ctx context.Context, input WorkloadInput) *appsv1.Deployment {
	deployment := WorkloadDeployment(input)
	Expect(input.Client.Create(ctx, deployment)).To(Succeed())
	return deployment
}

// WorkloadDeployment is the Deployment of pause pods CreateWorkload
// creates; input.Client is not used.
func WorkloadDeployment(input WorkloadInput) *appsv1.Deployment {
	labels := map[string]string{"app": input.Name}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(input.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: input.NodeSelector,
					// kwok deletes evicted pods at once; a grace period
					// would only slow the drains down.
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name:      "app",
						Image:     "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: input.Requests},
					}},
				},
			},
		},
	}
	deployment.Spec.Template.Spec.PriorityClassName = input.PriorityClassName
	if input.Mutate != nil {
		input.Mutate(&deployment.Spec.Template)
	}
	return deployment
}

// SpreadOverZones is a WorkloadInput.Mutate that spreads the pods over the
// zones with maxSkew 1, as a hard constraint.
func SpreadOverZones(template *corev1.PodTemplateSpec) {
	template.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
		LabelSelector: &metav1.LabelSelector{MatchLabels: template.Labels},
	}}
}

// PodsOf lists the pods of a Deployment created by CreateWorkload.
func PodsOf(ctx context.Context, g Gomega, c client.Client, deployment *appsv1.Deployment) []corev1.Pod {
	return PodsSelected(ctx, g, c, deployment.Namespace, deployment.Spec.Selector)
}

// WaitForPodsRunning waits until every pod of deployment runs and returns
// the pods.
func WaitForPodsRunning(ctx context.Context, c client.Client, deployment *appsv1.Deployment, timeout time.Duration) []corev1.Pod {
	return waitForPodsRunning(ctx, c, "Deployment "+deployment.Name, deployment.Namespace, deployment.Spec.Selector,
		int(ptr.Deref(deployment.Spec.Replicas, 1)), timeout)
}

// PodsSelected lists the pods of a workload by its selector's labels.
func PodsSelected(ctx context.Context, g Gomega, c client.Client, namespace string, selector *metav1.LabelSelector) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(c.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels(selector.MatchLabels))).To(Succeed())
	return pods.Items
}

// waitForPodsRunning waits until the workload has its replicas, all
// Running, and returns them.
func waitForPodsRunning(ctx context.Context, c client.Client, workload, namespace string, selector *metav1.LabelSelector, replicas int, timeout time.Duration) []corev1.Pod {
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		pods = PodsSelected(ctx, g, c, namespace, selector)
		g.Expect(pods).To(HaveLen(replicas))
		for _, pod := range pods {
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s on %q", pod.Name, pod.Spec.NodeName)
		}
	}, timeout, AutoscalerPoll).WithContext(ctx).Should(Succeed(), "pods of %s are not all Running", workload)
	return pods
}

// PodsPerNode is how many pods requesting requests fit on a node of
// capacity, by every resource the pods request and the node's pod count.
func PodsPerNode(capacity, requests corev1.ResourceList) int {
	fit := int(capacity.Pods().Value())
	for name, request := range requests {
		available := capacity[name]
		fit = min(fit, int(available.MilliValue()/request.MilliValue()))
	}
	return fit
}

// DeleteWorkload deletes a Deployment and waits until its pods are gone.
func DeleteWorkload(ctx context.Context, c client.Client, deployment *appsv1.Deployment) {
	Expect(c.Delete(ctx, deployment, client.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(PodsOf(ctx, g, c, deployment)).To(BeEmpty())
		err := c.Get(ctx, client.ObjectKeyFromObject(deployment), &appsv1.Deployment{})
		g.Expect(err).To(Satisfy(apierrors.IsNotFound))
	}, DeletionTimeout, AutoscalerPoll).Should(Succeed(), "Deployment %s is not gone", deployment.Name)
}

// PodEvents lists the events with reason on pods of namespace, by pod name.
func PodEvents(ctx context.Context, g Gomega, c client.Client, namespace, reason string) map[string][]corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
	byPod := map[string][]corev1.Event{}
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == "Pod" && event.Reason == reason {
			byPod[event.InvolvedObject.Name] = append(byPod[event.InvolvedObject.Name], event)
		}
	}
	return byPod
}

// CPURequest is a request of cpu cores.
func CPURequest(cpu string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
}

// PendingPods counts the pods of namespace the scheduler could not place.
func PendingPods(ctx context.Context, g Gomega, workload client.Client, namespace string) int {
	pods := &corev1.PodList{}
	g.Expect(workload.List(ctx, pods, client.InNamespace(namespace))).To(Succeed())
	pending := 0
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
			pending++
		}
	}
	return pending
}

// PatchPod changes a pod; a pod that is gone is left alone.
func PatchPod(ctx context.Context, workload client.Client, pod *corev1.Pod, mutate func(*corev1.Pod)) {
	GinkgoHelper()
	PatchObject(ctx, workload, pod.DeepCopy(), true, mutate)
}

// CeilDiv is n/d rounded up.
func CeilDiv(n, d int) int {
	return (n + d - 1) / d
}

// spreadOverNodes prefers to put each pod of a Deployment on a node of its
// own, while letting them share one when there is no other.
func spreadOverNodes(template *corev1.PodTemplateSpec) {
	template.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				TopologyKey:   corev1.LabelHostname,
				LabelSelector: &metav1.LabelSelector{MatchLabels: template.Labels},
			},
		}},
	}}
}
