package soak

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// Checker checks a soak's invariants over its whole history: the
// invariant watcher's (no Machine deleted without the autoscaler's mark
// but those the soak deleted by hand, rolled out or had a
// MachineHealthCheck remediate, replicas within bounds, no node removed by
// the autoscaler with a pod it did not evict) after every step, and, once
// the soak is quiet, that every pod that fits runs, no ProvisioningRequest
// is half-provisioned and nothing of the autoscaler's is left. After every
// step too, from the managers' logs, that at most one engine of the
// Active ClusterAutoscaler acts at any time, only in the holder of the
// Cluster's Lease, and that no manager panicked or exited unbidden; and
// that the DryRun ClusterAutoscaler changed nothing: no write of its
// engine but its Would* events, no mark, taint or cordon of its stamp, no
// event of an action. Each violation names the seed, when it was seen, the
// operations before it and the objects.
type Checker struct {
	Seed       uint64
	History    *History
	Invariants *framework.Invariants
	// Manager is the running manager, which must not exit.
	Manager func() *localstack.Process
	// Env is the soak's: its managers, and its DryRun ClusterAutoscalers.
	Env *Env
	// checked are the watcher's violations already checked.
	checked int
	// dryRunWrites are the writes of the DryRun ClusterAutoscaler's
	// engines, once Watch was called.
	dryRunWrites *dryRunWrites
}

// Watch starts watching the fault proxies for writes of the DryRun
// ClusterAutoscaler's engines, until the spec ends.
func (c *Checker) Watch() {
	c.dryRunWrites = &dryRunWrites{trial: types.NamespacedName{Namespace: c.Env.Namespace, Name: c.Env.DryRunName()}}
	DeferCleanup(c.Env.observe(c.dryRunWrites.observe))
}

// historyShown is how many operations a violation shows before it.
const historyShown = 15

// Check fails the spec at the first violation the watcher saw since the
// last check, once the manager has exited unless the soak killed it, or
// at the first violation of the managers' logs or of the DryRun
// ClusterAutoscaler.
func (c *Checker) Check(ctx context.Context) {
	GinkgoHelper()
	select {
	case <-c.Manager().Exited():
		// An armed crash may have killed it, from the fault proxies'
		// goroutine, since Run last started it again.
		if c.Env == nil || !c.Env.Managers.EndedBySoak(c.Manager()) {
			c.Fail(time.Now(), fmt.Sprintf("the manager %s exited: %v", c.Manager().Name(), c.Manager().Err()))
		}
	default:
	}
	violations := c.Invariants.TimedViolations()
	if len(violations) > c.checked {
		first := violations[c.checked]
		c.checked = len(violations)
		c.Fail(first.At, first.Message)
	}
	if c.Env == nil {
		return
	}
	now := time.Now()
	histories, err := c.Env.Managers.histories()
	Expect(err).NotTo(HaveOccurred(), "reading the managers' logs")
	if violations := managerViolations(histories, now); len(violations) > 0 {
		c.Fail(now, violations[0])
	}
	if c.dryRunWrites != nil {
		if writes := c.dryRunWrites.take(); len(writes) > 0 {
			c.Fail(writes[0].At, writes[0].Message)
		}
	}
	stamps, err := c.checkDryRun(ctx)
	if err != nil {
		// A fault of the API server the soak reads through is no
		// violation: the next check sees.
		GinkgoWriter.Printf("checking the DryRun ClusterAutoscaler: %v\n", err)
	} else if len(stamps) > 0 {
		c.Fail(now, stamps[0])
	}
}

// Fail fails the spec with a violation seen at a time.
func (c *Checker) Fail(at time.Time, violation string) {
	GinkgoHelper()
	Fail(c.Report(at, violation))
}

// Report shows a violation with the seed and the operations before it.
func (c *Checker) Report(at time.Time, violation string) string {
	return fmt.Sprintf("soak seed %d: at %s, %s\nreplay with -e2e.soak.seed=%d (make soak SEED=%d)\nthe last operations before it:\n%s",
		c.Seed, at.Format("15:04:05.000"), violation, c.Seed, c.Seed, Format(c.History.Before(at, historyShown)))
}

// ExpectQuiescenceInput is the input of ExpectQuiescence.
type ExpectQuiescenceInput struct {
	Env *Env
	// Timeout bounds how long the Cluster may take to settle.
	Timeout time.Duration
}

