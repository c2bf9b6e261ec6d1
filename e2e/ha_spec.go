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
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// HASpecInput is the input of HASpec.
type HASpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager is the suite's manager: it runs without leader election, so
	// the spec stops it while the replicas run, and starts its binary
	// again with ManagerArgs afterwards, even when the spec fails.
	Manager     *localstack.Process
	ManagerArgs []string
	// Restarted is told about the manager started in place of Manager.
	Restarted func(*localstack.Process)

	// LeaderElectionArgs are extra flags of the replicas, e.g. Lease
	// timings; the manager's defaults when empty.
	LeaderElectionArgs []string

	// KillAt is when the leader is killed.
	KillAt HAKillPoint
}

// HAKillPoint is when HASpec kills the leader.
type HAKillPoint string

const (
	// KillBeforeScaleUp: the pods are pending, and the leader has not
	// scaled up for them yet: the new leader must.
	KillBeforeScaleUp HAKillPoint = "before the scale-up"
	// KillAfterScaleUp: the leader has raised the replicas, and the new
	// nodes have not registered yet: the new leader must count them as
	// upcoming, and not scale up for the same pods again.
	KillAfterScaleUp HAKillPoint = "after the scale-up"
)

const (
	// haLeaseName is the Lease of the spec's replicas: a name of its own,
	// so that the suite's manager and other specs never compete for it.
	haLeaseName = "capi-autoscaler-ha-spec"
	// acquiredLeaseLog is what client-go's leader election logs when a
	// replica becomes the leader. The Lease's holderIdentity is
	// hostname_uuid, the same host for every replica of the stack: the
	// log tells which process holds it.
	acquiredLeaseLog = "Successfully acquired lease"
	// leaderElectionTimeout bounds a failover: a Lease of 15 s, and two
	// replicas starting on a busy machine.
	leaderElectionTimeout = time.Minute
)

// HASpec runs two replicas of the manager with leader election, kills the
// leader (SIGKILL, as a crash or a lost node would) just before or just
// after it scales up for pending pods, and measures the failover: from the
// kill to the standby acquiring the Lease, to the scale-up, and to the
// pods running. No node group may be scaled twice: the pending pods need
// exactly two more nodes, and the group's replicas never go beyond 3.
// The figures go to the report and to ha.txt in the stack's log directory.
//
// It stops and restarts the suite's manager: run it serially.
func HASpec(ctx context.Context, inputGetter func() HASpecInput) {
	var input HASpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "HASpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "HASpec needs the suite's manager")
		Expect(input.Restarted).NotTo(BeNil(), "HASpec needs to tell about the restarted manager")
		Expect(input.KillAt).To(BeElementOf(KillBeforeScaleUp, KillAfterScaleUp))
	})

	It("fails over to the standby replica, and scales up once", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "ha")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		machine := framework.SimMachine("4")
		if input.KillAt == KillAfterScaleUp {
			// Longer than a failover: the new leader finds the nodes of
			// the scale-up on their way.
			machine.ProvisioningDelay = metav1.Duration{Duration: 30 * time.Second}
		}
		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 6, Machine: machine})

		leaseKey := client.ObjectKey{Namespace: managerServiceAccount(ctx, mgmt).Namespace, Name: haLeaseName}
		replicas := startReplicas(ctx, input, leaseKey)
		leader, standby := waitForLeader(replicas)
		By(fmt.Sprintf("%s leads, %s stands by", leader.Name(), standby.Name()))

		spec := framework.FastClusterAutoscalerSpec(cluster.Name)
		if input.KillAt == KillBeforeScaleUp {
			// The pods are left alone for a while, so that the leader
			// can be killed once they are pending and before it scales
			// up for them.
			spec.NewPodScaleUpDelay = &metav1.Duration{Duration: 15 * time.Second}
		}
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: spec})
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		big := framework.CreatePodsForTwoNodes(ctx, workload, namespace, cluster)
		holder := lease(ctx, Default, mgmt, leaseKey).Spec.HolderIdentity
		switch input.KillAt {
		case KillBeforeScaleUp:
			Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(1), "the leader scaled up before it was killed")
		case KillAfterScaleUp:
			Eventually(func(g Gomega) {
				g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(3))
			}, framework.ScaleUpTimeout, 100*time.Millisecond).Should(Succeed(), "the leader did not scale up")
		}

		By("Killing the leader " + leader.Name() + " " + string(input.KillAt))
		killed := time.Now()
		Expect(leader.Kill()).To(Succeed())
		Expect(framework.ClusterNodes(ctx, Default, workload, cluster)).To(HaveLen(1), "the nodes of the scale-up registered before the leader was killed")

		By("Waiting for " + standby.Name() + " to take the Lease over")
		var acquired time.Time
		Eventually(func(g Gomega) {
			current := lease(ctx, g, mgmt, leaseKey)
			g.Expect(current.Spec.HolderIdentity).NotTo(Equal(holder), "the Lease is still held by the killed leader")
			g.Expect(current.Spec.AcquireTime).NotTo(BeNil())
			g.Expect(acquiredLease(standby)).To(BeTrue(), "%s did not log that it acquired the Lease", standby.Name())
			acquired = current.Spec.AcquireTime.Time
		}, leaderElectionTimeout, 100*time.Millisecond).Should(Succeed())

		By("Waiting for the new leader to scale up: the pods run")
		framework.WaitForPodsRunning(ctx, workload, big, framework.ScaleUpTimeout)
		running := time.Now()
		Expect(framework.Replicas(ctx, Default, mgmt, md)).To(BeEquivalentTo(3))
		// A second scale-up would come within a few loops of the first.
		Consistently(func(g Gomega) {
			g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(3))
		}, 10*time.Second, framework.AutoscalerPoll).Should(Succeed(), "the group was scaled again")

		trajectory := invariants.Replicas(md)
		// One scale-up may come in steps, as the pods turn unschedulable
		// one by one, but never beyond the two nodes needed.
		framework.ExpectReplicasAtMost(trajectory, 3)
		scaledUp := framework.FirstSeen(trajectory, 3)
		if input.KillAt == KillBeforeScaleUp {
			// trajectory[0] is the size when the watch started, 1.
			Expect(trajectory[1].Seen).To(BeTemporally(">", killed), "the killed leader scaled up")
		}
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(standby)

		round := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
		scaleUp := fmt.Sprintf("%s to the scale-up (%s after the Lease)", round(scaledUp.Sub(killed)), round(scaledUp.Sub(acquired)))
		if input.KillAt == KillAfterScaleUp {
			scaleUp = fmt.Sprintf("no scale-up (the killed leader's was %s before the kill)", round(killed.Sub(scaledUp)))
		}
		figures := fmt.Sprintf("ha %s, leader killed %s, Lease timings %s: from the kill, %s to the new leader's Lease, %s, %s to the pods running; replicas %s",
			input.Stack.Topology(), input.KillAt, leaseTimings(input.LeaderElectionArgs),
			round(acquired.Sub(killed)), scaleUp, round(running.Sub(killed)), framework.FormatTrajectory(trajectory))
		AddReportEntry("ha", figures)
		framework.AppendFigures(input.Stack, "ha.txt", figures)
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

