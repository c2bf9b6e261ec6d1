package framework

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// NodeSteps are the moments a watch first saw a node of a burst reach each
// step, on the clock of ReadyToRunning's watches.
type NodeSteps struct {
	Name, Zone string
	// MachineCreated is when its Machine was first seen.
	MachineCreated time.Time
	// Created is when the Node was first seen (registered).
	Created time.Time
	// Ready is when its Ready condition was first seen True (kwok).
	Ready time.Time
	// Untainted is when it was first seen Ready without the not-ready
	// taint (the node lifecycle controller removes it).
	Untainted time.Time
}

// Nomination is a pod's status.nominatedNodeName as a watch saw it
// change; Node is empty when cleared.
type Nomination struct {
	Node string
	At   time.Time
}

// PodSteps are the moments a watch first saw a pod of a burst reach each
// step.
type PodSteps struct {
	Name    string
	Created time.Time
	// Unschedulable is when it was first seen Unschedulable.
	Unschedulable time.Time
	// Failures counts the Unschedulable reports of kube-scheduler seen (a
	// new message or transition time): its failed attempts, as far as it
	// reports them; LastFailure is the last one.
	Failures    int
	LastFailure time.Time
	Nominations []Nomination
	// Bound is when spec.nodeName was first seen set, to Node.
	Bound time.Time
	Node  string
	// Running is when phase Running was first seen (kwok).
	Running time.Time
}

// NominatedAt is the pod's nomination at t: the node, "" when none.
func (p *PodSteps) NominatedAt(t time.Time) string {
	node := ""
	for _, n := range p.Nominations {
		if n.At.After(t) {
			break
		}
		node = n.Node
	}
	return node
}

// ReadyToRunning records when each node of a Cluster and each pod of a
// namespace reach their steps, from Machine created to pod Running, as
// its watches see them: one clock, and each object's changes in the
// order the API server made them. Object timestamps have a second's
// resolution; the watch's have milliseconds.
type ReadyToRunning struct {
	mu  sync.Mutex
	now func() time.Time
	// machines are the Machines' creation, and machineNodes their nodes
	// (nodeRef), by Machine name.
	machines     map[string]time.Time
	machineNodes map[string]string
	nodes        map[string]*NodeSteps
	pods         map[types.UID]*PodSteps
	// lastReport is each pod's last Unschedulable condition seen.
	lastReport map[types.UID]corev1.PodCondition
}

// WatchReadyToRunning starts recording the Machines of cluster, its Nodes
// (by ClusterLabel) and the pods of namespace, until the spec ends.
func WatchReadyToRunning(ctx context.Context, stack *localstack.Stack, cluster *clusterv1.Cluster, namespace string) *ReadyToRunning {
	r := newReadyToRunning(time.Now)
	management, err := cache.New(stack.Management.Config, cache.Options{
		Scheme: localstack.Scheme, DefaultNamespaces: map[string]cache.Config{cluster.Namespace: {}},
	})
	Expect(err).NotTo(HaveOccurred())
	workload, err := cache.New(stack.Workload.Config, cache.Options{
		Scheme: localstack.Scheme, ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Namespaces: map[string]cache.Config{namespace: {}}}},
	})
	Expect(err).NotTo(HaveOccurred())
	watch := func(informers cache.Cache, obj client.Object, see func(obj any)) {
		informer, err := informers.GetInformer(ctx, obj)
		Expect(err).NotTo(HaveOccurred())
		_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    see,
			UpdateFunc: func(_, obj any) { see(obj) },
		})
		Expect(err).NotTo(HaveOccurred())
	}
	watch(management, &clusterv1.Machine{}, func(obj any) {
		if machine, ok := obj.(*clusterv1.Machine); ok && machine.Spec.ClusterName == cluster.Name {
			r.seeMachine(machine)
		}
	})
	watch(workload, &corev1.Node{}, func(obj any) {
		if node, ok := obj.(*corev1.Node); ok && node.Labels[ClusterLabel] == cluster.Name {
			r.seeNode(node)
		}
	})
	watch(workload, &corev1.Pod{}, func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			r.seePod(pod)
		}
	})
	StartInformers(ctx, management, "the Machine watch")
	StartInformers(ctx, workload, "the Node and pod watches")
	return r
}

func newReadyToRunning(now func() time.Time) *ReadyToRunning {
	return &ReadyToRunning{
		now: now, machines: map[string]time.Time{}, machineNodes: map[string]string{},
		nodes: map[string]*NodeSteps{}, pods: map[types.UID]*PodSteps{}, lastReport: map[types.UID]corev1.PodCondition{},
	}
}

