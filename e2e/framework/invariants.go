package framework

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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/minimums"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// WatchInvariantsInput is the input of WatchInvariants.
type WatchInvariantsInput struct {
	Stack *localstack.Stack
	// Cluster is the Cluster whose node groups and Machines are watched.
	Cluster *clusterv1.Cluster
	// AcceptRollouts accepts the deletion of an unmarked Machine whose
	// MachineSet a newer MachineSet of the same MachineDeployment
	// replaces: a rollout the spec started removes the old Machines.
	AcceptRollouts bool
	// AcceptRemediation accepts the deletion of an unmarked Machine that a
	// MachineHealthCheck found unhealthy: its owner remediates it.
	AcceptRemediation bool
	// CheckEvictions checks that the autoscaler removes no node with a pod
	// it did not evict (UnevictedPods).
	CheckEvictions bool
	// ScheduledMinimums are the spec.scheduledMinimums of the Cluster's
	// ClusterAutoscaler. A group they select may have fewer replicas than
	// its min-size annotation (asleep, or on its way back), but is never
	// lowered below its effective minimum. A window without a lead time is
	// taken with none, the side that accepts more.
	ScheduledMinimums []autoscalingv1alpha1.ScheduledMinimum
}

// What removed an unmarked Machine, when the spec accepts it.
const (
	DeletedByRollout     = "rollout"
	DeletedByRemediation = "remediation"
	// DeletedByHand is a Machine the spec deletes itself, or whose Node it
	// deletes (AcceptDeletion).
	DeletedByHand = "by hand"
)

// Invariants watches, from the moment WatchInvariants returns, what a
// cluster autoscaler must never do whatever fails around it, and records
// every violation it sees:
//   - a MachineDeployment's replicas outside its [min, max] size, or, for
//     a group that scheduled minimums select, above its max or lowered
//     below the minimum in effect;
//   - a Machine deleted that the autoscaler did not choose: it carries no
//     delete-machine mark when Cluster API starts deleting it (unless the
//     spec accepts rollouts and a newer MachineSet replaces the Machine's,
//     or accepts remediation and a MachineHealthCheck found it unhealthy);
//   - with CheckEvictions, a node the autoscaler removes with a pod it did
//     not evict (UnevictedPods).
//
// It also records each MachineDeployment's replicas as they change, for
// the specs that check a trajectory (e.g. that no group was scaled twice).
type Invariants struct {
	mu         sync.Mutex
	violations []Violation
	// acceptRollouts and machineSets tell the Machines a rollout removes.
	acceptRollouts    bool
	machineSets       func() []clusterv1.MachineSet
	acceptRemediation bool
	// accepted are the unmarked Machines deleted for a cause the spec
	// accepts, by cause.
	accepted map[string][]string
	// byHand are the Machines the spec said it deletes, with the cause.
	byHand map[string]string
	// events counts what the watches saw, to show they saw something.
	events int
	// replicas are the replicas each MachineDeployment had, by name.
	replicas map[string][]ReplicasSeen
	// podsOn lists the pods bound to a node of the workload cluster, with
	// CheckEvictions; evictionsChecked are the Machines whose node's pods
	// were checked.
	podsOn           func(node string) ([]corev1.Pod, error)
	evictionsChecked map[string]bool
	// minimums are the scheduled minimums, read.
	minimums *minimums.Set
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
	inv := &Invariants{
		replicas:       map[string][]ReplicasSeen{},
		acceptRollouts: input.AcceptRollouts, acceptRemediation: input.AcceptRemediation,
		accepted: map[string][]string{}, byHand: map[string]string{},
		evictionsChecked: map[string]bool{},
		minimums:         minimums.New(engineconfig.ScheduledMinimums(input.ScheduledMinimums)),
	}
	if input.CheckEvictions {
		inv.podsOn = func(node string) ([]corev1.Pod, error) {
			listCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			pods := &corev1.PodList{}
			err := input.Stack.Workload.Client.List(listCtx, pods, client.MatchingFields{"spec.nodeName": node})
			return pods.Items, err
		}
	}
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
		inv.checkReplicas(md, inv.recordReplicas(md))
	})
	if input.AcceptRollouts {
		watch(&clusterv1.MachineSet{}, func(any) {})
		inv.machineSets = func() []clusterv1.MachineSet {
			list := &clusterv1.MachineSetList{}
			if err := informers.List(ctx, list, client.InNamespace(input.Cluster.Namespace)); err != nil {
				return nil
			}
			return list.Items
		}
	}
	watch(&clusterv1.Machine{}, func(obj any) {
		machine, ok := obj.(*clusterv1.Machine)
		if !ok || machine.Spec.ClusterName != input.Cluster.Name {
			return
		}
		inv.checkDeletion(machine)
	})

	StartInformers(ctx, informers, "the invariant watches")
	return inv
}

