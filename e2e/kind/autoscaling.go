//go:build kind

package kind

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

const (
	// pauseImage is preloaded in the node image: the workload's pods run
	// it without a registry.
	pauseImage           = "registry.k8s.io/pause:3.10.2"
	slowToTerminateImage = "registry.k8s.io/kube-proxy:v1.36.3"

	// machineTimeout is how long a CAPD Machine may take from the /scale
	// write to a Ready Node, or to its container gone, on a busy 2-core
	// machine.
	machineTimeout = 5 * time.Minute
	poll           = 2 * time.Second
)

// workloadClient talks to the workload cluster's API server through the
// kubeconfig Cluster API wrote for it. The address is CAPD's load balancer
// on the kind network, which the host reaches as the manager's pod does.
func workloadClient(ctx context.Context, cluster *clusterv1.Cluster) ctrlclient.Client {
	GinkgoHelper()
	kubeconfig := &corev1.Secret{}
	Expect(management.Get(ctx, ctrlclient.ObjectKey{Namespace: cluster.Namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)}, kubeconfig)).To(Succeed())
	restConfig, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig.Data[secret.KubeconfigDataName])
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	c, err := ctrlclient.New(restConfig, ctrlclient.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// fastClusterAutoscaler turns autoscaling on for cluster with loops and
// delays short enough for the suite: nodes go 20 s after they became
// unneeded. It waits until the autoscaler reports Ready.
func fastClusterAutoscaler(ctx context.Context, cluster *clusterv1.Cluster) *autoscalingv1alpha1.ClusterAutoscaler {
	GinkgoHelper()
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: cluster.Namespace,
			Name:      cluster.Name,
			Labels:    map[string]string{clusterv1.WatchLabel: watchFilter},
		},
		Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
			ClusterName:  cluster.Name,
			ScanInterval: &metav1.Duration{Duration: 2 * time.Second},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				DelayAfterAdd:    &metav1.Duration{},
				DelayAfterDelete: &metav1.Duration{},
				UnneededTime:     &metav1.Duration{Duration: 20 * time.Second},
			},
			MaxNodeProvisionTime: &metav1.Duration{Duration: machineTimeout},
			LogVerbosity:         ptr.To[int32](2),
		},
	}
	Expect(management.Create(ctx, ca)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(management.Get(ctx, ctrlclient.ObjectKeyFromObject(ca), ca)).To(Succeed())
		g.Expect(ca.Status.Conditions).To(ContainElement(And(
			HaveField("Type", autoscalingv1alpha1.ReadyCondition), HaveField("Status", metav1.ConditionTrue))))
	}).WithTimeout(2*time.Minute).WithPolling(poll).Should(Succeed(), "ClusterAutoscaler %s is not Ready", ca.Name)
	return ca
}

// machineDeployment returns the workload cluster's MachineDeployment of group.
func machineDeployment(g Gomega, group workerGroup) *clusterv1.MachineDeployment {
	mds := &clusterv1.MachineDeploymentList{}
	g.Expect(management.List(ctx, mds, ctrlclient.InNamespace(workloadClusterNamespace), ctrlclient.MatchingLabels{
		clusterv1.ClusterNameLabel:                          workloadClusterName,
		clusterv1.ClusterTopologyMachineDeploymentNameLabel: group.name,
	})).To(Succeed())
	g.Expect(mds.Items).To(HaveLen(1), "MachineDeployment of topology %s", group.name)
	return &mds.Items[0]
}

// groupMachines lists the Machines of group's MachineDeployment.
func groupMachines(g Gomega, group workerGroup) []clusterv1.Machine {
	machines := &clusterv1.MachineList{}
	g.Expect(management.List(ctx, machines, ctrlclient.InNamespace(workloadClusterNamespace), ctrlclient.MatchingLabels{
		clusterv1.ClusterNameLabel:                          workloadClusterName,
		clusterv1.ClusterTopologyMachineDeploymentNameLabel: group.name,
	})).To(Succeed())
	return machines.Items
}

