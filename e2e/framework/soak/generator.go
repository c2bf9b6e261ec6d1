// Package soak interleaves, from a seed, the operations a Cluster API
// management cluster lives through (workloads, Cluster API, the
// autoscaler's own objects, faults) and checks invariants over the whole
// history, as Jepsen's generator and checker do. The Generator is pure:
// the same seed gives the same operations, with the same parameters, in
// the same order, whatever the cluster does; only the targets an operation
// picks by index among sorted candidates depend on the cluster when it is
// applied.
package soak

import (
	"fmt"
	"math/rand/v2"
	"time"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
)

// Kind is what an operation does.
type Kind string

// Workload operations, in the workload cluster.
const (
	// ScaleWorkload sets the replicas of one of the steady Deployments.
	ScaleWorkload Kind = "ScaleWorkload"
	// Burst creates a Deployment of pods at once, with a placement.
	Burst Kind = "Burst"
	// EndBurst deletes a Burst's Deployment.
	EndBurst Kind = "EndBurst"
	// UnfitPods creates pods that no node group's template can hold.
	UnfitPods Kind = "UnfitPods"
	// DeletePod deletes a pod of the soak's namespace.
	DeletePod Kind = "DeletePod"
	// TogglePDB creates, or deletes, the PodDisruptionBudget of a steady
	// Deployment.
	TogglePDB Kind = "TogglePDB"
)

// Cluster API operations, in the management cluster.
const (
	// WriteReplicas writes a group's replicas as another client would,
	// within its bounds.
	WriteReplicas Kind = "WriteReplicas"
	// SetBounds changes a group's min and max size annotations, or
	// removes them for a while.
	SetBounds Kind = "SetBounds"
	// PauseGroup pauses a MachineDeployment for a while.
	PauseGroup Kind = "PauseGroup"
	// PauseCluster pauses the Cluster for a while.
	PauseCluster Kind = "PauseCluster"
	// DeleteMachine deletes a Machine by hand.
	DeleteMachine Kind = "DeleteMachine"
	// DeleteNode deletes a Node by hand.
	DeleteNode Kind = "DeleteNode"
	// Rollout rolls a MachineDeployment out with a new machine template.
	Rollout Kind = "Rollout"
)

// Cluster API operations on a group's Nodes, in the workload cluster.
const (
	// Remediate puts a MachineHealthCheck on a group and makes a Node of
	// it NotReady: Cluster API deletes and replaces its Machine. The
	// MachineHealthCheck goes, and the Node is Ready again if it is still
	// there, after a while.
	Remediate Kind = "Remediate"
	// KubeletDown takes a Node's kubelet down for a while, NotReady or
	// dead (no more status), with a pod on it stuck Terminating.
	KubeletDown Kind = "KubeletDown"
)

// Autoscaler operations.
const (
	// ToggleDryRun creates, or deletes, a DryRun ClusterAutoscaler beside
	// the Active one.
	ToggleDryRun Kind = "ToggleDryRun"
	// Configure changes the Active ClusterAutoscaler's scale-down
	// settings.
	Configure Kind = "Configure"
	// RotateKubeconfig writes new credentials into the workload
	// kubeconfig Secret the Active ClusterAutoscaler names.
	RotateKubeconfig Kind = "RotateKubeconfig"
	// SetBuffer creates, resizes or (at 0) deletes a CapacityBuffer.
	SetBuffer Kind = "SetBuffer"
)

// ProvisioningRequests, in the workload cluster.
const (
	// Provision creates a ProvisioningRequest, of either class the
	// autoscaler serves, for pods that fit.
	Provision Kind = "Provision"
	// EndProvision deletes a ProvisioningRequest Provision created.
	EndProvision Kind = "EndProvision"
)

// Faults.
const (
	// Faults makes the fault proxies fail a share of the autoscaler's
	// requests for a while.
	Faults Kind = "Faults"
	// RestartManager kills the manager (SIGKILL) and starts it again.
	RestartManager Kind = "RestartManager"
)

// Faults of reach.
const (
	// WorkloadUnreachable makes the workload API server unreachable for
	// the autoscaler's workload requests for a while: refused, or
	// black-holed.
	WorkloadUnreachable Kind = "WorkloadUnreachable"
)