func (inv *Invariants) checkReplicas(md *clusterv1.MachineDeployment, previous *int32) {
	group, err := scalable.New(md, scalable.Options{Cluster: &clusterv1.Cluster{}})
	if err != nil {
		// Not a node group (or a bad annotation the spec chose): no
		// bounds to hold.
		inv.record("")
		return
	}
	replicas := int(ptr.Deref(md.Spec.Replicas, 0))
	minimum, scheduled := inv.scheduledMinimum(md, group)
	switch {
	case replicas > group.MaxSize() || !scheduled && replicas < group.MinSize():
		inv.record(fmt.Sprintf("MachineDeployment %s has %d replicas, outside [%d, %d] (resourceVersion %s)",
			klog.KObj(md), replicas, group.MinSize(), group.MaxSize(), md.ResourceVersion))
	case scheduled && previous != nil && replicas < int(*previous) && replicas < minimum:
		inv.record(fmt.Sprintf("MachineDeployment %s was lowered from %d to %d replicas, below the minimum %d its scheduled minimums set (resourceVersion %s)",
			klog.KObj(md), *previous, replicas, minimum, md.ResourceVersion))
	default:
		inv.record("")
	}
}

// scheduledMinimumSlack is how long the watch accepts the minimum of a
// window after it ends: the engine decides in a loop before the watch
// sees the replicas it writes.
const scheduledMinimumSlack = 5 * time.Second

// scheduledMinimum is the lowest minimum that scheduled minimums set for
// the group over the last scheduledMinimumSlack, and whether any selects
// it.
func (inv *Invariants) scheduledMinimum(md *clusterv1.MachineDeployment, group scalable.Resource) (int, bool) {
	ref := minimums.Group{Name: md.Name, Labels: md.Labels}
	now := time.Now()
	atNow := inv.minimums.At(now).For(ref, group.MinSize(), group.MaxSize(), 0)
	before := inv.minimums.At(now.Add(-scheduledMinimumSlack)).For(ref, group.MinSize(), group.MaxSize(), 0)
	return min(atNow.MinSize, before.MinSize), atNow.Selected
}

func (inv *Invariants) checkDeletion(machine *clusterv1.Machine) {
	if machine.DeletionTimestamp == nil {
		inv.record("")
		return
	}
	if _, marked := machine.Annotations[clusterv1.DeleteMachineAnnotation]; marked {
		inv.record(inv.checkEvictions(machine))
		return
	}
	if cause := inv.acceptedCause(machine); cause != "" {
		inv.accept(cause, machine)
		inv.record("")
		return
	}
	inv.record(fmt.Sprintf("Machine %s is being deleted without the autoscaler's delete-machine mark", klog.KObj(machine)))
}

// checkEvictions checks, the first time the watch sees a Machine that
// the autoscaler marked being deleted, that every pod of its node was
// evicted or terminating (UnevictedPods). The Machine's deletion is when
// the autoscaler's removal takes effect: Cluster API drains the node
// next, and would evict what the autoscaler left. A Machine the spec
// deleted by hand is not the autoscaler's removal.
func (inv *Invariants) checkEvictions(machine *clusterv1.Machine) string {
	if inv.podsOn == nil || !scalable.IsMarkedByAutoscaler(machine) || !machine.Status.NodeRef.IsDefined() {
		return ""
	}
	inv.mu.Lock()
	_, byHand := inv.byHand[machine.Name]
	checked := inv.evictionsChecked[machine.Name]
	inv.evictionsChecked[machine.Name] = true
	inv.mu.Unlock()
	if byHand || checked {
		return ""
	}
	node := machine.Status.NodeRef.Name
	pods, err := inv.podsOn(node)
	if err != nil {
		GinkgoWriter.Printf("Not checking the evictions of Node %s: %v\n", node, err)
		return ""
	}
	if unevicted := UnevictedPods(pods, machine.DeletionTimestamp.Time); len(unevicted) > 0 {
		return fmt.Sprintf("Machine %s is being deleted, marked by the autoscaler, with pods on its Node %s that were neither evicted nor terminating: %s",
			klog.KObj(machine), node, strings.Join(unevicted, ", "))
	}
	return ""
}

