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
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
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

// remediationTimeout is how long a Node must be NotReady before the
// soak's MachineHealthChecks find its Machine unhealthy.
const remediationTimeout = 5

// remediate puts a MachineHealthCheck on the group and makes the Node of
// one of its Machines, op.Pick among them, NotReady: the
// MachineHealthCheck finds the Machine unhealthy and Cluster API deletes
// it (the invariant watcher accepts remediation) and its MachineSet
// replaces it. After op.For the MachineHealthCheck goes and the Node, if
// it is still there (a paused Cluster or group holds remediation off),
// is Ready again.
func remediate(ctx context.Context, env *Env, op Operation) (Result, error) {
	mgmt := env.Stack.Management.Client
	md := env.group(op.Group)
	machines, err := env.liveMachines(ctx)
	if err != nil {
		return Result{}, err
	}
	var nodes []string
	for _, m := range machines {
		if m.Labels[clusterv1.MachineDeploymentNameLabel] == md.Name && m.Status.NodeRef.IsDefined() {
			nodes = append(nodes, m.Status.NodeRef.Name)
		}
	}
	node, ok := pick(nodes, op.Pick)
	if !ok {
		return Result{Target: groupTarget(md), Skipped: "no Machine with a Node"}, nil
	}
	mhc := &clusterv1.MachineHealthCheck{
		ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: fmt.Sprintf("%s-%d", md.Name, op.Seq)},
		Spec: clusterv1.MachineHealthCheckSpec{
			ClusterName: env.Cluster.Name,
			Selector:    metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}},
			Checks: clusterv1.MachineHealthCheckChecks{UnhealthyNodeConditions: []clusterv1.UnhealthyNodeCondition{{
				Type: corev1.NodeReady, Status: corev1.ConditionFalse, TimeoutSeconds: ptr.To[int32](remediationTimeout),
			}}},
		},
	}
	result := Result{Target: fmt.Sprintf("MachineHealthCheck %s, Node %s NotReady", klog.KObj(mhc), node)}
	if err := mgmt.Create(ctx, mhc); err != nil {
		return result, err
	}
	result.Undo = &Undo{After: op.For, Name: fmt.Sprintf("MachineHealthCheck %s deleted, Node %s Ready", mhc.Name, node), Do: func(ctx context.Context, env *Env) error {
		return errors.Join(ignoreGone(env.Stack.Management.Client.Delete(ctx, mhc)), env.setNodeLabel(ctx, node, localstack.NodeNotReadyLabel, ""))
	}}
	return result, env.setNodeLabel(ctx, node, localstack.NodeNotReadyLabel, "true")
}

// kubeletGoneFinalizer holds a pod Terminating as a kubelet that is down
// does: nothing confirms that its containers ended.
const kubeletGoneFinalizer = "soak.e2e.capi-autoscaler.io/kubelet-gone"

// stuckGracePeriod is the grace period of the pod KubeletDown leaves
// Terminating: longer than any soak.
const stuckGracePeriod = 3600

// kubeletDown takes the kubelet of a Node of the soak's Cluster, op.Pick
// among them, down for op.For: it reports the Node NotReady or, op.Dead,
// stops posting its status (its conditions turn Unknown). A pod on the
// Node, with a long grace period, is deleted meanwhile and stays
// Terminating until the kubelet is back.
func kubeletDown(ctx context.Context, env *Env, op Operation) (Result, error) {
	workload := env.Stack.Workload.Client
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes, client.MatchingLabels{framework.ClusterLabel: env.Cluster.Name}); err != nil {
		return Result{}, err
	}
	var names []string
	for _, node := range nodes.Items {
		if node.DeletionTimestamp == nil {
			names = append(names, node.Name)
		}
	}
	name, ok := pick(names, op.Pick)
	if !ok {
		return Result{Skipped: "no Node"}, nil
	}
	label := localstack.NodeNotReadyLabel
	if op.Dead {
		label = localstack.NodeKubeletDeadLabel
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace, Name: fmt.Sprintf("stuck-%d", op.Seq), Finalizers: []string{kubeletGoneFinalizer}},
		Spec: corev1.PodSpec{
			NodeName:                      name,
			TerminationGracePeriodSeconds: ptr.To[int64](stuckGracePeriod),
			Containers:                    []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	result := Result{Target: fmt.Sprintf("Node %s, pod %s stuck Terminating", name, klog.KObj(pod)), Undo: &Undo{
		After: op.For, Name: "kubelet of Node " + name + " back",
		Do: func(ctx context.Context, env *Env) error {
			// Deleted again, should its first deletion have failed.
			return errors.Join(env.setNodeLabel(ctx, name, label, ""), ignoreGone(env.Stack.Workload.Client.Delete(ctx, pod)), env.releasePod(ctx, pod))
		},
	}}
	if err := workload.Create(ctx, pod); err != nil {
		return Result{Target: result.Target}, err
	}
	return result, errors.Join(env.setNodeLabel(ctx, name, label, "true"), workload.Delete(ctx, pod))
}

// setNodeLabel sets a label of a Node, or removes it when value is empty;
// a Node that is gone needs none.
func (env *Env) setNodeLabel(ctx context.Context, name, key, value string) error {
	return ignoreGone(update(ctx, env.Stack.Workload.Client, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, func(node *corev1.Node) error {
		labels := node.GetLabels()
		framework.SetOrDelete(&labels, key, value)
		node.SetLabels(labels)
		return nil
	}))
}

// ReleaseStuckPods lets the pods KubeletDown left Terminating go, for a
// soak that failed before undoing it: they would hold their namespace's
// deletion.
func (env *Env) ReleaseStuckPods(ctx context.Context) error {
	pods := &corev1.PodList{}
	if err := env.Stack.Workload.Client.List(ctx, pods, client.InNamespace(env.Namespace)); err != nil {
		return err
	}
	var errs []error
	for i := range pods.Items {
		if slices.Contains(pods.Items[i].Finalizers, kubeletGoneFinalizer) {
			errs = append(errs, env.releasePod(ctx, &pods.Items[i]))
		}
	}
	return errors.Join(errs...)
}

// releasePod removes the finalizer that holds a pod Terminating.
func (env *Env) releasePod(ctx context.Context, pod *corev1.Pod) error {
	return ignoreGone(update(ctx, env.Stack.Workload.Client, pod, func(p *corev1.Pod) error {
		p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == kubeletGoneFinalizer })
		return nil
	}))
}
