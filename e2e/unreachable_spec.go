//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// UnreachableDuring is what the autoscaler is doing when the workload
// cluster's API server goes away.
type UnreachableDuring string

const (
	// DuringScaleUp: pods are pending, the group has not grown yet.
	DuringScaleUp UnreachableDuring = "scale-up"
	// DuringScaleDown: a node is tainted and its pod evicted, but the pod
	// is not gone yet.
	DuringScaleDown UnreachableDuring = "scale-down"
)

// WorkloadUnreachableSpecInput is the input of WorkloadUnreachableSpec.
type WorkloadUnreachableSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager returns the running autoscaler manager, which must not exit
	// or panic.
	Manager func() *localstack.Process

	During UnreachableDuring

	// Outage is how long the workload API server stays down. Beyond five
	// failed health probes (about 50 s) the manager's ClusterCache
	// disconnects, and connects again once the API server is back.
	Outage time.Duration
}

// WorkloadUnreachableSpec stops the workload cluster's API server in the
// middle of a scale-up or a scale-down, and checks that the autoscaler
// does nothing it cannot see the outcome of (no replicas changed, no
// Machine marked or deleted), reports the workload cluster unreachable on
// the ClusterAutoscaler, and finishes the job on its own once the API
// server is back, leaving nothing behind. The figures go to the report and
// to unreachable.txt in the stack's log directory.
//
// It needs the SeparateWorkload topology: self-hosted, the workload API
// server is the management one.
func WorkloadUnreachableSpec(ctx context.Context, inputGetter func() WorkloadUnreachableSpecInput) {
	var input WorkloadUnreachableSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "WorkloadUnreachableSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "WorkloadUnreachableSpec needs the manager")
		Expect(input.During).To(BeElementOf(DuringScaleUp, DuringScaleDown))
		Expect(input.Outage).To(BeNumerically(">", 0), "WorkloadUnreachableSpec needs an outage")
		if input.Stack.Topology() != localstack.SeparateWorkload {
			Skip("the workload cluster is unreachable only in the SeparateWorkload topology: self-hosted, its API server is the management cluster's")
		}
	})

	It("does nothing unsafe while the workload cluster is unreachable, and recovers on its own", func() {
		mgmt := input.Stack.Management.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "unreachable")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		var outage workloadOutage
		switch input.During {
		case DuringScaleUp:
			outage = unreachableDuringScaleUp(ctx, input, namespace, cluster)
		case DuringScaleDown:
			outage = unreachableDuringScaleDown(ctx, input, namespace, cluster)
		}

		since := func(from, to time.Time) time.Duration { return to.Sub(from).Round(time.Second) }
		figures := fmt.Sprintf("unreachable during a %s, outage %s: reported unreachable %s after the API server stopped; after it was back, Ready again in %s, replicas at their goal in %s, done in %s; replicas %s",
			input.During, input.Outage, since(outage.stopped, outage.reported),
			since(outage.restarted, outage.ready), since(outage.restarted, outage.scaled), since(outage.restarted, outage.done), outage.trajectory)
		AddReportEntry("unreachable", figures)
		framework.AppendFigures(input.Stack, "unreachable.txt", figures)
	})
}

// workloadOutage are the times of an outage of the workload API server.
type workloadOutage struct {
	// stopped and restarted are when the API server stopped and was back.
	stopped, restarted time.Time
	// reported is when the ClusterAutoscaler first said the workload
	// cluster is unreachable; ready when it was Ready again.
	reported, ready time.Time
	// scaled is when the group's replicas changed for the interrupted
	// scale-up or scale-down; done when it was complete: the pods running
	// on the new nodes, or the node gone.
	scaled, done time.Time
	// trajectory is the group's replicas, as they changed.
	trajectory string
}

// unreachableDuringScaleUp stops the workload API server while pods wait
// for two new nodes, before the group grows.
func unreachableDuringScaleUp(ctx context.Context, input WorkloadUnreachableSpecInput, namespace framework.SpecNamespace, cluster *clusterv1.Cluster) workloadOutage {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 3})
	// The pods count only once 20 s old: the API server goes away while
	// they are pending and the group has not grown, and the autoscaler has
	// a health probe (every 10 s) to notice before they count.
	spec := framework.FastClusterAutoscalerSpec(cluster.Name)
	spec.NewPodScaleUpDelay = &metav1.Duration{Duration: 20 * time.Second}
	// Once its API server is back, the workload cluster's scheduler may
	// take tens of seconds to use the new nodes (its informers back off);
	// the autoscaler must not take them away as empty meanwhile.
	spec.ScaleDown.UnneededTime = &metav1.Duration{Duration: 2 * time.Minute}
	ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
	invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

	big := framework.CreatePodsForTwoNodes(ctx, workload, namespace, cluster)

	outage := stopWorkloadAPIServer(ctx, input, ca, func(g Gomega) {
		g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1), "the group grew while the workload cluster was unreachable")
	})

	By("Seeing the scale-up through once the API server is back")
	framework.WaitForPodsRunning(ctx, workload, big, framework.ScaleUpTimeout)
	outage.done = time.Now()
	Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(3))
	// After a long outage, the node may be NotReady for a while (its
	// heartbeats could not reach the API server), and a young NotReady
	// node counts as upcoming, as upstream's: the scale-up may then come
	// in two steps, but never beyond the two nodes needed.
	framework.ExpectReplicasAtMost(invariants.Replicas(md), 3)
	outage.scaled = framework.FirstSeen(invariants.Replicas(md), 3)
	outage.trajectory = framework.FormatTrajectory(invariants.Replicas(md))
	expectRecovered(ctx, input, cluster, invariants, ca)
	return outage
}

