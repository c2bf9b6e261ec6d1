//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// WatchInvariantsInput is the input of WatchInvariants.
type WatchInvariantsInput struct {
	Stack *localstack.Stack
	// Cluster is the Cluster whose node groups and Machines are watched.
	Cluster *clusterv1.Cluster
}

// Invariants watches, from the moment WatchInvariants returns, what a
// cluster autoscaler must never do whatever fails around it, and records
// every violation it sees:
//   - a MachineDeployment's replicas outside its [min, max] size;
//   - a Machine deleted that the autoscaler did not choose: it carries no
//     delete-machine mark when Cluster API starts deleting it.
//
// It also records each MachineDeployment's replicas as they change, for
// the specs that check a trajectory (e.g. that no group was scaled twice).
type Invariants struct {
	mu         sync.Mutex
	violations []string
	// events counts what the watches saw, to show they saw something.
	events int
	// replicas are the replicas each MachineDeployment had, by name.
	replicas map[string][]ReplicasSeen
}

// ReplicasSeen is a MachineDeployment's replicas from the moment the watch
// saw them.
type ReplicasSeen struct {
	Replicas int32
	Seen     time.Time
}

// WatchInvariants starts watching the Cluster's MachineDeployments and
// Machines, and stops when the spec ends: register it after the Cluster's
// clean-up, whose deletion of every Machine is no violation.
func WatchInvariants(ctx context.Context, input WatchInvariantsInput) *Invariants {
	informers, err := cache.New(input.Stack.Management.Config, cache.Options{
		Scheme:            localstack.Scheme,
		DefaultNamespaces: map[string]cache.Config{input.Cluster.Namespace: {}},
	})
	Expect(err).NotTo(HaveOccurred())
	inv := &Invariants{replicas: map[string][]ReplicasSeen{}}
	watch := func(obj client.Object, check func(obj any)) {
		informer, err := informers.GetInformer(ctx, obj)
		Expect(err).NotTo(HaveOccurred())
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    check,
			UpdateFunc: func(_, obj any) { check(obj) },
		})
		Expect(err).NotTo(HaveOccurred())
	}
	watch(&clusterv1.MachineDeployment{}, func(obj any) {
		md, ok := obj.(*clusterv1.MachineDeployment)
		if !ok || md.Spec.ClusterName != input.Cluster.Name {
			return
		}
		inv.recordReplicas(md)
		inv.checkReplicas(md)
	})
	watch(&clusterv1.Machine{}, func(obj any) {
		machine, ok := obj.(*clusterv1.Machine)
		if !ok || machine.Spec.ClusterName != input.Cluster.Name {
			return
		}
		inv.checkDeletion(machine)
	})

	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer GinkgoRecover()
		Expect(informers.Start(watchCtx)).To(Succeed())
	}()
	DeferCleanup(func() {
		stop()
		<-done
	})
	Expect(informers.WaitForCacheSync(ctx)).To(BeTrue(), "the invariant watches did not sync")
	return inv
}

func (inv *Invariants) checkReplicas(md *clusterv1.MachineDeployment) {
	group, err := scalable.New(md, scalable.Options{Cluster: &clusterv1.Cluster{}})
	if err != nil {
		// Not a node group (or a bad annotation the spec chose): no
		// bounds to hold.
		inv.record("")
		return
	}
	replicas := int(ptr.Deref(md.Spec.Replicas, 0))
	if replicas < group.MinSize() || replicas > group.MaxSize() {
		inv.record(fmt.Sprintf("MachineDeployment %s has %d replicas, outside [%d, %d] (resourceVersion %s)",
			klog.KObj(md), replicas, group.MinSize(), group.MaxSize(), md.ResourceVersion))
		return
	}
	inv.record("")
}

func (inv *Invariants) checkDeletion(machine *clusterv1.Machine) {
	if machine.DeletionTimestamp != nil {
		if _, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]; !marked {
			inv.record(fmt.Sprintf("Machine %s is being deleted without the autoscaler's delete-machine mark", klog.KObj(machine)))
			return
		}
	}
	inv.record("")
}

// recordReplicas adds the MachineDeployment's replicas to its trajectory
// when they changed.
func (inv *Invariants) recordReplicas(md *clusterv1.MachineDeployment) {
	replicas := ptr.Deref(md.Spec.Replicas, 0)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	trajectory := inv.replicas[md.Name]
	if len(trajectory) == 0 || trajectory[len(trajectory)-1].Replicas != replicas {
		inv.replicas[md.Name] = append(trajectory, ReplicasSeen{Replicas: replicas, Seen: time.Now()})
	}
}

// Replicas is the trajectory of the MachineDeployment's replicas since the
// watch started: its first value, then each change.
func (inv *Invariants) Replicas(md *clusterv1.MachineDeployment) []ReplicasSeen {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return slices.Clone(inv.replicas[md.Name])
}

// record counts one watch event, and a violation when it is not empty.
func (inv *Invariants) record(violation string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.events++
	if violation != "" {
		inv.violations = append(inv.violations, violation)
	}
}

// Events is how many watch events were checked.
func (inv *Invariants) Events() int {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.events
}

// Violations are the violations seen so far.
func (inv *Invariants) Violations() []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return append([]string(nil), inv.violations...)
}

// ExpectNoViolations fails when a violation was seen.
func (inv *Invariants) ExpectNoViolations() {
	GinkgoHelper()
	Expect(inv.Events()).To(BeNumerically(">", 0), "the invariant watches saw nothing")
	Expect(inv.Violations()).To(BeEmpty())
}

// ExpectNothingLeftBehindInput is the input of ExpectNothingLeftBehind.
type ExpectNothingLeftBehindInput struct {
	Stack   *localstack.Stack
	Cluster *clusterv1.Cluster
}

// ExpectNothingLeftBehind waits until the autoscaler has cleaned up after
// itself: no live Machine of the Cluster keeps a delete-machine mark and no
// Node of it keeps the deletion taint. Call it once whatever disturbed the
// autoscaler has stopped.
func ExpectNothingLeftBehind(ctx context.Context, input ExpectNothingLeftBehindInput) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(input.Stack.Management.Client.List(ctx, machines, client.InNamespace(input.Cluster.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: input.Cluster.Name})).To(Succeed())
		for _, m := range machines.Items {
			if m.DeletionTimestamp == nil {
				g.Expect(m.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "Machine %s", m.Name)
			}
		}
		for _, node := range ClusterNodes(g, input.Stack.Workload.Client, input.Cluster) {
			g.Expect(HasDeletionTaint(&node)).To(BeFalse(), "Node %s", node.Name)
		}
	}, ScaleDownTimeout, AutoscalerPoll).Should(Succeed(), "the autoscaler left marks or taints behind")
}

// ExpectManagerHealthy fails when the manager has exited or has logged a
// panic, even one it recovered from.
func ExpectManagerHealthy(manager *localstack.Process) {
	GinkgoHelper()
	Expect(manager.Exited()).NotTo(BeClosed(), "the manager %s exited: %v", manager.Name(), manager.Err())
	log, err := os.ReadFile(manager.LogPath())
	Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(log), "\n") {
		Expect(line).NotTo(Or(HavePrefix("panic:"), ContainSubstring("Observed a panic")), "the manager %s panicked", manager.Name())
	}
}