// ExpectQuiescence waits until the soak's Cluster has settled once the
// operations are over and their effects undone: every pod that fits some
// group's template (FitsLabel) is Running, every group has as many
// Machines as replicas, none being deleted, each Running with a Ready
// Node, and no ProvisioningRequest is left half-provisioned. It returns
// how long that took.
func (c *Checker) ExpectQuiescence(ctx context.Context, input ExpectQuiescenceInput) time.Duration {
	GinkgoHelper()
	env := input.Env
	start := time.Now()
	Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(env.Stack.Workload.Client.List(ctx, pods, client.InNamespace(env.Namespace), client.MatchingLabels{FitsLabel: "true"})).To(Succeed())
		var notRunning []string
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodRunning {
				notRunning = append(notRunning, fmt.Sprintf("%s (%s on %q)", klog.KObj(&pod), pod.Status.Phase, pod.Spec.NodeName))
			}
		}
		g.Expect(notRunning).To(BeEmpty(), "pods that fit a group do not run")
		for _, group := range env.Groups {
			expectGroupSettled(ctx, g, env, group)
		}
		expectRequestsSettled(ctx, g, env)
	}, input.Timeout, framework.AutoscalerPoll).Should(Succeed(), func() string {
		return c.Report(time.Now(), fmt.Sprintf("the Cluster did not settle within %s of the last operation", input.Timeout))
	})
	return time.Since(start)
}

// expectGroupSettled expects the group to have as many Machines as
// replicas, none being deleted, each Running with a Ready Node.
func expectGroupSettled(ctx context.Context, g Gomega, env *Env, group client.Object) {
	replicas := framework.Replicas(ctx, g, env.Stack.Management.Client, group)
	machines := framework.MachinesOf(ctx, g, env.Stack.Management.Client, group)
	g.Expect(machines).To(HaveLen(int(replicas)), "%s has %d replicas", framework.NodeGroupID(group), replicas)
	for _, m := range machines {
		g.Expect(m.DeletionTimestamp).To(BeNil(), "Machine %s is being deleted", m.Name)
		g.Expect(m.Status.Phase).To(Equal(string(clusterv1.MachinePhaseRunning)), "Machine %s", m.Name)
		g.Expect(m.Status.NodeRef.IsDefined()).To(BeTrue(), "Machine %s has no Node", m.Name)
		node := &corev1.Node{}
		g.Expect(env.Stack.Workload.Client.Get(ctx, client.ObjectKey{Name: m.Status.NodeRef.Name}, node)).To(Succeed())
		g.Expect(nodefacts.KubeletReady(node)).To(BeTrue(), "Node %s is not Ready", node.Name)
	}
}

// expectRequestsSettled expects no ProvisioningRequest of the soak left
// half-provisioned: none with an atomic scale-up in progress (in its
// status or its Provisioned condition); an atomic one Provisioned, which
// the engine answers once every node of its scale-up is up and all its
// pods fit, or Failed, which it answers once the nodes it added are
// removed (the groups settled shows they are); a check-capacity one
// answered. Booked capacity is not checked as free room: the scheduler
// may place later pods in it, as upstream, and the engine keeps it only
// from scale-down.
func expectRequestsSettled(ctx context.Context, g Gomega, env *Env) {
	requests := &provisioningv1.ProvisioningRequestList{}
	g.Expect(env.Stack.Workload.Client.List(ctx, requests, client.InNamespace(env.Namespace))).To(Succeed())
	for _, r := range requests.Items {
		conditions := r.Status.Conditions
		g.Expect(r.Status.ProvisioningClassDetails).NotTo(HaveKey(provisioningv1.ScaleUpDetail), "ProvisioningRequest %s keeps a scale-up in progress: %v", r.Name, conditions)
		if meta.IsStatusConditionTrue(conditions, provisioningv1.FailedCondition) || meta.IsStatusConditionTrue(conditions, provisioningv1.BookingExpiredCondition) {
			continue
		}
		provisioned := meta.FindStatusCondition(conditions, provisioningv1.ProvisionedCondition)
		g.Expect(provisioned).NotTo(BeNil(), "ProvisioningRequest %s is not answered: %v", r.Name, conditions)
		g.Expect(provisioned.Reason).NotTo(Equal(provisioningv1.ScaleUpInProgressReason), "ProvisioningRequest %s keeps a scale-up in progress", r.Name)
		if r.Spec.ProvisioningClassName == provisioningv1.BestEffortAtomicScaleUpProvisioningClass {
			g.Expect(provisioned.Status).To(Equal(metav1.ConditionTrue), "atomic ProvisioningRequest %s is neither Provisioned nor Failed: %v", r.Name, conditions)
		}
	}
}

// Summary shows the operations applied by kind, in the generator's order.
func Summary(history *History) string {
	counts := history.Counts()
	var parts []string
	total := 0
	for _, kind := range Kinds() {
		if n := counts[kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", kind, n))
			total += n
		}
	}
	failed, skipped := history.Failed()
	return fmt.Sprintf("%d operations (%s); %d failed, %d found nothing to act on; %d managers killed at a write", total, strings.Join(parts, ", "), failed, skipped, history.Crashes())
}