// UnevictedPods are the pods of a node removed at a time that were
// neither evicted nor terminating by then: of those bound to it, not of a
// DaemonSet, not mirror pods, not finished, and whose deletion, if any,
// started after. An evicted pod is gone, or terminating since before
// its node's removal.
func UnevictedPods(pods []corev1.Pod, removed time.Time) []string {
	var unevicted []string
	for _, pod := range pods {
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		if owner := metav1.GetControllerOf(&pod); owner != nil && owner.Kind == "DaemonSet" {
			continue
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if pod.DeletionTimestamp != nil {
			grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
			if !pod.DeletionTimestamp.Add(-grace).After(removed) {
				continue
			}
		}
		unevicted = append(unevicted, klog.KObj(&pod).String())
	}
	return unevicted
}

// acceptedCause is the cause the spec accepts for the deletion of an
// unmarked Machine, if any.
func (inv *Invariants) acceptedCause(machine *clusterv1.Machine) string {
	inv.mu.Lock()
	_, byHand := inv.byHand[machine.Name]
	inv.mu.Unlock()
	switch {
	case byHand:
		return DeletedByHand
	case inv.acceptRemediation && RemediatedByItsOwner(machine):
		return DeletedByRemediation
	case inv.acceptRollouts && inv.rolledOutMachine(machine):
		return DeletedByRollout
	}
	return ""
}

// RemediatedByItsOwner tells whether the Machine's MachineSet deletes it
// to remediate it: it says so in OwnerRemediated before the deletion. A
// failed health check alone is not enough: the MachineHealthCheck may be
// gone, or its remediation deferred, while the condition stays.
func RemediatedByItsOwner(machine *clusterv1.Machine) bool {
	remediated := meta.FindStatusCondition(machine.Status.Conditions, clusterv1.MachineOwnerRemediatedCondition)
	return meta.IsStatusConditionFalse(machine.Status.Conditions, clusterv1.MachineHealthCheckSucceededCondition) &&
		remediated != nil && remediated.Status == metav1.ConditionFalse && remediated.Reason == clusterv1.MachineSetMachineRemediationMachineDeletingReason
}

// rolledOutMachine tells whether a newer MachineSet of the same
// MachineDeployment replaces the Machine's.
func (inv *Invariants) rolledOutMachine(machine *clusterv1.Machine) bool {
	owner := metav1.GetControllerOf(machine)
	deployment := machine.Labels[clusterv1.MachineDeploymentNameLabel]
	if owner == nil || owner.Kind != "MachineSet" || deployment == "" {
		return false
	}
	var ownerCreated *metav1.Time
	var newest metav1.Time
	for _, ms := range inv.machineSets() {
		if ms.Labels[clusterv1.MachineDeploymentNameLabel] != deployment {
			continue
		}
		if ms.UID == owner.UID {
			ownerCreated = ms.CreationTimestamp.DeepCopy()
		}
		if newest.Before(&ms.CreationTimestamp) {
			newest = ms.CreationTimestamp
		}
	}
	return ownerCreated != nil && ownerCreated.Before(&newest)
}

func (inv *Invariants) accept(cause string, machine *clusterv1.Machine) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !slices.Contains(inv.accepted[cause], machine.Name) {
		inv.accepted[cause] = append(inv.accepted[cause], machine.Name)
	}
}

// AcceptDeletion tells the watcher that the spec deletes the Machine
// itself (or its Node): call it before the deletion, which is then no
// violation.
func (inv *Invariants) AcceptDeletion(machine string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	inv.byHand[machine] = DeletedByHand
}

// Accepted are the unmarked Machines whose deletion was accepted for
// cause (DeletedByRollout, DeletedByRemediation).
func (inv *Invariants) Accepted(cause string) []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return slices.Clone(inv.accepted[cause])
}

