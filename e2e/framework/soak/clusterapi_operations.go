package soak

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

// group is the soak's node group at index i, to read again.
func (env *Env) group(i int) *clusterv1.MachineDeployment {
	return env.Groups[i].DeepCopy()
}

func groupTarget(md *clusterv1.MachineDeployment) string {
	return "MachineDeployment " + klog.KObj(md).String()
}

// writeReplicas writes replicas within the group's bounds, as another
// client (a GitOps tool, an operator) does: op.Replicas picks among them.
// Lowering them, it first marks the Machines to go with Cluster API's
// delete-machine annotation, as an operator removing chosen Machines does:
// an unmarked Machine deleted is the autoscaler's doing, never the soak's.
func writeReplicas(ctx context.Context, env *Env, op Operation) (Result, error) {
	mgmt := env.Stack.Management.Client
	md := env.group(op.Group)
	if err := mgmt.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
		return Result{}, err
	}
	minSize, maxSize, ok := bounds(md)
	if !ok {
		return Result{Target: groupTarget(md), Skipped: "the group has no bounds"}, nil
	}
	current := int(ptr.Deref(md.Spec.Replicas, 0))
	replicas := minSize + op.Replicas%(maxSize-minSize+1)
	result := Result{Target: fmt.Sprintf("%s replicas %d→%d", groupTarget(md), current, replicas)}
	marked, err := env.markMachines(ctx, md, current-replicas, op.Pick)
	if err != nil {
		return result, err
	}
	if len(marked) > 0 {
		result.Target += fmt.Sprintf(", Machines %v marked", marked)
	}
	before := md.DeepCopy()
	md.Spec.Replicas = ptr.To(int32(replicas))
	// On the replicas read with the bounds: another writer in between
	// makes it fail rather than write replicas chosen for other bounds.
	if err := mgmt.Patch(ctx, md, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return result, errors.Join(err, env.unmarkMachines(ctx, marked))
	}
	return result, nil
}

// operatorMark is the value of the delete-machine annotation the soak
// places, as an operator would.
const operatorMark = "soak"

// markMachines marks n live, unmarked Machines of the group, picked by
// index among them sorted, and returns their names.
func (env *Env) markMachines(ctx context.Context, md *clusterv1.MachineDeployment, n, i int) ([]string, error) {
	if n <= 0 {
		return nil, nil
	}
	machines, err := env.liveMachines(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, m := range machines {
		if _, marked := m.Annotations[clusterv1.DeleteMachineAnnotation]; !marked && m.Labels[clusterv1.MachineDeploymentNameLabel] == md.Name {
			names = append(names, m.Name)
		}
	}
	var marked []string
	for ; n > 0 && len(names) > 0; n-- {
		name, _ := pick(names, i)
		names = slices.DeleteFunc(names, func(other string) bool { return other == name })
		machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: name}}
		if err := update(ctx, env.Stack.Management.Client, machine, func(m *clusterv1.Machine) error {
			annotations := m.GetAnnotations()
			framework.SetOrDelete(&annotations, clusterv1.DeleteMachineAnnotation, operatorMark)
			m.SetAnnotations(annotations)
			return nil
		}); err != nil {
			return marked, errors.Join(err, env.unmarkMachines(ctx, marked))
		}
		marked = append(marked, name)
	}
	return marked, nil
}

// unmarkMachines removes the soak's marks from Machines.
func (env *Env) unmarkMachines(ctx context.Context, names []string) error {
	var errs []error
	for _, name := range names {
		machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
		errs = append(errs, ignoreGone(update(ctx, env.Stack.Management.Client, machine, func(m *clusterv1.Machine) error {
			annotations := m.GetAnnotations()
			framework.SetOrDelete(&annotations, clusterv1.DeleteMachineAnnotation, "")
			m.SetAnnotations(annotations)
			return nil
		})))
	}
	return errors.Join(errs...)
}

