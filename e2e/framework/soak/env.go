package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/retry"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// Env is what the operations act on: the soak's Cluster, its node groups
// (GroupShapes, in that order) and its Active ClusterAutoscaler.
type Env struct {
	Stack     *localstack.Stack
	Namespace string
	Cluster   *clusterv1.Cluster
	// Groups are the MachineDeployments of GroupShapes, in that order.
	Groups []*clusterv1.MachineDeployment
	// ClusterAutoscaler is the Active one.
	ClusterAutoscaler *autoscalingv1alpha1.ClusterAutoscaler
	// BufferTemplate is the PodTemplate the CapacityBuffer names.
	BufferTemplate string
	// Invariants is told of the Machines the soak deletes by hand.
	Invariants *framework.Invariants
	// Manager is the running manager; StartManager starts its binary
	// again under a new process name once RestartManager killed it.
	Manager      func() *localstack.Process
	StartManager func(ctx context.Context, name string) error

	// faults counts the Faults operations, so that the end of one does
	// not stop a later one.
	faults int
	// outages counts the WorkloadUnreachable operations, so that the end
	// of one does not end a later one.
	outages int

	// ManagerArgs are the arguments a second manager is started with, the
	// suite manager's.
	ManagerArgs []string
	// Managers are every manager the soak ran, StartManager's included.
	Managers *Managers
	// second is the last second manager started.
	second *localstack.Process
	// requests pass the fault proxies' requests to the operations and
	// checks that observe them.
	requests requestObservers
	// lifecycle orders the kills of armed crashes, made from the fault
	// proxies' goroutines, with the soak's own starts, stops and kills of
	// managers.
	lifecycle sync.Mutex
	// crashed is the suite's manager an armed crash killed, until it is
	// started again.
	crashed *crashedManager
	// crashes wakes Run to start the suite's manager again after a kill.
	crashes chan struct{}
	// history is where armed crashes record their kills.
	history *History
	// triggers are the armed crashes, with what stops their observing.
	triggersMu sync.Mutex
	triggers   map[*crashTrigger]func()
	// dryRuns are the UIDs of the DryRun ClusterAutoscalers ToggleDryRun
	// created.
	dryRuns []types.UID
}

// Undo is what an operation does later, when its effect ends: a pause
// lifted, faults stopped, bounds put back.
type Undo struct {
	After time.Duration
	Name  string
	Do    func(ctx context.Context, env *Env) error
}

// Result is what an applied operation acted on.
type Result struct {
	// Target names the object, e.g. Machine ns/name.
	Target string
	// Skipped says why the operation found nothing to act on.
	Skipped string
	Undo    *Undo
}

// ViolationError is an invariant an operation found broken, rather than
// an operation that failed.
type ViolationError struct{ Err error }

func (e *ViolationError) Error() string { return e.Err.Error() }

// Apply applies the operation. An error is an operation that failed (a
// race with the cluster, an API error), unless it is a ViolationError.
func (op Operation) Apply(ctx context.Context, env *Env) (Result, error) {
	apply, ok := appliers[op.Kind]
	if !ok {
		return Result{}, fmt.Errorf("no applier for %s", op.Kind)
	}
	return apply(ctx, env, op)
}

var appliers = map[Kind]func(ctx context.Context, env *Env, op Operation) (Result, error){
	ScaleWorkload: scaleWorkload, Burst: createBurst, EndBurst: endBurst, UnfitPods: createUnfitPods, DeletePod: deletePod, TogglePDB: togglePDB,
	WriteReplicas: writeReplicas, SetBounds: setBounds, PauseGroup: pauseGroup, PauseCluster: pauseCluster,
	DeleteMachine: deleteMachine, DeleteNode: deleteNode, Rollout: rollout,
	ToggleDryRun: toggleDryRun, Configure: configure, RotateKubeconfig: rotateKubeconfig, SetBuffer: setBuffer,
	Faults: injectFaults, RestartManager: restartManager,
	Remediate: remediate, KubeletDown: kubeletDown, Provision: provision, EndProvision: endProvision, WorkloadUnreachable: workloadUnreachable,
}

// update reads obj again, changes it with mutate and patches it with an
// optimistic lock, retrying on conflicts: a write that another writer
// overtook is made again on what it wrote.
func update[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T) error) error {
	return retry.OnConflict(func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		before := obj.DeepCopyObject().(client.Object)
		if err := mutate(obj); err != nil {
			return err
		}
		return c.Patch(ctx, obj, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	})
}

// pick is the candidate at index i modulo their number, once sorted.
func pick(candidates []string, i int) (string, bool) {
	if len(candidates) == 0 {
		return "", false
	}
	slices.Sort(candidates)
	return candidates[i%len(candidates)], true
}

// bounds are a group's min and max size annotations; ok is false when
// either is missing or not a number.
func bounds(md *clusterv1.MachineDeployment) (minSize, maxSize int, ok bool) {
	minSize, errMin := strconv.Atoi(md.Annotations[clusterv1.AutoscalerMinSizeAnnotation])
	maxSize, errMax := strconv.Atoi(md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation])
	return minSize, maxSize, errors.Join(errMin, errMax) == nil
}

// ignoreGone makes the deletion of an object that is already gone no
// error.
func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// proxies are the fault proxies between the autoscaler and the API
// servers.
func (env *Env) proxies() []*faultproxy.Proxy {
	return framework.ProxiesOf(env.Stack)
}