// Managers beside the suite's, and crashes of the one that acts.
const (
	// SecondManager starts a second manager beside the suite's for a
	// while: only the holder of the Cluster's Lease may act.
	SecondManager Kind = "SecondManager"
	// KillLeader kills (SIGKILL) whichever manager holds the Cluster's
	// Lease while a second one runs, starting one first if none does: the
	// other takes over.
	KillLeader Kind = "KillLeader"
	// CrashAtWrite kills the manager that acts right after the API server
	// accepted its Nth write of a kind (a CrashPoint), as a crash there
	// would, and starts it again.
	CrashAtWrite Kind = "CrashAtWrite"
)

// CrashPoint is the kind of write of the autoscaler right after which
// CrashAtWrite kills the manager.
type CrashPoint string

const (
	// CrashAfterScale is a /scale write of a MachineDeployment.
	CrashAfterScale CrashPoint = "Scale"
	// CrashAfterNodeWrite is a write of a Node: a deletion taint or a
	// cordon placed or taken back.
	CrashAfterNodeWrite CrashPoint = "NodeWrite"
	// CrashAfterEviction is the eviction of a pod of a node being drained.
	CrashAfterEviction CrashPoint = "Eviction"
	// CrashAfterMark is a write of a Machine: its delete-machine mark
	// placed or taken back.
	CrashAfterMark CrashPoint = "Mark"
)

// CrashPoints are every CrashPoint, in the order a scale-down reaches them.
var CrashPoints = []CrashPoint{CrashAfterScale, CrashAfterNodeWrite, CrashAfterEviction, CrashAfterMark}

// Placement of a Burst's pods.
type Placement string

const (
	// Packed pods have no constraint among themselves.
	Packed Placement = "packed"
	// AntiAffine pods need a node each (required pod anti-affinity on the
	// hostname).
	AntiAffine Placement = "anti-affinity"
	// Spread pods spread over nodes with maxSkew 1, as a hard constraint.
	Spread Placement = "spread"
)

// Shape of the soak's cluster, which the generator's demand budget is
// worked out for: every pod it creates that fits a node group's template
// fits, all together, into the groups at their base max sizes.
const (
	// SteadyWorkloads is how many steady Deployments ScaleWorkload scales.
	SteadyWorkloads = 3
	// DemandBudgetMilli bounds the cpu of the fitting pods, buffers and
	// ProvisioningRequests that exist at any time, in millicores.
	DemandBudgetMilli = 7000
	// maxBursts bounds the Bursts alive at once.
	maxBursts = 3
	// maxRequests bounds the ProvisioningRequests alive at once.
	maxRequests = 2
	// maxAntiAffine bounds a Burst's pods that need a node each: the
	// groups at their base max sizes have at least this many nodes.
	maxAntiAffine = 3
)

// GroupShape is a node group of the soak's Cluster.
type GroupShape struct {
	Name string
	// CPU of its machines.
	CPU string
	// MinSize and MaxSize are its bounds when the soak starts, and what
	// they are set back to; SetBounds never lowers the max below MaxSize.
	MinSize, MaxSize int
}

// GroupShapes are the node groups of the soak's Cluster, sorted by name:
// at their base max sizes, 6 + 12 cores on 6 nodes, room for
// DemandBudgetMilli however the pods pack.
var GroupShapes = []GroupShape{
	{Name: "soak-a", CPU: "2", MinSize: 1, MaxSize: 3},
	{Name: "soak-b", CPU: "4", MinSize: 1, MaxSize: 3},
}

// SteadyCPUMilli is the cpu request of each steady Deployment's pods.
var SteadyCPUMilli = [SteadyWorkloads]int64{500, 1000, 1500}

// BufferCPUMilli is the cpu of each pod's worth of the CapacityBuffer.
const BufferCPUMilli = 1000

