//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/soak"
)

// SoakSpecInput is the input of SoakSpec.
type SoakSpecInput struct {
	Stack *localstack.Stack
	// WorkloadKubeconfig is what the spec's ClusterAutoscalers reach the
	// workload cluster with (framework.CreateSimulatedClusterInput).
	WorkloadKubeconfig []byte
	// Manager returns the running manager; the soak kills it and starts
	// its binary again with ManagerArgs, and tells Restarted. Second
	// managers run the same binary with the same arguments.
	Manager     func() *localstack.Process
	ManagerArgs []string
	Restarted   func(*localstack.Process)

	// Seed of the operations; the same seed replays the same sequence.
	Seed uint64
	// Duration is how long operations are applied.
	Duration time.Duration
	// MinWait and MaxWait bound the pause before each operation; MaxFor
	// bounds how long a pause, faults or removed bounds last.
	MinWait, MaxWait, MaxFor time.Duration
}

// soakQuiescenceTimeout bounds how long the Cluster takes to settle after
// the last operation: a group backing off after failed scale-ups (at
// most a minute with FastClusterAutoscalerSpec), then scale-ups and a
// rollout, on a busy machine.
const soakQuiescenceTimeout = 5 * time.Minute

// SoakSpec applies, from a seed, the operations of e2e/framework/soak to a
// Cluster of two node groups (soak.GroupShapes) with an Active
// ClusterAutoscaler: workloads scaled, bursts with anti-affinity and
// spread, pods that fit nowhere, pods deleted, PDBs; replicas written by
// another client, bounds changed or removed, the group or the Cluster
// paused, Machines and Nodes deleted by hand, rollouts, a
// MachineHealthCheck remediating a NotReady Node's Machine, a kubelet down
// with a pod stuck Terminating; a DryRun ClusterAutoscaler beside the
// Active one, its configuration changed, the workload kubeconfig Secret
// rewritten, a CapacityBuffer resized, ProvisioningRequests of both
// classes created and deleted; faults through both proxies, the workload
// API server unreachable, and the manager killed and started again; a
// second manager beside the suite's for a while, the holder of the
// Cluster's Lease killed while both run, the acting manager killed right
// after one of its writes. The invariant watcher (evictions included; it
// accepts the deletions of Machines a rollout or a remediation removes),
// the managers' logs (at most one engine acting, only in the Lease's
// holder, no panic) and the DryRun ClusterAutoscaler (nothing written,
// stamped or recorded but Would* events) are checked after every
// operation; once the operations are over and undone, every pod that fits
// a group must run, each group settle with Ready Nodes, no
// ProvisioningRequest be left half-provisioned, nothing of the
// autoscaler's be left, and the manager be healthy. A violation names the
// seed and the operations before it. The figures go to the report and to soak.txt in the stack's
// log directory.
func SoakSpec(ctx context.Context, inputGetter func() SoakSpecInput) {
	var input SoakSpecInput

	BeforeEach(func() {
		input = inputGetter()
		Expect(input.Stack).NotTo(BeNil(), "SoakSpec needs a stack")
		Expect(input.Manager).NotTo(BeNil(), "SoakSpec needs the manager")
		Expect(input.Restarted).NotTo(BeNil(), "SoakSpec needs to tell who restarted the manager")
		Expect(input.Duration).To(BeNumerically(">", 0), "SoakSpec needs a duration")
	})

	It("keeps every invariant while operations, features and faults interleave", func() {
		mgmt, workload := input.Stack.Management.Client, input.Stack.Workload.Client
		By(fmt.Sprintf("Soaking seed %d for %s (replay: -e2e.soak.seed=%d)", input.Seed, input.Duration, input.Seed))
		AddReportEntry("soak seed", input.Seed)
		namespace := framework.CreateSpecNamespace(ctx, input.Stack, "soak")
		cluster := framework.CreateSimulatedCluster(ctx, framework.CreateSimulatedClusterInput{Client: mgmt, Namespace: namespace.Name, Name: namespace.Name, WorkloadKubeconfig: input.WorkloadKubeconfig})
		DeferCleanup(func() { framework.DeleteCluster(ctx, mgmt, cluster) })

		By("Creating the node groups of the soak, one node each")
		groups := make([]*clusterv1.MachineDeployment, 0, len(soak.GroupShapes))
		for _, shape := range soak.GroupShapes {
			groups = append(groups, framework.CreateNodeGroup(ctx, framework.CreateNodeGroupInput{
				Client: mgmt, Cluster: cluster, Name: shape.Name,
				Replicas:    ptr.To[int32](1),
				Annotations: framework.SizeAnnotations(shape.MinSize, shape.MaxSize),
				Machine:     framework.SimMachine(shape.CPU),
				Labels:      map[string]string{framework.ClusterLabel: cluster.Name},
			}))
		}
		for _, md := range groups {
			framework.WaitForNodeGroupNodes(ctx, framework.WaitForNodeGroupNodesInput{Management: mgmt, Workload: workload, Group: md, Count: 1})
		}
		bufferTemplate := soak.BufferPodTemplate(namespace.Name, cluster.Name)
		Expect(workload.Create(ctx, bufferTemplate)).To(Succeed())

		invariants := framework.WatchInvariants(ctx, framework.WatchInvariantsInput{Stack: input.Stack, Cluster: cluster, AcceptRollouts: true, AcceptRemediation: true, CheckEvictions: true})
		ca := framework.CreateClusterAutoscaler(ctx, framework.CreateClusterAutoscalerInput{Client: mgmt, Cluster: cluster, Spec: framework.FastClusterAutoscalerSpec(cluster.Name)})
		latencies := soak.WatchPodLatencies(ctx, input.Stack, namespace.Name)

		managers := &soak.Managers{ClusterAutoscaler: client.ObjectKeyFromObject(ca), Cluster: cluster.Name}
		managers.Add(input.Manager())
		env := &soak.Env{
			Stack: input.Stack, Namespace: namespace.Name, Cluster: cluster, Groups: groups,
			ClusterAutoscaler: ca, BufferTemplate: bufferTemplate.Name, Invariants: invariants,
			Manager: input.Manager, ManagerArgs: input.ManagerArgs, Managers: managers,
			StartManager: func(ctx context.Context, name string) error {
				p, err := input.Stack.StartProcess(ctx, name, input.Manager().Binary(), input.ManagerArgs...)
				if err == nil {
					input.Restarted(p)
					managers.Add(p)
				}
				return err
			},
		}
		trial := &autoscalingv1alpha1.ClusterAutoscaler{}
		trial.Namespace, trial.Name = namespace.Name, env.DryRunName()
		DeferCleanup(func() {
			framework.DeleteClusterAutoscaler(ctx, mgmt, trial)
			framework.DeleteClusterAutoscaler(ctx, mgmt, ca)
		})
		// Should the spec fail in the middle of a restart, of faults or of
		// a kubelet down, the next specs get a manager, no faults and the
		// soak's namespace deleted.
		DeferCleanup(func() {
			env.StopFaults()
			Expect(env.ReleaseStuckPods(ctx)).To(Succeed())
			Expect(env.StopObserving()).To(Succeed())
			select {
			case <-input.Manager().Exited():
				Expect(env.StartManager(ctx, "capi-autoscaler-soak-after-failure")).To(Succeed())
			default:
			}
		})

		proxies := framework.ProxiesOf(input.Stack)
		before := statsOf(proxies)
		checker := &soak.Checker{Seed: input.Seed, History: &soak.History{Seed: input.Seed}, Invariants: invariants, Manager: input.Manager, Env: env}
		checker.Watch()
		started := time.Now()
		history := soak.Run(ctx, soak.RunInput{
			Env: env, Checker: checker, Duration: input.Duration,
			Generator: soak.GeneratorOptions{Seed: input.Seed, MinWait: input.MinWait, MaxWait: input.MaxWait, MaxFor: input.MaxFor},
		})
		soaked := time.Since(started)
		AddReportEntry("soak history", soak.Format(history.Entries()))
		faults := statsOf(proxies)

		By("Waiting for the Cluster to settle: every pod that fits runs, every group has its Ready Nodes")
		quiescence := checker.ExpectQuiescence(ctx, soak.ExpectQuiescenceInput{Env: env, Timeout: soakQuiescenceTimeout})
		framework.ExpectNothingLeftBehind(ctx, framework.ExpectNothingLeftBehindInput{Stack: input.Stack, Cluster: cluster})
		checker.Check(ctx)
		invariants.ExpectNoViolations()
		framework.ExpectManagerHealthy(input.Manager())
		expectReady(ctx, mgmt, ca)

		waited := latencies.Waited()
		figures := fmt.Sprintf("soak %s, seed %d: %s of operations; %s; %d requests of the autoscaler, %d faults injected %v; %d invariant checks, %d violations, %d Machines remediated by a MachineHealthCheck; %d pods waited for a node: p50 %s, p99 %s, max %s; settled %s after the last operation",
			input.Stack.Topology(), input.Seed, soaked.Round(time.Second), soak.Summary(history),
			faults.Requests-before.Requests, faults.Injected()-before.Injected(), faultCounts(before, faults),
			invariants.Events(), len(invariants.Violations()), len(invariants.Accepted(framework.DeletedByRemediation)),
			len(waited), framework.Percentile(waited, 50).Round(100*time.Millisecond), framework.Percentile(waited, 99).Round(100*time.Millisecond),
			framework.Percentile(waited, 100).Round(100*time.Millisecond), quiescence.Round(time.Second))
		AddReportEntry("soak", figures)
		framework.AppendFigures(input.Stack, "soak.txt", figures)
	})
}