func (r *ReadyToRunning) seeMachine(machine *clusterv1.Machine) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.machines[machine.Name]; !seen {
		r.machines[machine.Name] = now
	}
	if machine.Status.NodeRef.IsDefined() {
		r.machineNodes[machine.Name] = machine.Status.NodeRef.Name
	}
}

func (r *ReadyToRunning) seeNode(node *corev1.Node) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	steps, seen := r.nodes[node.Name]
	if !seen {
		steps = &NodeSteps{Name: node.Name, Zone: node.Labels[corev1.LabelTopologyZone], Created: now}
		r.nodes[node.Name] = steps
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	tainted := slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable
	})
	if ready && steps.Ready.IsZero() {
		steps.Ready = now
	}
	if ready && !tainted && steps.Untainted.IsZero() {
		steps.Untainted = now
	}
}

func (r *ReadyToRunning) seePod(pod *corev1.Pod) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	steps, seen := r.pods[pod.UID]
	if !seen {
		steps = &PodSteps{Name: pod.Name, Created: now}
		r.pods[pod.UID] = steps
	}
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Reason != corev1.PodReasonUnschedulable {
			continue
		}
		if steps.Unschedulable.IsZero() {
			steps.Unschedulable = now
		}
		if last := r.lastReport[pod.UID]; last.Message != c.Message || !last.LastTransitionTime.Equal(&c.LastTransitionTime) {
			r.lastReport[pod.UID] = c
			steps.Failures++
			steps.LastFailure = now
		}
	}
	// Binding clears the nomination (ClearingNominatedNodeNameAfterBinding):
	// a bound pod's last nomination is the one it had before.
	if nominated := pod.Status.NominatedNodeName; pod.Spec.NodeName == "" && nominated != steps.NominatedAt(now) {
		steps.Nominations = append(steps.Nominations, Nomination{Node: nominated, At: now})
	}
	if pod.Spec.NodeName != "" && steps.Bound.IsZero() {
		steps.Bound, steps.Node = now, pod.Spec.NodeName
	}
	if pod.Status.Phase == corev1.PodRunning && steps.Running.IsZero() {
		steps.Running = now
	}
}

// Steps returns copies of what the watches saw: the nodes with their
// Machine's creation, and the pods.
func (r *ReadyToRunning) Steps() ([]NodeSteps, []PodSteps) {
	r.mu.Lock()
	defer r.mu.Unlock()
	byNode := map[string]time.Time{}
	for machine, created := range r.machines {
		node := r.machineNodes[machine]
		if node == "" {
			// The local stack's Nodes are named after their Machines.
			node = machine
		}
		byNode[node] = created
	}
	var nodes []NodeSteps
	for _, n := range r.nodes {
		steps := *n
		steps.MachineCreated = byNode[n.Name]
		nodes = append(nodes, steps)
	}
	var pods []PodSteps
	for _, p := range r.pods {
		steps := *p
		steps.Nominations = slices.Clone(p.Nominations)
		pods = append(pods, steps)
	}
	slices.SortFunc(nodes, func(a, b NodeSteps) int { return a.Ready.Compare(b.Ready) })
	slices.SortFunc(pods, func(a, b PodSteps) int { return a.Running.Compare(b.Running) })
	return nodes, pods
}

// ReadyToRunningReport is the breakdown of a burst's wait, from Machine
// created to pod Running, over the nodes that the burst added and the
// pods that waited for them.
type ReadyToRunningReport struct {
	// Rows are the steps: name, count, p50, p99, max.
	Rows []StepRow
	// Pods waited for nodes of the burst; Nodes are those nodes.
	Pods, Nodes int
	// NominatedToNode are the pods nominated to their node when it turned
	// Ready; BoundAsLastNominated those bound to the node they were last
	// nominated to.
	NominatedToNode, BoundAsLastNominated int
	// BoundWithoutNomination are the pods bound while they had no
	// nomination (cleared and not written back).
	BoundWithoutNomination int
	// Nominations and Clearings are the changes seen of the pods'
	// nominations, to a node or to none.
	Nominations, Clearings int
	// LastReadyToAllRunning is from the last node of the burst turning
	// Ready to every pod Running: what waits for the last node.
	LastReadyToAllRunning time.Duration
	// LastReadyByZone is when the last node of each zone turned Ready,
	// after the burst's first node did.
	LastReadyByZone map[string]time.Duration
	// Slowest are the timelines of the pods that waited longest after
	// their node turned Ready, relative to it.
	Slowest []string
	// Elsewhere are the timelines of some pods bound to a node other than
	// the one last nominated for them, or without nomination.
	Elsewhere []string
}

// StepRow is one step's distribution.
type StepRow struct {
	Step          string
	N             int
	P50, P99, Max time.Duration
}

