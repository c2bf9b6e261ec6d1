//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// DeadNodeSpecInput is the input of DeadNodeSpec.
type DeadNodeSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
}

// deadNodeUnreadyTime is the spec's scaleDown.unreadyTime.
const deadNodeUnreadyTime = time.Minute

// kubeletGoneFinalizer holds the pod of the dead node once it is deleted:
// it stands for the kubelet that would confirm the pod's end and never
// will. kwok, which plays the kubelets, ends a deleted pod at once.
const kubeletGoneFinalizer = "e2e.capi-autoscaler.io/kubelet-gone"

// startedNodeAge is how old a node must be before a Ready condition that
// changes counts as the node going down rather than finishing its start,
// with a margin for the clocks of the API server and the test.
const startedNodeAge = nodefacts.MaxStatusDelayAfterCreation + 10*time.Second

// DeadNodeSpec kills the kubelet of a node: the node turns unreachable,
// taint-based eviction deletes its pod, and the pod stays Terminating, as
// nothing confirms its end. The autoscaler must remove the node once it has
// been unready for unreadyTime, tainting it once rather than tainting and
// releasing it loop after loop, and add the node the pod's replacement
// needs. The node dies young, well within the 15 minutes a node that never
// became Ready counts as starting: it is unready at once all the same.
func DeadNodeSpec(ctx context.Context, inputGetter func() DeadNodeSpecInput) {
	var input DeadNodeSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "DeadNodeSpec needs a stack")
	})

	It("removes a dead node whose pods are stuck Terminating once it has been unready for unreadyTime", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "dead-node")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		md, nodes := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 2, MaxSize: 3})
		var deadMachine, dead, kept string
		for machine, node := range nodes {
			if kept == "" {
				kept = node
				continue
			}
			deadMachine, dead = machine, node
		}

		By("Filling " + kept + " to 75% so that it stays, and running a 2-core pod, which fits only on " + dead)
		big := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "big", Replicas: 1,
			Requests:     framework.CPURequest("3"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name, corev1.LabelHostname: kept},
		})
		framework.WaitForPodsRunning(ctx, workload, big, framework.NodesReadyTimeout)
		web := framework.CreateWorkload(ctx, framework.WorkloadInput{
			Client: workload, Namespace: namespace.Name, Name: "web", Replicas: 1,
			Requests:     framework.CPURequest("2"),
			NodeSelector: map[string]string{framework.ClusterLabel: cluster.Name},
			Mutate: func(template *corev1.PodTemplateSpec) {
				template.Finalizers = []string{kubeletGoneFinalizer}
				template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
				// Evicted seconds, not the default 5 minutes, after its node
				// turns unreachable.
				template.Spec.Tolerations = []corev1.Toleration{{
					Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists,
					Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](5),
				}}
			},
		})
		stuck := framework.WaitForPodsRunning(ctx, workload, web, framework.NodesReadyTimeout)[0]
		Expect(stuck.Spec.NodeName).To(Equal(dead))
		DeferCleanup(func() { releaseStuckPods(ctx, workload, namespace.Name) })

		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		spec.ScaleDown.UnreadyTime = &metav1.Duration{Duration: deadNodeUnreadyTime}
		framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})

		node := &corev1.Node{}
		Expect(workload.Get(ctx, client.ObjectKey{Name: dead}, node)).To(Succeed())
		if wait := time.Until(node.CreationTimestamp.Add(startedNodeAge)); wait > 0 {
			By(fmt.Sprintf("Waiting %s, until %s has surely started", wait.Round(time.Second), dead))
			time.Sleep(wait)
		}

		By("Killing the kubelet of " + dead + ": the node turns unreachable, its pod is evicted and stays Terminating")
		framework.SetNodeLabel(ctx, workload, dead, localstack.NodeKubeletDeadLabel, "true")
		var notReadyAt time.Time
		Eventually(func(g Gomega) {
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: dead}, node)).To(Succeed())
			g.Expect(nodefacts.KubeletReady(node)).To(BeFalse(), "Node %s is still Ready", dead)
			for _, condition := range node.Status.Conditions {
				if condition.Type == corev1.NodeReady {
					notReadyAt = condition.LastTransitionTime.Time
				}
			}
			pod := &corev1.Pod{}
			g.Expect(workload.Get(ctx, client.ObjectKeyFromObject(&stuck), pod)).To(Succeed())
			g.Expect(pod.DeletionTimestamp).NotTo(BeNil(), "pod %s was not evicted", pod.Name)
		}, framework.NodesReadyTimeout, framework.AutoscalerPoll).Should(Succeed())

		By(fmt.Sprintf("Waiting for %s to go once it has been unready for %s", dead, deadNodeUnreadyTime))
		removableAt := notReadyAt.Add(deadNodeUnreadyTime)
		Eventually(func(g Gomega) {
			machine := &clusterv1.Machine{}
			g.Expect(mgmt.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: deadMachine}, machine)).To(Succeed())
			g.Expect(machine.DeletionTimestamp != nil || machine.Annotations[clusterv1.DeleteMachineAnnotation] != "").To(BeTrue(), "Machine %s of %s is not being removed", deadMachine, dead)
		}, time.Until(removableAt)+framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		removedAt := time.Now()
		Expect(removedAt).To(BeTemporally(">=", removableAt), "removed before it was unready for unreadyTime")

		By("Checking that the replacement pod runs on a new node, and the dead node is gone")
		Eventually(func(g Gomega) {
			var replacements []corev1.Pod
			for _, pod := range framework.PodsSelected(ctx, g, workload, namespace.Name, web.Spec.Selector) {
				if pod.DeletionTimestamp == nil {
					replacements = append(replacements, pod)
				}
			}
			g.Expect(replacements).To(HaveLen(1))
			g.Expect(replacements[0].Status.Phase).To(Equal(corev1.PodRunning))
			g.Expect(replacements[0].Spec.NodeName).NotTo(BeElementOf(kept, dead))
			g.Expect(framework.ClusterNodes(ctx, g, workload, cluster)).To(HaveLen(2))
		}, framework.ScaleUpTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(framework.FormatTrajectory(invariants.Replicas(md))).To(Equal("2→3→2"))
		Expect(deletionTaintsPlaced(ctx, workload, dead)).To(Equal(int32(1)), "%s was tainted more than once: released and taken again", dead)
		releaseStuckPods(ctx, workload, namespace.Name)
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		AddReportEntry("dead node", fmt.Sprintf("removable at %s, removed %s later", removableAt.Format(time.RFC3339), removedAt.Sub(removableAt).Round(time.Second)))
	})
}