// Operation is one step of a soak: what to do, with parameters that come
// only from the seed, and how long to wait after the previous one.
type Operation struct {
	// Seq numbers the operations of a run from 1.
	Seq  int
	Kind Kind
	// Wait is the pause before the operation is applied.
	Wait time.Duration

	// Workload is the index of a steady Deployment (ScaleWorkload,
	// TogglePDB).
	Workload int
	// Group is the index of a node group among the soak's, sorted by name.
	Group int
	// Pick chooses a target among the sorted candidates when the
	// operation is applied (DeletePod, DeleteMachine, DeleteNode), modulo
	// their number.
	Pick int
	// Replicas of a Deployment, a burst, unfit pods, a group or a buffer.
	Replicas int
	// CPUMilli of each pod of a Burst.
	CPUMilli  int64
	Placement Placement
	// Burst names the Burst that Burst creates and EndBurst deletes.
	Burst string
	// MinSize and MaxSize are the bounds SetBounds writes; Remove removes
	// them instead.
	MinSize, MaxSize int
	Remove           bool
	// For is how long a pause, faults or removed bounds last.
	For time.Duration
	// Rate is the share of requests Faults fails.
	Rate float64
	// UnneededTime Configure sets.
	UnneededTime time.Duration
	// Class of the ProvisioningRequest Provision creates.
	Class string
	// Request names the ProvisioningRequest that Provision creates (of
	// Replicas pods of CPUMilli) and EndProvision deletes.
	Request string
	// Dead says KubeletDown kills the kubelet, which stops posting the
	// Node's status, rather than have it report the Node NotReady.
	Dead bool
	// BlackHole says WorkloadUnreachable holds requests unanswered rather
	// than refuse them.
	BlackHole bool
	// Point and Nth are the write CrashAtWrite kills the manager after:
	// the Nth of its kind from when it is applied.
	Point CrashPoint
	Nth   int
}

// Name says what the operation does, parameters included.
func (op Operation) Name() string {
	switch op.Kind {
	case ScaleWorkload:
		return fmt.Sprintf("%s steady-%d to %d", op.Kind, op.Workload, op.Replicas)
	case Burst:
		return fmt.Sprintf("%s %s: %d pods of %dm, %s", op.Kind, op.Burst, op.Replicas, op.CPUMilli, op.Placement)
	case EndBurst:
		return fmt.Sprintf("%s %s", op.Kind, op.Burst)
	case UnfitPods:
		return fmt.Sprintf("%s %d", op.Kind, op.Replicas)
	case TogglePDB:
		return fmt.Sprintf("%s steady-%d", op.Kind, op.Workload)
	case DeletePod, DeleteMachine, DeleteNode:
		return fmt.Sprintf("%s #%d", op.Kind, op.Pick)
	case WriteReplicas:
		return fmt.Sprintf("%s group %d, #%d within bounds", op.Kind, op.Group, op.Replicas)
	case SetBounds:
		if op.Remove {
			return fmt.Sprintf("%s group %d removed for %s", op.Kind, op.Group, op.For)
		}
		return fmt.Sprintf("%s group %d to [%d, %d]", op.Kind, op.Group, op.MinSize, op.MaxSize)
	case PauseGroup:
		return fmt.Sprintf("%s group %d for %s", op.Kind, op.Group, op.For)
	case PauseCluster:
		return fmt.Sprintf("%s for %s", op.Kind, op.For)
	case Rollout:
		return fmt.Sprintf("%s group %d", op.Kind, op.Group)
	case Configure:
		return fmt.Sprintf("%s unneededTime %s", op.Kind, op.UnneededTime)
	case SetBuffer:
		return fmt.Sprintf("%s to %d", op.Kind, op.Replicas)
	case Faults:
		return fmt.Sprintf("%s %.0f%% for %s", op.Kind, op.Rate*100, op.For)
	case Provision:
		return fmt.Sprintf("%s %s: %s, %d pods of %dm", op.Kind, op.Request, op.Class, op.Replicas, op.CPUMilli)
	case EndProvision:
		return fmt.Sprintf("%s %s", op.Kind, op.Request)
	case Remediate:
		return fmt.Sprintf("%s group %d, #%d, for %s", op.Kind, op.Group, op.Pick, op.For)
	case KubeletDown:
		return fmt.Sprintf("%s #%d, %s for %s", op.Kind, op.Pick, map[bool]string{false: "NotReady", true: "dead"}[op.Dead], op.For)
	case WorkloadUnreachable:
		return fmt.Sprintf("%s, %s, for %s", op.Kind, map[bool]string{false: "refused", true: "black-holed"}[op.BlackHole], op.For)
	case SecondManager:
		return fmt.Sprintf("%s for %s", op.Kind, op.For)
	case CrashAtWrite:
		return fmt.Sprintf("%s after %s write #%d, within %s", op.Kind, op.Point, op.Nth, op.For)
	}
	return string(op.Kind)
}