// setBounds writes the group's bounds, widened to hold its replicas at
// that resourceVersion (the invariant watcher holds the replicas to the
// bounds), or removes them for op.For.
func setBounds(ctx context.Context, env *Env, op Operation) (Result, error) {
	md := env.group(op.Group)
	result := Result{Target: groupTarget(md)}
	if op.Remove {
		err := update(ctx, env.Stack.Management.Client, md, func(md *clusterv1.MachineDeployment) error {
			delete(md.Annotations, clusterv1.AutoscalerMinSizeAnnotation)
			delete(md.Annotations, clusterv1.AutoscalerMaxSizeAnnotation)
			return nil
		})
		result.Undo = &Undo{After: op.For, Name: "bounds of group " + md.Name + " back", Do: func(ctx context.Context, env *Env) error {
			return env.resetBounds(ctx, op.Group)
		}}
		return result, err
	}
	err := update(ctx, env.Stack.Management.Client, md, func(md *clusterv1.MachineDeployment) error {
		replicas := int(ptr.Deref(md.Spec.Replicas, 0))
		minSize, maxSize := min(op.MinSize, replicas), max(op.MaxSize, replicas)
		result.Target = fmt.Sprintf("%s [%d, %d] at %d replicas", groupTarget(md), minSize, maxSize, replicas)
		setSizeAnnotations(md, minSize, maxSize)
		return nil
	})
	return result, err
}

// resetBounds puts the group's base bounds back, widened to hold its
// replicas.
func (env *Env) resetBounds(ctx context.Context, i int) error {
	shape := GroupShapes[i]
	return update(ctx, env.Stack.Management.Client, env.group(i), func(md *clusterv1.MachineDeployment) error {
		replicas := int(ptr.Deref(md.Spec.Replicas, 0))
		setSizeAnnotations(md, min(shape.MinSize, replicas), max(shape.MaxSize, replicas))
		return nil
	})
}

func setSizeAnnotations(md *clusterv1.MachineDeployment, minSize, maxSize int) {
	if md.Annotations == nil {
		md.Annotations = map[string]string{}
	}
	md.Annotations[clusterv1.AutoscalerMinSizeAnnotation] = strconv.Itoa(minSize)
	md.Annotations[clusterv1.AutoscalerMaxSizeAnnotation] = strconv.Itoa(maxSize)
}

func pauseGroup(ctx context.Context, env *Env, op Operation) (Result, error) {
	md := env.group(op.Group)
	setPaused := func(ctx context.Context, paused bool) error {
		return update(ctx, env.Stack.Management.Client, env.group(op.Group), func(md *clusterv1.MachineDeployment) error {
			annotations := md.GetAnnotations()
			framework.SetOrDelete(&annotations, clusterv1.PausedAnnotation, map[bool]string{true: "true"}[paused])
			md.SetAnnotations(annotations)
			return nil
		})
	}
	return Result{Target: groupTarget(md), Undo: &Undo{After: op.For, Name: "group " + md.Name + " unpaused", Do: func(ctx context.Context, _ *Env) error {
		return setPaused(ctx, false)
	}}}, setPaused(ctx, true)
}

func pauseCluster(ctx context.Context, env *Env, op Operation) (Result, error) {
	setPaused := func(ctx context.Context, paused bool) error {
		return update(ctx, env.Stack.Management.Client, env.Cluster.DeepCopy(), func(cluster *clusterv1.Cluster) error {
			cluster.Spec.Paused = ptr.To(paused)
			return nil
		})
	}
	return Result{Target: "Cluster " + klog.KObj(env.Cluster).String(), Undo: &Undo{After: op.For, Name: "Cluster unpaused", Do: func(ctx context.Context, _ *Env) error {
		return setPaused(ctx, false)
	}}}, setPaused(ctx, true)
}

// liveMachines are the Machines of the soak's Cluster not being deleted.
func (env *Env) liveMachines(ctx context.Context) ([]clusterv1.Machine, error) {
	machines := &clusterv1.MachineList{}
	if err := env.Stack.Management.Client.List(ctx, machines, client.InNamespace(env.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: env.Cluster.Name}); err != nil {
		return nil, err
	}
	var live []clusterv1.Machine
	for _, m := range machines.Items {
		if m.DeletionTimestamp == nil {
			live = append(live, m)
		}
	}
	return live, nil
}

