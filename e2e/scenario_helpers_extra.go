//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/localstack"
)

// Helpers of the balancing, limits, priority cutoff, bad input, two
// clusters and restart specs, on top of autoscaler_helpers.go.

// extraMachine is a simulated machine with cpu cores, 8Gi of memory and
// 110 pods.
func extraMachine(cpu string) infrav1.SimMachineSpec {
	return infrav1.SimMachineSpec{Capacity: corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}}
}

// extraCPU is a request of cpu cores.
func extraCPU(cpu string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
}

// extraSizeAnnotations are the autoscaler's min and max size annotations.
func extraSizeAnnotations(minSize, maxSize int) map[string]string {
	return map[string]string{
		clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(minSize),
		clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(maxSize),
	}
}

// extraClusterNodes lists the Nodes of the workload cluster that belong to
// cluster (by ClusterLabel).
func extraClusterNodes(g Gomega, workload client.Client, cluster *clusterv1.Cluster) []corev1.Node {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes, client.MatchingLabels{ClusterLabel: cluster.Name})).To(Succeed())
	return nodes.Items
}

// extraCountNodes counts all Nodes of the workload cluster.
func extraCountNodes(g Gomega, workload client.Client) int {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	return len(nodes.Items)
}

// extraClusterCores sums the cpu capacity of every Node of the workload
// cluster, in whole cores (rounded up).
func extraClusterCores(g Gomega, workload client.Client) int64 {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	var milli int64
	for _, node := range nodes.Items {
		milli += node.Status.Capacity.Cpu().MilliValue()
	}
	return (milli + 999) / 1000
}

// extraPendingPods counts the pods of namespace the scheduler could not place.
func extraPendingPods(g Gomega, workload client.Client, namespace string) int {
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

// extraGetCA reads the ClusterAutoscaler again.
func extraGetCA(g Gomega, c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) *autoscalingv1alpha1.ClusterAutoscaler {
	current := &autoscalingv1alpha1.ClusterAutoscaler{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(ca), current)).To(Succeed())
	return current
}

// extraPatchCA changes the spec of a ClusterAutoscaler.
func extraPatchCA(c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler, mutate func(*autoscalingv1alpha1.ClusterAutoscalerSpec)) {
	Eventually(func(g Gomega) {
		current := extraGetCA(g, c, ca)
		before := current.DeepCopy()
		mutate(&current.Spec)
		g.Expect(c.Patch(ctx, current, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))).To(Succeed())
	}, ClusterReadyTimeout, AutoscalerPoll).Should(Succeed())
}

// extraObjectEvents lists the events of namespace about the object of kind
// and name with reason, as the core API shows them.
func extraObjectEvents(g Gomega, c client.Client, namespace, kind, name, reason string) []corev1.Event {
	events := &corev1.EventList{}
	g.Expect(c.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
	var out []corev1.Event
	for _, event := range events.Items {
		if event.InvolvedObject.Kind == kind && event.InvolvedObject.Name == name && event.Reason == reason {
			out = append(out, event)
		}
	}
	return out
}

// extraEventMessages are the messages of events.
func extraEventMessages(events []corev1.Event) []string {
	messages := make([]string, 0, len(events))
	for _, event := range events {
		messages = append(messages, event.Message)
	}
	return messages
}

// extraDeleteClusterAutoscaler deletes a ClusterAutoscaler and waits until
// the manager removed its finalizer.
func extraDeleteClusterAutoscaler(c client.Client, ca *autoscalingv1alpha1.ClusterAutoscaler) {
	Expect(client.IgnoreNotFound(c.Delete(ctx, ca))).To(Succeed())
	Eventually(func() bool {
		err := c.Get(ctx, client.ObjectKeyFromObject(ca), &autoscalingv1alpha1.ClusterAutoscaler{})
		return client.IgnoreNotFound(err) == nil && err != nil
	}, DeletionTimeout, AutoscalerPoll).Should(BeTrue(), "ClusterAutoscaler %s/%s is not gone", ca.Namespace, ca.Name)
}

// extraManagerProcess is an autoscaler manager process of the suite, found
// or started by its process id.
type extraManagerProcess struct {
	pid  int
	args []string
}

// extraFindSuiteManager finds the manager the suite started (a child of this
// test process whose command line names the management kubeconfig and whose
// binary is the manager), so that the restart spec can kill it and start it
// again with the same command line.
func extraFindSuiteManager(stack *localstack.Stack) *extraManagerProcess {
	entries, err := os.ReadDir("/proc")
	Expect(err).NotTo(HaveOccurred())
	want := "--kubeconfig=" + stack.Management.KubeconfigPath
	var found []*extraManagerProcess
	for _, entry := range entries {
		pid, err := strconv.Atoi(entry.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", entry.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		// The stack's own managers (Cluster API, kube-controller-manager)
		// run from its binary directory with the same kubeconfig.
		base := filepath.Base(args[0])
		if len(args) < 2 || !strings.Contains(base, "manager") || base == "capi-manager" || base == "kube-controller-manager" {
			continue
		}
		for _, arg := range args[1:] {
			if arg == want {
				found = append(found, &extraManagerProcess{pid: pid, args: args})
				break
			}
		}
	}
	Expect(found).To(HaveLen(1), "expected exactly one autoscaler manager started by the suite")
	return found[0]
}

// kill ends the manager at once with SIGKILL, by its process id, as a
// crash or an OOM kill would, and waits until it is gone.
func (p *extraManagerProcess) kill() {
	Expect(syscall.Kill(p.pid, syscall.SIGKILL)).To(Succeed())
	Eventually(func() bool {
		// A zombie until the launcher reaps it; either way it runs no more.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.pid))
		if err != nil {
			return true
		}
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		return len(fields) > 0 && (fields[0] == "Z" || fields[0] == "X")
	}, 30*time.Second, 100*time.Millisecond).Should(BeTrue(), "manager (pid %d) did not exit", p.pid)
}

// restart starts the manager again with the same command line; the stack
// tracks and stops it. Its log is name.log in the stack's log directory.
func (p *extraManagerProcess) restart(stack *localstack.Stack, name string) {
	By(fmt.Sprintf("Starting the autoscaler manager again (log %s.log)", name))
	Expect(stack.StartProcess(ctx, name, p.args[0], p.args[1:]...)).To(Succeed())
}

// extraDeletionTaint is the taint the autoscaler puts on nodes it removes.
const extraDeletionTaint = "ToBeDeletedByClusterAutoscaler"

// extraHasDeletionTaint says whether node carries the autoscaler's
// deletion taint.
func extraHasDeletionTaint(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key == extraDeletionTaint {
			return true
		}
	}
	return false
}

// extraCreateWorkload creates a Deployment like CreateWorkload, with its
// pod template changed by mutate before it is created (a priority class,
// finalizers, affinity...), so that no pod ever runs without the change.
func extraCreateWorkload(ctx context.Context, input WorkloadInput, mutate func(*corev1.PodTemplateSpec)) *appsv1.Deployment {
	labels := map[string]string{"app": input.Name}
	deployment := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: input.Namespace, Name: input.Name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(input.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  input.NodeSelector,
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
	if mutate != nil {
		mutate(&deployment.Spec.Template)
	}
	Expect(input.Client.Create(ctx, deployment)).To(Succeed())
	return deployment
}