// GeneratorOptions are the options of a Generator.
type GeneratorOptions struct {
	Seed uint64
	// MinWait and MaxWait bound the pause before each operation.
	MinWait, MaxWait time.Duration
	// MaxFor bounds how long pauses, faults and removed bounds last.
	MaxFor time.Duration
}

// Generator produces a soak's operations from its seed alone. It keeps a
// model of what its own operations created (steady replicas, bursts,
// PDBs, the buffer), which never depends on the cluster, to keep the
// demand of fitting pods within DemandBudgetMilli.
type Generator struct {
	opts GeneratorOptions
	rng  *rand.Rand
	seq  int

	steady    [SteadyWorkloads]int
	bursts    []burst
	bufferPod int
	bursted   int

	requests  []burst
	requested int
}

type burst struct {
	name  string
	milli int64
}

// NewGenerator returns the generator of a seed.
func NewGenerator(opts GeneratorOptions) *Generator {
	return &Generator{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))}
}

// weights are how often each kind is drawn, workloads first.
var weights = []struct {
	kind   Kind
	weight int
}{
	{ScaleWorkload, 10}, {Burst, 6}, {EndBurst, 5}, {UnfitPods, 1}, {DeletePod, 4}, {TogglePDB, 2},
	{WriteReplicas, 3}, {SetBounds, 3}, {PauseGroup, 2}, {PauseCluster, 1}, {DeleteMachine, 2}, {DeleteNode, 2}, {Rollout, 1},
	{Remediate, 1}, {KubeletDown, 2},
	{ToggleDryRun, 2}, {Configure, 2}, {RotateKubeconfig, 2}, {SetBuffer, 2},
	{Provision, 3}, {EndProvision, 2},
	{Faults, 3}, {RestartManager, 1},
	{WorkloadUnreachable, 2},
	{SecondManager, 2}, {KillLeader, 1}, {CrashAtWrite, 1},
}

// Kinds are every kind the generator draws.
func Kinds() []Kind {
	kinds := make([]Kind, 0, len(weights))
	for _, w := range weights {
		kinds = append(kinds, w.kind)
	}
	return kinds
}

// Next is the next operation.
func (g *Generator) Next() Operation {
	g.seq++
	op := Operation{Seq: g.seq, Wait: g.duration(g.opts.MinWait, g.opts.MaxWait)}
	op.Kind = g.kind()
	g.fill(&op)
	return op
}

func (g *Generator) kind() Kind {
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	n := g.rng.IntN(total)
	for _, w := range weights {
		if n < w.weight {
			return w.kind
		}
		n -= w.weight
	}
	panic("unreachable")
}