// startReplicas stops the suite's manager and starts two replicas with
// leader election in its place, and the suite's manager again after the
// spec.
func startReplicas(ctx context.Context, input HASpecInput, leaseKey client.ObjectKey) []*localstack.Process {
	GinkgoHelper()
	mgmt := input.Stack.Management.Client
	By("Stopping the suite's manager: it runs without leader election")
	Expect(input.Manager.Stop()).To(Succeed())
	DeferCleanup(func() {
		By("Starting the suite's manager again")
		p, err := input.Stack.StartProcess(ctx, "capi-autoscaler-after-ha", input.Manager.Binary(), input.ManagerArgs...)
		Expect(err).NotTo(HaveOccurred())
		input.Restarted(p)
	})

	args := slices.Concat(input.ManagerArgs, []string{
		"--leader-elect",
		"--leader-election-namespace=" + leaseKey.Namespace,
		"--leader-election-id=" + leaseKey.Name,
	}, input.LeaderElectionArgs)
	var replicas []*localstack.Process
	for i := range 2 {
		p, err := input.Stack.StartProcess(ctx, fmt.Sprintf("capi-autoscaler-ha-%d", i), input.Manager.Binary(), args...)
		Expect(err).NotTo(HaveOccurred())
		replicas = append(replicas, p)
	}
	DeferCleanup(func(ctx context.Context) {
		By("Stopping the replicas; the leader gives the Lease up")
		for _, p := range replicas {
			Expect(p.Stop()).To(Succeed())
		}
		Expect(client.IgnoreNotFound(mgmt.Delete(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: leaseKey.Namespace, Name: leaseKey.Name},
		}))).To(Succeed())
	})
	return replicas
}

// waitForLeader waits until one of two replicas holds the Lease, and
// returns it and the other.
func waitForLeader(replicas []*localstack.Process) (leader, standby *localstack.Process) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var leaders []string
		for _, p := range replicas {
			g.Expect(p.Exited()).NotTo(BeClosed(), "%s exited: %v", p.Name(), p.Err())
			if acquiredLease(p) {
				leaders = append(leaders, p.Name())
				leader = p
			} else {
				standby = p
			}
		}
		g.Expect(leaders).To(HaveLen(1), "exactly one replica must lead")
	}, leaderElectionTimeout, framework.AutoscalerPoll).Should(Succeed())
	return leader, standby
}

// acquiredLease says whether the replica has logged that it became the
// leader.
func acquiredLease(p *localstack.Process) bool {
	log, err := os.ReadFile(p.LogPath())
	Expect(err).NotTo(HaveOccurred())
	return strings.Contains(string(log), acquiredLeaseLog)
}

// lease reads the replicas' Lease.
func lease(ctx context.Context, g Gomega, mgmt client.Client, key client.ObjectKey) *coordinationv1.Lease {
	current := &coordinationv1.Lease{}
	g.Expect(mgmt.Get(ctx, key, current)).To(Succeed())
	return current
}

// managerServiceAccount is the ServiceAccount InstallManagerRBAC created
// from config/default: the leader election Role grants Leases in its
// namespace.
func managerServiceAccount(ctx context.Context, mgmt client.Client) client.ObjectKey {
	GinkgoHelper()
	accounts := &corev1.ServiceAccountList{}
	Expect(mgmt.List(ctx, accounts, client.MatchingLabels{"app.kubernetes.io/name": "capi-autoscaler"})).To(Succeed())
	Expect(accounts.Items).To(HaveLen(1), "the manager's ServiceAccount")
	return client.ObjectKeyFromObject(&accounts.Items[0])
}

func leaseTimings(args []string) string {
	if len(args) == 0 {
		return "defaults (15s/10s/2s)"
	}
	return strings.Join(args, " ")
}