// expectGroupSize waits until group's MachineDeployment wants size
// replicas and has exactly size Machines, each Running with a Ready Node
// that carries the group's pool label and a CAPD container. It returns the
// Node names by Machine name.
func expectGroupSize(workload ctrlclient.Client, group workerGroup, size int) map[string]string {
	GinkgoHelper()
	nodes := map[string]string{}
	Eventually(func(g Gomega) {
		clear(nodes)
		g.Expect(machineDeployment(g, group).Spec.Replicas).To(HaveValue(BeEquivalentTo(size)), "replicas of %s", group.name)
		machines := groupMachines(g, group)
		g.Expect(machines).To(HaveLen(size), "Machines of %s", group.name)
		containers := capdContainers(g)
		for _, m := range machines {
			g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
			g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no Node", m.Name)
			g.Expect(containers).To(ContainElement(m.Name), "Machine %s has no container", m.Name)
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, ctrlclient.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
			g.Expect(nodefacts.KubeletReady(node)).To(BeTrue(), "Node %s is not Ready", node.Name)
			g.Expect(node.Labels).To(HaveKeyWithValue(poolLabel, group.name), "Node %s", node.Name)
			nodes[m.Name] = node.Name
		}
	}).WithTimeout(machineTimeout).WithPolling(poll).Should(Succeed())
	return nodes
}

// capdContainers lists the names of the workload cluster's running
// containers: one per Machine, and the load balancer.
func capdContainers(g Gomega) []string {
	out, err := exec.Command("docker", "ps", "--filter", "label=io.x-k8s.kind.cluster="+workloadClusterName, "--format", "{{.Names}}").Output()
	g.Expect(err).NotTo(HaveOccurred())
	return strings.Fields(string(out))
}

// pauseWorkload is a Deployment of pause pods of the given cpu request in
// the workload cluster, on the nodes of group.
type pauseWorkload struct {
	name     string
	replicas int32
	cpu      string
	group    workerGroup
	// mutate, when set, changes the pod template before creation.
	mutate func(*corev1.PodTemplateSpec)
}

func (w pauseWorkload) create(ctx context.Context, workload ctrlclient.Client) *appsv1.Deployment {
	GinkgoHelper()
	labels := map[string]string{"app": w.name}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: w.name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{poolLabel: w.group.name},
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name:            "pause",
						Image:           pauseImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse(w.cpu),
						}},
					}},
				},
			},
		},
	}
	if w.mutate != nil {
		w.mutate(&deployment.Spec.Template)
	}
	Expect(workload.Create(ctx, deployment)).To(Succeed())
	return deployment
}

// podsRunning waits until every pod of deployment runs and returns them.
func podsRunning(workload ctrlclient.Client, deployment *appsv1.Deployment) []corev1.Pod {
	GinkgoHelper()
	var pods []corev1.Pod
	Eventually(func(g Gomega) {
		list := &corev1.PodList{}
		g.Expect(workload.List(ctx, list, ctrlclient.InNamespace(deployment.Namespace), ctrlclient.MatchingLabels(deployment.Spec.Selector.MatchLabels))).To(Succeed())
		pods = list.Items
		g.Expect(pods).To(HaveLen(int(*deployment.Spec.Replicas)))
		for _, pod := range pods {
			g.Expect(pod.DeletionTimestamp).To(BeNil(), "pod %s", pod.Name)
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning), "pod %s on %q", pod.Name, pod.Spec.NodeName)
		}
	}).WithTimeout(machineTimeout).WithPolling(poll).Should(Succeed(), "pods of %s are not all Running", deployment.Name)
	return pods
}

// deleteWorkload deletes the pauseWorkload named name and waits until its
// pods are gone. Pods slow to terminate are deleted without their grace
// period: the suite is done with them.
func deleteWorkload(workload ctrlclient.Client, name string) {
	GinkgoHelper()
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: name}}
	Expect(workload.Delete(ctx, deployment, ctrlclient.PropagationPolicy(metav1.DeletePropagationForeground))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(workload.DeleteAllOf(ctx, &corev1.Pod{}, ctrlclient.InNamespace(deployment.Namespace),
			ctrlclient.MatchingLabels{"app": name}, ctrlclient.GracePeriodSeconds(0))).To(Succeed())
		list := &corev1.PodList{}
		g.Expect(workload.List(ctx, list, ctrlclient.InNamespace(deployment.Namespace), ctrlclient.MatchingLabels{"app": name})).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithTimeout(2 * time.Minute).WithPolling(poll).Should(Succeed())
}