// fill draws the parameters of op, and turns an operation the model
// cannot take (a burst beyond the budget, no burst to end) into one it
// can.
func (g *Generator) fill(op *Operation) {
	op.Group = g.rng.IntN(len(GroupShapes))
	op.Pick = g.rng.IntN(1 << 16)
	op.For = g.duration(g.opts.MaxFor/4, g.opts.MaxFor)
	switch op.Kind {
	case ScaleWorkload:
		op.Workload = g.rng.IntN(SteadyWorkloads)
		room := DemandBudgetMilli - g.demand() + int64(g.steady[op.Workload])*SteadyCPUMilli[op.Workload]
		op.Replicas = min(g.rng.IntN(5), int(room/SteadyCPUMilli[op.Workload]))
		g.steady[op.Workload] = op.Replicas
	case Burst:
		op.Placement = []Placement{Packed, AntiAffine, Spread}[g.rng.IntN(3)]
		op.CPUMilli = []int64{250, 500, 1000}[g.rng.IntN(3)]
		op.Replicas = 1 + g.rng.IntN(maxAntiAffine)
		if op.Placement != AntiAffine {
			op.Replicas = 1 + g.rng.IntN(6)
		}
		room := DemandBudgetMilli - g.demand()
		op.Replicas = min(op.Replicas, int(room/op.CPUMilli))
		if op.Burst = admit(&g.bursts, &g.bursted, maxBursts, "burst", op.Replicas, op.CPUMilli); op.Burst == "" {
			g.endBurst(op)
			return
		}
	case EndBurst:
		g.endBurst(op)
	case UnfitPods:
		op.Replicas = 1 + g.rng.IntN(2)
	case TogglePDB:
		op.Workload = g.rng.IntN(SteadyWorkloads)
	case WriteReplicas:
		op.Replicas = g.rng.IntN(8)
	case SetBounds:
		op.Remove = g.rng.IntN(4) == 0
		shape := GroupShapes[op.Group]
		op.MinSize = g.rng.IntN(shape.MinSize + 1)
		op.MaxSize = shape.MaxSize + g.rng.IntN(3)
	case Configure:
		op.UnneededTime = []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second}[g.rng.IntN(3)]
	case SetBuffer:
		op.Replicas = g.rng.IntN(3)
		room := DemandBudgetMilli - g.demand() + int64(g.bufferPod)*BufferCPUMilli
		op.Replicas = min(op.Replicas, int(room/BufferCPUMilli))
		g.bufferPod = op.Replicas
	case Faults:
		op.Rate = []float64{0.1, 0.3, 0.5}[g.rng.IntN(3)]
	case Provision:
		op.Class = []string{provisioningv1.CheckCapacityProvisioningClass, provisioningv1.BestEffortAtomicScaleUpProvisioningClass}[g.rng.IntN(2)]
		op.CPUMilli = []int64{500, 1000}[g.rng.IntN(2)]
		op.Replicas = min(1+g.rng.IntN(3), int((DemandBudgetMilli-g.demand())/op.CPUMilli))
		if op.Request = admit(&g.requests, &g.requested, maxRequests, "request", op.Replicas, op.CPUMilli); op.Request == "" {
			g.endRequest(op)
			return
		}
	case EndProvision:
		g.endRequest(op)
	case KubeletDown:
		op.Dead = g.rng.IntN(2) == 0
	case WorkloadUnreachable:
		op.BlackHole = g.rng.IntN(2) == 0
	case CrashAtWrite:
		op.Point = CrashPoints[g.rng.IntN(len(CrashPoints))]
		op.Nth = 1 + g.rng.IntN(2)
	}
}

// endRequest makes op delete the oldest ProvisioningRequest, or end a
// burst when there is none.
func (g *Generator) endRequest(op *Operation) {
	if len(g.requests) == 0 {
		g.endBurst(op)
		return
	}
	op.Kind = EndProvision
	op.Request = g.requests[0].name
	g.requests = g.requests[1:]
}

// admit books the cpu of replicas pods of cpuMilli for a new burst or
// ProvisioningRequest, named prefix-N from the count of those started,
// and returns its name; "" when it asks for nothing or most of them run
// already.
func admit(running *[]burst, started *int, most int, prefix string, replicas int, cpuMilli int64) string {
	if replicas == 0 || len(*running) == most {
		return ""
	}
	*started++
	name := fmt.Sprintf("%s-%d", prefix, *started)
	*running = append(*running, burst{name: name, milli: int64(replicas) * cpuMilli})
	return name
}

// endBurst makes op end the oldest burst, or scale a steady Deployment to
// zero when there is none.
func (g *Generator) endBurst(op *Operation) {
	if len(g.bursts) == 0 {
		op.Kind = ScaleWorkload
		op.Workload = g.rng.IntN(SteadyWorkloads)
		op.Replicas = 0
		g.steady[op.Workload] = 0
		return
	}
	op.Kind = EndBurst
	op.Burst = g.bursts[0].name
	g.bursts = g.bursts[1:]
}

// demand is the cpu the fitting pods, the buffer and the
// ProvisioningRequests of the model request.
func (g *Generator) demand() int64 {
	var milli int64
	for i, replicas := range g.steady {
		milli += int64(replicas) * SteadyCPUMilli[i]
	}
	for _, b := range g.bursts {
		milli += b.milli
	}
	// A ProvisioningRequest's pods are booked their room.
	for _, r := range g.requests {
		milli += r.milli
	}
	return milli + int64(g.bufferPod)*BufferCPUMilli
}

// duration is a random duration in [lo, hi], to the 100 ms.
func (g *Generator) duration(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	steps := int64((hi - lo) / (100 * time.Millisecond))
	return lo + time.Duration(g.rng.Int64N(steps+1))*100*time.Millisecond
}