func deleteMachine(ctx context.Context, env *Env, op Operation) (Result, error) {
	machines, err := env.liveMachines(ctx)
	if err != nil {
		return Result{}, err
	}
	names := make([]string, 0, len(machines))
	for _, m := range machines {
		names = append(names, m.Name)
	}
	name, ok := pick(names, op.Pick)
	if !ok {
		return Result{Skipped: "no Machine"}, nil
	}
	machine := &clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: name}}
	env.Invariants.AcceptDeletion(name)
	return Result{Target: "Machine " + klog.KObj(machine).String()}, ignoreGone(env.Stack.Management.Client.Delete(ctx, machine))
}

// kubeletReregistration is how long a kubelet whose Node was deleted
// takes to register it again.
const kubeletReregistration = 5 * time.Second

// deleteNode deletes a Node by hand, as kubectl delete node does; its
// Machine's deletion, should Cluster API follow, is accepted too. The
// machine's kubelet registers the Node again a little later: the
// simulated provider creates it when its SimMachine is reconciled, which
// the undo asks for.
func deleteNode(ctx context.Context, env *Env, op Operation) (Result, error) {
	nodes := &corev1.NodeList{}
	if err := env.Stack.Workload.Client.List(ctx, nodes, client.MatchingLabels{framework.ClusterLabel: env.Cluster.Name}); err != nil {
		return Result{}, err
	}
	names := make([]string, 0, len(nodes.Items))
	for _, node := range nodes.Items {
		names = append(names, node.Name)
	}
	name, ok := pick(names, op.Pick)
	if !ok {
		return Result{Skipped: "no Node"}, nil
	}
	machines, err := env.liveMachines(ctx)
	if err != nil {
		return Result{}, err
	}
	result := Result{Target: "Node " + name}
	for _, m := range machines {
		if m.Status.NodeRef.Name != name {
			continue
		}
		env.Invariants.AcceptDeletion(m.Name)
		simMachine := &infrav1.SimMachine{ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Spec.InfrastructureRef.Name}}
		result.Undo = &Undo{After: kubeletReregistration, Name: "Node " + name + " registered again", Do: func(ctx context.Context, env *Env) error {
			return ignoreGone(update(ctx, env.Stack.Management.Client, simMachine, func(sm *infrav1.SimMachine) error {
				if sm.Annotations == nil {
					sm.Annotations = map[string]string{}
				}
				sm.Annotations[reregisterAnnotation] = strconv.Itoa(op.Seq)
				return nil
			}))
		}}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	return result, ignoreGone(env.Stack.Workload.Client.Delete(ctx, node))
}

// reregisterAnnotation on a SimMachine makes the provider reconcile it,
// which registers its Node again.
const reregisterAnnotation = "soak.e2e.capi-autoscaler.io/reregister"

// rollout rolls the group out with a copy of its machine template, as an
// upgrade does: labels and annotations of the template are propagated in
// place by Cluster API, a new infrastructure template rolls Machines out.
func rollout(ctx context.Context, env *Env, op Operation) (Result, error) {
	mgmt := env.Stack.Management.Client
	md := env.group(op.Group)
	if err := mgmt.Get(ctx, client.ObjectKeyFromObject(md), md); err != nil {
		return Result{}, err
	}
	template := &infrav1.SimMachineTemplate{}
	if err := mgmt.Get(ctx, client.ObjectKey{Namespace: md.Namespace, Name: md.Spec.Template.Spec.InfrastructureRef.Name}, template); err != nil {
		return Result{}, err
	}
	next := &infrav1.SimMachineTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: fmt.Sprintf("%s-%d", md.Name, op.Seq)},
		Spec:       template.Spec,
	}
	if err := mgmt.Create(ctx, next); err != nil {
		return Result{}, err
	}
	result := Result{Target: fmt.Sprintf("%s to SimMachineTemplate %s", groupTarget(md), next.Name)}
	return result, update(ctx, mgmt, md, func(md *clusterv1.MachineDeployment) error {
		md.Spec.Template.Spec.InfrastructureRef.Name = next.Name
		return nil
	})
}