// patchObject applies mutate to the current obj with a merge patch.
func patchObject[T ctrlclient.Object](c ctrlclient.Client, obj T, mutate func(T)) {
	GinkgoHelper()
	Eventually(func() error {
		if err := c.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		base := obj.DeepCopyObject().(T)
		mutate(obj)
		return c.Patch(ctx, obj, ctrlclient.MergeFromWithOptions(base, ctrlclient.MergeFromWithOptimisticLock{}))
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
}

// forceDelete deletes pod without a grace period, if it still exists.
func forceDelete(workload ctrlclient.Client, pod *corev1.Pod) {
	GinkgoHelper()
	Expect(ctrlclient.IgnoreNotFound(workload.Delete(ctx, pod, ctrlclient.GracePeriodSeconds(0)))).To(Succeed())
	Eventually(func() error {
		return workload.Get(ctx, ctrlclient.ObjectKeyFromObject(pod), &corev1.Pod{})
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Satisfy(apierrors.IsNotFound))
}

// slowToTerminate makes the pods of template keep running for five minutes
// after they are asked to stop, as a server finishing its requests would:
// `sleep` as the container's first process ignores SIGTERM, and the
// kube-proxy image, preloaded in the node image, is the one with a shell's
// tools. pause exits at once, and a terminated pod does not hold a drain.
func slowToTerminate(template *corev1.PodTemplateSpec) {
	template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](300)
	container := &template.Spec.Containers[0]
	container.Image = slowToTerminateImage
	container.Command = []string{"sleep", "infinity"}
}

// markedMachines returns the names of the Machines the autoscaler marked
// for deletion among machines.
func markedMachines(machines []clusterv1.Machine) []string {
	var marked []string
	for _, m := range machines {
		if _, ok := m.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
			marked = append(marked, m.Name)
		}
	}
	return marked
}

// taintedNodes returns the names of the workload cluster's Nodes that carry
// the autoscaler's deletion taint.
func taintedNodes(g Gomega, workload ctrlclient.Client) []string {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	var tainted []string
	for _, node := range nodes.Items {
		if nodefacts.HasTaint(&node, nodefacts.ToBeDeletedTaint) {
			tainted = append(tainted, node.Name)
		}
	}
	return tainted
}

// killManager kills capi-autoscaler's manager process with SIGKILL, as a
// crash would, and waits until the kubelet has started it again.
func killManager() {
	GinkgoHelper()
	restarts := managerRestarts()
	// The kind node's PID namespace holds the containers' processes;
	// crictl names the manager's container and its PID.
	script := fmt.Sprintf(`kill -KILL "$(crictl inspect --output go-template --template '{{.info.pid}}' "$(crictl ps --quiet --name manager --label io.kubernetes.pod.namespace=%s)")"`, autoscalerProvider.namespace)
	out, err := exec.Command("docker", "exec", managementClusterName+"-control-plane", "sh", "-c", script).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "killing the manager: %s", out)
	Eventually(func(g Gomega) {
		g.Expect(managerRestarts()).To(BeNumerically(">", restarts))
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed(), "the manager was not restarted")
	expectProvidersRunning()
}

// managerRestarts is the restart count of capi-autoscaler's manager container.
func managerRestarts() int32 {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(management.List(ctx, pods, ctrlclient.InNamespace(autoscalerProvider.namespace))).To(Succeed())
	Expect(pods.Items).To(HaveLen(1))
	for _, status := range pods.Items[0].Status.ContainerStatuses {
		if status.Name == "manager" {
			return status.RestartCount
		}
	}
	Fail("capi-autoscaler's pod has no manager container")
	return 0
}