// releaseStuckPods lets the pods of the namespace held by
// kubeletGoneFinalizer go, as a kubelet coming back would.
func releaseStuckPods(ctx context.Context, workload client.Client, namespace string) {
	GinkgoHelper()
	pods := &corev1.PodList{}
	Expect(workload.List(ctx, pods, client.InNamespace(namespace))).To(Succeed())
	for i := range pods.Items {
		if slices.Contains(pods.Items[i].Finalizers, kubeletGoneFinalizer) {
			framework.PatchPod(ctx, workload, &pods.Items[i], func(pod *corev1.Pod) {
				pod.Finalizers = slices.DeleteFunc(pod.Finalizers, func(f string) bool { return f == kubeletGoneFinalizer })
			})
		}
	}
}

// deletionTaintsPlaced counts how many times the autoscaler tainted the
// node for deletion, by the events it recorded, repeats included.
func deletionTaintsPlaced(ctx context.Context, workload client.Client, node string) int32 {
	GinkgoHelper()
	events := &corev1.EventList{}
	Expect(workload.List(ctx, events, client.MatchingFields{"involvedObject.kind": "Node", "involvedObject.name": node})).To(Succeed())
	var placed int32
	for _, event := range events.Items {
		if event.Reason == scaledown.EventReasonScaleDown && strings.Contains(event.Message, "marked the node") {
			placed += max(event.Count, 1)
		}
	}
	return placed
}