// slowestShown bounds the timelines of the report.
const slowestShown = 5

// NewReadyToRunningReport computes the breakdown of the nodes that
// registered after burst began and the pods bound to them.
func NewReadyToRunningReport(nodes []NodeSteps, pods []PodSteps, burst time.Time) ReadyToRunningReport {
	report := ReadyToRunningReport{}
	byName := map[string]NodeSteps{}
	var machineCreated, bootedIn, readyIn, untaintedIn, readyAfterFirst []time.Duration
	var firstMachine, firstReady, lastReady time.Time
	for _, n := range nodes {
		if n.Created.Before(burst) {
			continue
		}
		byName[n.Name] = n
		report.Nodes++
		if !n.MachineCreated.IsZero() {
			if firstMachine.IsZero() || n.MachineCreated.Before(firstMachine) {
				firstMachine = n.MachineCreated
			}
			bootedIn = append(bootedIn, n.Created.Sub(n.MachineCreated))
		}
		if !n.Ready.IsZero() {
			readyIn = append(readyIn, n.Ready.Sub(n.Created))
			if firstReady.IsZero() || n.Ready.Before(firstReady) {
				firstReady = n.Ready
			}
			if n.Ready.After(lastReady) {
				lastReady = n.Ready
			}
		}
		if !n.Untainted.IsZero() && !n.Ready.IsZero() {
			untaintedIn = append(untaintedIn, n.Untainted.Sub(n.Ready))
		}
	}
	report.LastReadyByZone = map[string]time.Duration{}
	for _, n := range byName {
		if !n.MachineCreated.IsZero() {
			machineCreated = append(machineCreated, n.MachineCreated.Sub(firstMachine))
		}
		if !n.Ready.IsZero() {
			readyAfterFirst = append(readyAfterFirst, n.Ready.Sub(firstReady))
			report.LastReadyByZone[n.Zone] = max(report.LastReadyByZone[n.Zone], n.Ready.Sub(firstReady))
		}
	}
	var allRunning time.Time
	var bound, untaintedToBound, running, total, lastFailure []time.Duration
	type waited struct {
		pod   PodSteps
		ready time.Time
	}
	var slowest []waited
	for _, p := range pods {
		node, ok := byName[p.Node]
		if !ok || p.Bound.IsZero() || node.Ready.IsZero() {
			continue
		}
		for _, n := range p.Nominations {
			if n.Node == "" {
				report.Clearings++
			} else {
				report.Nominations++
			}
		}
		report.Pods++
		if p.NominatedAt(node.Ready) == p.Node {
			report.NominatedToNode++
		}
		switch p.NominatedAt(p.Bound) {
		case p.Node:
			report.BoundAsLastNominated++
		case "":
			report.BoundWithoutNomination++
			fallthrough
		default:
			if len(report.Elsewhere) < slowestShown {
				report.Elsewhere = append(report.Elsewhere, podTimeline(p, node.Ready, byName)+roomAtBinding(p, pods, node.Ready))
			}
		}
		bound = append(bound, p.Bound.Sub(node.Ready))
		if !node.Untainted.IsZero() {
			untaintedToBound = append(untaintedToBound, p.Bound.Sub(node.Untainted))
		}
		if !p.LastFailure.IsZero() {
			lastFailure = append(lastFailure, p.LastFailure.Sub(node.Ready))
		}
		if !p.Running.IsZero() {
			if p.Running.After(allRunning) {
				allRunning = p.Running
			}
			running = append(running, p.Running.Sub(p.Bound))
			total = append(total, p.Running.Sub(node.Ready))
			slowest = append(slowest, waited{pod: p, ready: node.Ready})
		}
	}
	report.LastReadyToAllRunning = allRunning.Sub(lastReady)
	report.Rows = []StepRow{
		stepRow("Machine created, after the burst's first (creation order and rate)", machineCreated),
		stepRow("node Ready, after the burst's first", readyAfterFirst),
		stepRow("node: Machine created → Node created (boot)", bootedIn),
		stepRow("node: Node created → Ready (kwok)", readyIn),
		stepRow("node: Ready → not-ready taint removed (node lifecycle controller)", untaintedIn),
		stepRow("pod: its node Ready → last Unschedulable report (kube-scheduler)", lastFailure),
		stepRow("pod: its node Ready → bound (kube-scheduler)", bound),
		stepRow("pod: its node's not-ready taint removed → bound (kube-scheduler)", untaintedToBound),
		stepRow("pod: bound → Running (kwok)", running),
		stepRow("pod: its node Ready → Running", total),
	}
	slices.SortFunc(slowest, func(a, b waited) int {
		return cmp.Compare(b.pod.Running.Sub(b.ready), a.pod.Running.Sub(a.ready))
	})
	for _, w := range slowest[:min(slowestShown, len(slowest))] {
		report.Slowest = append(report.Slowest, podTimeline(w.pod, w.ready, byName))
	}
	return report
}

