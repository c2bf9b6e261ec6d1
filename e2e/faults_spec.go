//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// FaultsSpecInput is the input of FaultsSpec.
type FaultsSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte

	// Manager returns the running autoscaler manager, which must not exit
	// or panic.
	Manager func() *localstack.Process

	// Faults are injected into every request of the autoscaler, to both
	// API servers, while the workload scales up and down.
	Faults faultproxy.Faults

	// Outage, when set, fails every request of the autoscaler for this
	// long once the pods that need new nodes are pending.
	Outage time.Duration

	// Cycles is how many times the workload scales up and down; 1 when 0.
	Cycles int
}

// FaultsSpec scales a workload up and down while the API servers fail
// the autoscaler's requests, and checks what users trust a cluster
// autoscaler with: the replicas never leave [min, max], no Machine goes
// that the autoscaler did not choose, every pending pod gets a node, no
// mark or taint is left once the faults stop, and the manager never
// panics. The figures go to the report and to faults.txt in the stack's
// log directory.
func FaultsSpec(ctx context.Context, inputGetter func() FaultsSpecInput) {
	var input FaultsSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "FaultsSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "FaultsSpec needs the manager")
		Expect(input.Faults.Rate > 0 || input.Outage > 0).To(BeTrue(), "FaultsSpec needs faults to inject")
	})

	It("loses nothing and deletes nothing wrong while the API servers fail", func() {
		mgmt := input.Stack.Management.Client
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "faults")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		md, _ := framework.CreateWorkerGroup(ctx, framework.CreateWorkerGroupInput{Stack: input.Stack, Cluster: cluster, Nodes: 1, MaxSize: 3})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster})

		proxies := framework.ProxiesOf(input.Stack)
		before := statsOf(proxies)
		DeferCleanup(func() { setFaults(proxies, faultproxy.Faults{}) })
		By(fmt.Sprintf("Failing %.0f%% of the autoscaler's requests (%v)", input.Faults.Rate*100, faultKinds(input.Faults)))
		setFaults(proxies, input.Faults)

		cycles := max(input.Cycles, 1)
		for cycle := 1; cycle <= cycles; cycle++ {
			cycleInput := framework.ScaleCycleInput{
				Stack: input.Stack, Namespace: namespace, Cluster: cluster, Group: md,
				Name: fmt.Sprintf("cycle-%d-of-%d", cycle, cycles),
			}
			if input.Outage > 0 {
				cycleInput.WhilePending = func() {
					By(fmt.Sprintf("Failing every request of the autoscaler for %s: nothing may change", input.Outage))
					setFaults(proxies, faultproxy.Faults{Rate: 1, Kinds: []faultproxy.Fault{
						faultproxy.TooManyRequests, faultproxy.InternalError, faultproxy.ServiceUnavailable, faultproxy.Timeout, faultproxy.Conflict,
					}, Hold: 2 * time.Second})
					Consistently(func(g Gomega) {
						g.Expect(framework.Replicas(ctx, g, mgmt, md)).To(BeEquivalentTo(1))
					}, input.Outage, framework.AutoscalerPoll).Should(Succeed(), "the group changed while every write failed")
					setFaults(proxies, input.Faults)
				}
			}
			framework.ScaleCycle(ctx, cycleInput)
		}

		By("Stopping the faults: nothing is left behind")
		setFaults(proxies, faultproxy.Faults{})
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(input.Manager())

		after := statsOf(proxies)
		figures := fmt.Sprintf("faults %s, rate %.0f%%, outage %s, cycles %d: %d requests of the autoscaler, %d faults injected %v, %d invariant checks, %d violations",
			input.Stack.Topology(), input.Faults.Rate*100, input.Outage, cycles,
			after.Requests-before.Requests, after.Injected()-before.Injected(), faultCounts(before, after),
			invariants.Events(), len(invariants.Violations()))
		AddReportEntry("faults", figures)
		framework.AppendFigures(input.Stack, "faults.txt", figures)
		framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
	})
}

func setFaults(proxies []*faultproxy.Proxy, faults faultproxy.Faults) {
	for _, proxy := range proxies {
		proxy.SetFaults(faults)
	}
}

// statsOf adds up the proxies' counts.
func statsOf(proxies []*faultproxy.Proxy) faultproxy.Stats {
	total := faultproxy.Stats{Faults: map[faultproxy.Fault]int{}}
	for _, proxy := range proxies {
		stats := proxy.Stats()
		total.Requests += stats.Requests
		for fault, n := range stats.Faults {
			total.Faults[fault] += n
		}
	}
	return total
}

// faultCounts are the faults injected between two counts, by kind.
func faultCounts(before, after faultproxy.Stats) map[faultproxy.Fault]int {
	counts := map[faultproxy.Fault]int{}
	for fault, n := range after.Faults {
		if d := n - before.Faults[fault]; d > 0 {
			counts[fault] = d
		}
	}
	return counts
}

func faultKinds(faults faultproxy.Faults) []faultproxy.Fault {
	if len(faults.Kinds) == 0 {
		return faultproxy.AllFaults
	}
	return faults.Kinds
}
