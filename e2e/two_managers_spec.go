//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// TwoManagersSpecInput is the input of TwoManagersSpec.
type TwoManagersSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager is the suite's manager, which serves every
	// ClusterAutoscaler; the spec kills it, and starts its binary again
	// with ManagerArgs.
	Manager     *localstack.Process
	ManagerArgs []string
	// Restarted is told about the manager started in place of Manager.
	Restarted func(*localstack.Process)
}

const (
	// Logged by a manager when it takes a Cluster's Lease, and when it
	// leaves the Cluster to the manager holding it
	// (internal/controller/leases.go).
	tookClusterLeaseLog    = "Took the Lease of the Cluster"
	leftClusterLeaseLog    = "Not autoscaling: another manager holds the Lease of the Cluster"
	filteredManagerProcess = "capi-autoscaler-filtered"
	// Logged by an engine that gives back a node left tainted by a drain
	// it does not know (autoscaler/scaledown).
	releasedLeftoverLog = "Released a node left tainted by an earlier removal"
)

// TwoManagersSpec runs a second manager, with --watch-filter, beside the
// suite's unfiltered one: both serve the spec's ClusterAutoscaler, labelled
// for the filter. Only the holder of the Cluster's Lease may act: while
// the unfiltered manager drains a node (its pod held Terminating by a
// finalizer), the filtered one must report the holder and leave the drain
// alone. Then the holder is killed (SIGKILL): the filtered manager must
// take the Lease over within the Lease duration and autoscale the Cluster,
// and the node, once its pod goes, is removed cleanly; the killed manager,
// started again, waits in turn.
//
// It kills and restarts the suite's manager: run it serially.
func TwoManagersSpec(ctx context.Context, inputGetter func() TwoManagersSpecInput) {
	var input TwoManagersSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "TwoManagersSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "TwoManagersSpec needs the suite's manager")
		Expect(input.Restarted).NotTo(BeNil(), "TwoManagersSpec needs to tell about the restarted manager")
	})

	It("lets only the Lease's holder act, and the other manager take over once it is killed", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "two-managers")
		filter := map[string]string{clusterv1.WatchLabel: namespace.Name}
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{
			Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig, Labels: filter,
		})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		By("The suite's manager, alone, drains a node of the Cluster")
		drain := framework.StartHeldDrain(ctx, framework.StartHeldDrainInput{Stack: input.Stack, Namespace: namespace, Cluster: cluster, Labels: filter})
		ca, drained := drain.ClusterAutoscaler, drain.Drained
		leaseKey := client.ObjectKey{Namespace: cluster.Namespace, Name: controller.ClusterLeaseName(cluster.Name)}
		unfiltered := input.Manager

		By("Starting a second manager with --watch-filter=" + namespace.Name + ": it serves the same ClusterAutoscaler")
		filtered, err := input.Stack.StartProcess(ctx, filteredManagerProcess, unfiltered.Binary(),
			slices.Concat(input.ManagerArgs, []string{"--watch-filter=" + namespace.Name})...)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			select {
			case <-filtered.Exited():
			default:
				Expect(filtered.Stop()).To(Succeed())
			}
		})

		By("Seeing the filtered manager leave the drain alone")
		started := time.Now()
		// The Ready reasons the ClusterAutoscaler shows, in turn, and how
		// many times it was written, while the two managers serve it.
		var readyReasons []string
		versions := map[string]bool{}
		// Long enough for the filtered manager to start, sync and run
		// several loops, had it started an engine.
		Consistently(func(g Gomega) {
			g.Expect(filtered.Exited()).NotTo(BeClosed(), "%s exited: %v", filtered.Name(), filtered.Err())
			node := &corev1.Node{}
			g.Expect(workload.Get(ctx, client.ObjectKey{Name: drained}, node)).To(Succeed())
			g.Expect(framework.HasDeletionTaint(node)).To(BeTrue(), "the deletion taint of Node %s was released while its drain goes on", drained)
			g.Expect(loggedLine(filtered, tookClusterLeaseLog, cluster.Name)).To(BeFalse(), "%s took the Lease", filtered.Name())
			g.Expect(framework.Replicas(ctx, g, mgmt, drain.Group)).To(BeEquivalentTo(2))
			current := framework.GetClusterAutoscaler(ctx, g, mgmt, ca)
			versions[current.ResourceVersion] = true
			if reason := conditions.GetReason(current, autoscalingv1alpha1.ReadyCondition); len(readyReasons) == 0 || readyReasons[len(readyReasons)-1] != reason {
				readyReasons = append(readyReasons, reason)
			}
		}, 20*time.Second, framework.PollInterval).Should(Succeed())
		AddReportEntry("ClusterAutoscaler while two managers serve it", fmt.Sprintf("%d versions seen in %s, Ready reasons in turn: %s",
			len(versions), time.Since(started).Round(time.Second), strings.Join(readyReasons, " → ")))
		By("Seeing the filtered manager report that " + unfiltered.Name() + " holds the Cluster's Lease")
		holder := ptr.Deref(lease(ctx, Default, mgmt, leaseKey).Spec.HolderIdentity, "")
		Expect(holder).NotTo(BeEmpty(), "nobody holds Lease %s", leaseKey)
		Expect(loggedLine(unfiltered, tookClusterLeaseLog, cluster.Name)).To(BeTrue(), "%s does not say it took the Lease", unfiltered.Name())
		var waiting []corev1.Event
		Eventually(func(g Gomega) {
			waiting = framework.ObjectEvents(ctx, g, mgmt, ca.Namespace, "ClusterAutoscaler", ca.Name, autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason)
			g.Expect(framework.EventMessages(waiting)).To(ContainElement(ContainSubstring(holder)), "no %s event names the holder", autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason)
			g.Expect(loggedLine(filtered, leftClusterLeaseLog, cluster.Name)).To(BeTrue(), "%s does not say it leaves the Cluster to the holder", filtered.Name())
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed())
		Expect(ptr.Deref(lease(ctx, Default, mgmt, leaseKey).Spec.HolderIdentity, "")).To(Equal(holder), "the Lease changed hands")
		// The status is the holder's: a waiting manager that wrote its own
		// would have the two rewrite it in turn, each write the other's
		// cue to reconcile.
		Expect(readyReasons).To(Equal([]string{autoscalingv1alpha1.RunningReason}),
			"the ClusterAutoscaler's Ready condition changed hands while %s waited (%d versions in 20s)", filtered.Name(), len(versions))
		Expect(eventCount(waiting)).To(BeNumerically("<=", 2), "%s reported the holder over and over", filtered.Name())
		AddReportEntry("waiting manager's events", fmt.Sprintf("%d %s events (count %d) in %s", len(waiting),
			autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason, eventCount(waiting), time.Since(started).Round(time.Second)))

		var restarted *localstack.Process
		restart := framework.PrepareManagerRestart(ctx, framework.ManagerRestartInput{
			Stack: input.Stack, Manager: unfiltered, Args: input.ManagerArgs,
			Restarted: func(p *localstack.Process) { restarted = p; input.Restarted(p) },
		})
		By("Killing the holder, " + unfiltered.Name() + ", in the middle of the drain")
		Expect(unfiltered.Kill()).To(Succeed())
		killed := time.Now()
		Expect(unfiltered.Exited()).To(BeClosed())

		By("Waiting for " + filtered.Name() + " to take the Lease over within its duration")
		var newHolder string
		Eventually(func(g Gomega) {
			newHolder = ptr.Deref(lease(ctx, g, mgmt, leaseKey).Spec.HolderIdentity, "")
			g.Expect(newHolder).NotTo(BeElementOf(holder, ""), "the killed manager still holds the Lease")
			g.Expect(loggedLine(filtered, tookClusterLeaseLog, cluster.Name)).To(BeTrue(), "%s does not say it took the Lease", filtered.Name())
		}, 2*controller.DefaultClusterLeaseTimings.LeaseDuration, framework.PollInterval).Should(Succeed())
		tookOver := time.Since(killed)
		// client-go's elector counts the Lease duration from when it saw
		// the last renewal, up to a RetryPeriod (with 20% jitter) after
		// it, and tries again every RetryPeriod: 15 s + 2.4 s + 2.4 s,
		// and the API server's answers on a busy machine.
		timings := controller.DefaultClusterLeaseTimings
		Expect(tookOver).To(BeNumerically("<", timings.LeaseDuration+4*timings.RetryPeriod), "the take-over took longer than the Lease duration and two retries")
		// The first loop of a new engine writes lastLoopTime.
		Eventually(func(g Gomega) {
			current := framework.GetClusterAutoscaler(ctx, g, mgmt, ca)
			g.Expect(current.Status.LastLoopTime).NotTo(BeNil())
			g.Expect(current.Status.LastLoopTime.Time).To(BeTemporally(">=", killed.Truncate(time.Second)), "no loop since the kill")
			ready := conditions.Get(current, autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).NotTo(BeNil())
			g.Expect(ready.Reason).To(Equal(autoscalingv1alpha1.RunningReason), "Ready: %s", ready.Message)
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed(), "the new holder's engine does not run")
		autoscaling := time.Since(killed)

		By("Starting the killed manager again: it waits for the Lease in turn")
		restart()
		Eventually(func(g Gomega) {
			g.Expect(loggedLine(restarted, leftClusterLeaseLog, cluster.Name)).To(BeTrue())
		}, framework.ReleaseTimeout, framework.AutoscalerPoll).Should(Succeed(), "the restarted manager does not leave the Cluster to %s", newHolder)
		Expect(ptr.Deref(lease(ctx, Default, mgmt, leaseKey).Spec.HolderIdentity, "")).To(Equal(newHolder), "the Lease changed hands again")

		By("Letting the held pod go: the new holder removes the emptied node cleanly")
		drain.LetGo(ctx, workload)
		Eventually(func(g Gomega) {
			err := workload.Get(ctx, client.ObjectKey{Name: drained}, &corev1.Node{})
			g.Expect(err).To(Satisfy(apierrors.IsNotFound), "Node %s", drained)
			g.Expect(framework.Replicas(ctx, g, mgmt, drain.Group)).To(BeEquivalentTo(1))
			machines := framework.MachinesOf(ctx, g, mgmt, drain.Group)
			g.Expect(machines).To(HaveLen(1))
			g.Expect(machines[0].Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
		}, framework.ScaleDownTimeout, framework.AutoscalerPoll).Should(Succeed())
		framework.ExpectReplacementRunning(ctx, workload, drain.Small, drain.Kept)
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(filtered)
		// What the new holder did with the drain the killed one left: an
		// engine knows only its own drains (docs/reliability.md, "One
		// manager per Cluster").
		taint := "kept by the new holder"
		if loggedLine(filtered, releasedLeftoverLog, drained) {
			taint = "released by the new holder as a leftover"
		}

		figures := fmt.Sprintf("two managers %s: from the kill, %s to the filtered manager's Lease, %s to its engine running; the drain's taint %s",
			input.Stack.Topology(), tookOver.Round(100*time.Millisecond), autoscaling.Round(100*time.Millisecond), taint)
		AddReportEntry("two managers", figures)
		framework.AppendFigures(input.Stack, "two-managers.txt", figures)
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// loggedLine says whether the manager logged a line holding both message
// and the Cluster's name.
func loggedLine(p *localstack.Process, message, cluster string) bool {
	GinkgoHelper()
	log, err := os.ReadFile(p.LogPath())
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, message) && strings.Contains(line, cluster) {
			return true
		}
	}
	return false
}

// eventCount is how many times events were recorded, counting the repeats
// the API server aggregated.
func eventCount(events []corev1.Event) int32 {
	var count int32
	for _, event := range events {
		count += max(event.Count, 1)
		if event.Series != nil {
			count += event.Series.Count - 1
		}
	}
	return count
}