func stepRow(step string, durations []time.Duration) StepRow {
	slices.Sort(durations)
	return StepRow{Step: step, N: len(durations), P50: Percentile(durations, 50), P99: Percentile(durations, 99), Max: Percentile(durations, 100)}
}

// podTimeline is a pod's steps relative to when its node turned Ready,
// with when each node it was nominated to turned Ready.
func podTimeline(p PodSteps, ready time.Time, nodes map[string]NodeSteps) string {
	at := func(t time.Time) string { return t.Sub(ready).Round(10 * time.Millisecond).String() }
	var nominations []string
	for _, n := range p.Nominations {
		switch node, ok := nodes[n.Node]; {
		case n.Node == "":
			nominations = append(nominations, "none@"+at(n.At))
		case ok && !node.Ready.IsZero():
			nominations = append(nominations, fmt.Sprintf("%s(Ready %s)@%s", n.Node, at(node.Ready), at(n.At)))
		default:
			nominations = append(nominations, n.Node+"@"+at(n.At))
		}
	}
	untainted := "never"
	if node := nodes[p.Node]; !node.Untainted.IsZero() {
		untainted = at(node.Untainted)
	}
	return fmt.Sprintf("%s on %s, relative to its node Ready: created %s, %d Unschedulable reports (last %s), nominations [%s], node untainted %s, bound %s, Running %s",
		p.Name, p.Node, at(p.Created), p.Failures, at(p.LastFailure), strings.Join(nominations, " "), untainted, at(p.Bound), at(p.Running))
}

// roomAtBinding says who held room on p's node as p was bound there: the
// pods bound there before it, those pending nominated there, and those
// first nominated there, pending without that nomination, with their
// nominations relative to ready.
func roomAtBinding(p PodSteps, pods []PodSteps, ready time.Time) string {
	var bound, nominated, notNominated []string
	for _, other := range pods {
		pending := other.Bound.IsZero() || other.Bound.After(p.Bound)
		switch {
		case other.Name == p.Name:
		case other.Node == p.Node && !pending:
			bound = append(bound, other.Name)
		case !pending:
		case other.NominatedAt(p.Bound) == p.Node:
			nominated = append(nominated, other.Name)
		case len(other.Nominations) > 0 && other.Nominations[0].Node == p.Node:
			var changes []string
			for _, n := range other.Nominations {
				changes = append(changes, fmt.Sprintf("%s@%s", cmp.Or(n.Node, "none"), n.At.Sub(ready).Round(10*time.Millisecond)))
			}
			notNominated = append(notNominated, fmt.Sprintf("%s(%d Unschedulable reports, last %s; %s)", other.Name, other.Failures,
				other.LastFailure.Sub(ready).Round(10*time.Millisecond), strings.Join(changes, " ")))
		}
	}
	return fmt.Sprintf("; on its node as it was bound: bound before %v, nominated %v, planned there but not nominated %v", bound, nominated, notNominated)
}

// String is the report as a Markdown table and lines.
func (r ReadyToRunningReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d pods on %d new nodes; %d nominated to their node when it turned Ready, %d bound where last nominated, %d bound without nomination; %d nominations and %d clearings seen\n",
		r.Pods, r.Nodes, r.NominatedToNode, r.BoundAsLastNominated, r.BoundWithoutNomination, r.Nominations, r.Clearings)
	var zones []string
	for zone, last := range r.LastReadyByZone {
		zones = append(zones, fmt.Sprintf("%s %s", zone, last.Round(10*time.Millisecond)))
	}
	slices.Sort(zones)
	fmt.Fprintf(&b, "every pod Running %s after the last node turned Ready; the last node of each zone Ready after the first node: %s\n",
		r.LastReadyToAllRunning.Round(10*time.Millisecond), strings.Join(zones, ", "))
	b.WriteString("| step | n | p50 | p99 | max |\n| --- | --- | --- | --- | --- |\n")
	for _, row := range r.Rows {
		round := func(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", row.Step, row.N, round(row.P50), round(row.P99), round(row.Max))
	}
	for _, line := range r.Slowest {
		b.WriteString(line + "\n")
	}
	if len(r.Elsewhere) > 0 {
		b.WriteString("bound elsewhere than last nominated:\n")
		for _, line := range r.Elsewhere {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// Percentile is the p-th percentile (0 < p <= 100) of sorted durations,
// by the nearest rank; 0 when there are none.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(float64(len(sorted))*p/100+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