// recordReplicas adds the MachineDeployment's replicas to its trajectory
// when they changed, and returns the replicas seen before, if any.
func (inv *Invariants) recordReplicas(md *clusterv1.MachineDeployment) *int32 {
	replicas := ptr.Deref(md.Spec.Replicas, 0)
	inv.mu.Lock()
	defer inv.mu.Unlock()
	trajectory := inv.replicas[md.Name]
	if len(trajectory) == 0 {
		inv.replicas[md.Name] = append(trajectory, ReplicasSeen{Replicas: replicas, Seen: time.Now()})
		return nil
	}
	previous := trajectory[len(trajectory)-1].Replicas
	if previous != replicas {
		inv.replicas[md.Name] = append(trajectory, ReplicasSeen{Replicas: replicas, Seen: time.Now()})
	}
	return &previous
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
		inv.violations = append(inv.violations, Violation{At: time.Now(), Message: violation})
	}
}

// Violation is an invariant broken, and when the watch saw it.
type Violation struct {
	At      time.Time
	Message string
}

// TimedViolations are the violations seen so far, with when they were
// seen.
func (inv *Invariants) TimedViolations() []Violation {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return slices.Clone(inv.violations)
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
	messages := make([]string, 0, len(inv.violations))
	for _, v := range inv.violations {
		messages = append(messages, v.Message)
	}
	return messages
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
// itself: no live Machine of the Cluster keeps a delete-machine mark the
// autoscaler placed (scalable.IsMarkedByAutoscaler), and no Node of it
// keeps a deletion taint the autoscaler owns (scaledown.OwnsDeletionTaint)
// or its cordon, whichever ClusterAutoscaler placed them. An operator's mark, or another autoscaler's taint, is
// not the autoscaler's to remove: a spec that places one may still call it.
// Call it once whatever disturbed the autoscaler has stopped.
func ExpectNothingLeftBehind(ctx context.Context, input ExpectNothingLeftBehindInput) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		machines := &clusterv1.MachineList{}
		g.Expect(input.Stack.Management.Client.List(ctx, machines, client.InNamespace(input.Cluster.Namespace),
			client.MatchingLabels{clusterv1.ClusterNameLabel: input.Cluster.Name})).To(Succeed())
		for _, m := range machines.Items {
			if m.DeletionTimestamp == nil {
				g.Expect(scalable.IsMarkedByAutoscaler(&m)).To(BeFalse(), "Machine %s keeps the autoscaler's delete-machine mark", m.Name)
			}
		}
		for _, node := range ClusterNodes(ctx, g, input.Stack.Workload.Client, input.Cluster) {
			g.Expect(scaledown.OwnsDeletionTaint(&node)).To(BeFalse(), "Node %s keeps the autoscaler's deletion taint", node.Name)
			g.Expect(node.Annotations).NotTo(HaveKey(scaledown.CordonedAnnotation), "Node %s keeps the autoscaler's cordon", node.Name)
		}
	}, ScaleDownTimeout, AutoscalerPoll).Should(Succeed(), "the autoscaler left marks or taints behind")
}

// ExpectManagerHealthy fails when the manager has exited or has logged a
// panic, even one it recovered from.
func ExpectManagerHealthy(manager *localstack.Process) {
	GinkgoHelper()
	Expect(manager.Exited()).NotTo(BeClosed(), "the manager %s exited: %v", manager.Name(), manager.Err())
	Expect(ManagerPanic(manager)).To(Succeed())
}

// ManagerPanic is an error naming the first line of the manager's log
// that tells of a panic, even one it recovered from; nil when there is
// none.
func ManagerPanic(manager *localstack.Process) error {
	log, err := os.ReadFile(manager.LogPath())
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(log), "\n") {
		if strings.HasPrefix(line, "panic:") || strings.Contains(line, "Observed a panic") {
			return fmt.Errorf("the manager %s panicked: %s", manager.Name(), line)
		}
	}
	return nil
}

// FirstSeen is when the trajectory first reached replicas; zero if never.
func FirstSeen(trajectory []ReplicasSeen, replicas int32) time.Time {
	for _, seen := range trajectory {
		if seen.Replicas == replicas {
			return seen.Seen
		}
	}
	return time.Time{}
}

// FormatTrajectory shows the replicas of a trajectory in order, e.g. 1→3→1.
func FormatTrajectory(trajectory []ReplicasSeen) string {
	values := make([]string, 0, len(trajectory))
	for _, seen := range trajectory {
		values = append(values, fmt.Sprint(seen.Replicas))
	}
	return strings.Join(values, "→")
}