// unreachableDuringScaleDown stops the workload API server while a node is
// being drained: its pod is evicted, and held Terminating by a finalizer.
func unreachableDuringScaleDown(ctx context.Context, input WorkloadUnreachableSpecInput, namespace framework.SpecNamespace, cluster *clusterv1.Cluster) workloadOutage {
	mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
	drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster})
	md, ca := drain.Group, drain.ClusterAutoscaler
	invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

	outage := stopWorkloadAPIServer(ctx, input, ca, func(g Gomega) {
		g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(2), "the group shrank while the workload cluster was unreachable")
		for _, m := range framework.MachinesOf(ctx, g, mgmt, md) {
			g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s was marked while the workload cluster was unreachable", m.Name)
			g.Expect(m.DeletionTimestamp).To(BeNil(), "Machine %s is being deleted while the workload cluster was unreachable", m.Name)
		}
	})

	By("Letting the held pod go: the node is removed, by the drain resumed or by a new one")
	drain.LetGo(ctx, workload)
	Eventually(func() error {
		return workload.Get(ctx, client.ObjectKeyFromObject(drain.Held), &corev1.Pod{})
	}, framework.DeletionTimeout, framework.AutoscalerPoll).Should(Satisfy(apierrors.IsNotFound))
	Eventually(func(g Gomega) {
		g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
		g.Expect(framework.ClusterNodes(ctx, g, workload, cluster)).To(HaveLen(1))
	}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed(), "the drained node did not go")
	outage.done = time.Now()
	Expect(framework.FormatTrajectory(invariants.Replicas(md))).To(Equal("2→1"), "the group was scaled more than once")
	outage.scaled = framework.FirstSeen(invariants.Replicas(md), 1)
	outage.trajectory = framework.FormatTrajectory(invariants.Replicas(md))
	framework.WaitForPodsRunning(ctx, workload, drain.Small, framework.NodesReadyTimeout)
	expectRecovered(ctx, input, cluster, invariants, ca)
	return outage
}

// stopWorkloadAPIServer stops the workload API server for the input's
// outage, waits until the ClusterAutoscaler reports the workload cluster
// unreachable, checks safe throughout the rest of the outage, and
// restarts the API server: the autoscaler must be Ready again on its own.
func stopWorkloadAPIServer(ctx context.Context, input WorkloadUnreachableSpecInput, ca *autoscalingv1alpha1.ClusterAutoscaler, safe func(g Gomega)) workloadOutage {
	GinkgoHelper()
	stack, mgmt := input.Stack, input.Stack.Management.Client
	By(fmt.Sprintf("Stopping the workload API server for %s", input.Outage))
	outage := workloadOutage{stopped: time.Now()}
	Expect(stack.StopAPIServer(stack.Workload)).To(Succeed())
	restarted := false
	restart := func() {
		Expect(stack.RestartAPIServer(ctx, stack.Workload)).To(Succeed())
		restarted = true
	}
	DeferCleanup(func() {
		// The next specs need the workload cluster.
		if !restarted {
			restart()
		}
	})

	Eventually(func(g Gomega) {
		safe(g)
		ready := conditions.Get(framework.GetClusterAutoscaler(ctx, g, mgmt, ca), autoscalingv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(autoscalingv1alpha1.WorkloadClusterUnreachableReason))
	}, input.Outage, framework.AutoscalerPoll).Should(Succeed(), "the ClusterAutoscaler did not report the workload cluster unreachable within the outage")
	outage.reported = time.Now()
	if rest := input.Outage - outage.reported.Sub(outage.stopped); rest > 0 {
		Consistently(safe, rest, framework.AutoscalerPoll).Should(Succeed())
	}

	By("Starting the workload API server again")
	restart()
	outage.restarted = time.Now()
	Eventually(func(g Gomega) {
		ready := conditions.Get(framework.GetClusterAutoscaler(ctx, g, mgmt, ca), autoscalingv1alpha1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue), "Ready: %s: %s", ready.Reason, ready.Message)
	}, framework.ClusterReadyTimeout, framework.AutoscalerPoll).Should(Succeed(), "the autoscaler did not recover")
	outage.ready = time.Now()
	return outage
}

// expectRecovered checks what the autoscaler left once it recovered, and
// removes the ClusterAutoscaler.
func expectRecovered(ctx context.Context, input WorkloadUnreachableSpecInput, cluster *clusterv1.Cluster, invariants *framework.Invariants, ca *autoscalingv1alpha1.ClusterAutoscaler) {
	GinkgoHelper()
	framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
	invariants.ExpectNoViolations()
	framework.ExpectManagerHealthy(input.Manager())
	framework.DeleteClusterAutoscaler(ctx, input.Stack.Management.Client, ca)
}
