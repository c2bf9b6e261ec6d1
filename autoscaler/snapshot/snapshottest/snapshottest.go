// Package snapshottest builds nodes, pods and node groups for tests of the
// engine, with the fields that matter for scheduling set the way a real
// cluster sets them.
package snapshottest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/pricing"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// NodeOption changes a node built by Node.
type NodeOption func(*corev1.Node)

// Node returns a ready node with the given cpu and memory (e.g. "4",
// "16Gi") as capacity and allocatable, room for 110 pods, and the hostname
// label.
func Node(name, cpu, memory string, opts ...NodeOption) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, opt := range opts {
		opt(node)
	}
	return node
}

// WithNodeLabels adds labels.
func WithNodeLabels(kv ...string) NodeOption {
	return func(node *corev1.Node) {
		for i := 0; i+1 < len(kv); i += 2 {
			node.Labels[kv[i]] = kv[i+1]
		}
	}
}

// WithTaint adds a taint.
func WithTaint(key, value string, effect corev1.TaintEffect) NodeOption {
	return func(node *corev1.Node) {
		node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	}
}

// WithAllocatable sets one allocatable resource (capacity too when it was unset).
func WithAllocatable(name corev1.ResourceName, quantity string) NodeOption {
	return func(node *corev1.Node) {
		node.Status.Allocatable[name] = resource.MustParse(quantity)
		if _, ok := node.Status.Capacity[name]; !ok {
			node.Status.Capacity[name] = resource.MustParse(quantity)
		}
	}
}

// Unschedulable cordons the node.
func Unschedulable() NodeOption {
	return func(node *corev1.Node) { node.Spec.Unschedulable = true }
}

// PodOption changes a pod built by Pod.
type PodOption func(*corev1.Pod)

// Pod returns a pod in namespace "default" with one container requesting
// cpu and memory (empty strings request nothing), created an hour before
// Now and marked Unschedulable by the scheduler.
func Pod(name, cpu, memory string, opts ...PodOption) *corev1.Pod {
	requests := corev1.ResourceList{}
	if cpu != "" {
		requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
	if memory != "" {
		requests[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(Now.Add(-time.Hour)),
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{Requests: requests}}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			}},
		},
	}
	for _, opt := range opts {
		opt(pod)
	}
	return pod
}

// Now is the time test pods are created relative to.
var Now = time.Date(2026, time.January, 1, 12, 0, 0, 0, time.UTC)

// OnNode binds the pod to a node, running.
func OnNode(nodeName string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.NodeName = nodeName
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}
	}
}

// OwnedBy makes a ReplicaSet with the given name the pod's controller.
func OwnedBy(replicaSet string) PodOption {
	return func(pod *corev1.Pod) {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: replicaSet,
			UID: types.UID("uid-rs-" + replicaSet), Controller: ptr.To(true),
		}}
	}
}

// Controllers returns the metadata of the controllers the pods name, once
// each, as the engine reads them from a cluster where they exist.
func Controllers(pods ...*corev1.Pod) []*metav1.PartialObjectMetadata {
	var controllers []*metav1.PartialObjectMetadata
	seen := map[types.UID]bool{}
	for _, pod := range pods {
		owner := metav1.GetControllerOf(pod)
		if owner == nil || seen[owner.UID] {
			continue
		}
		seen[owner.UID] = true
		controllers = append(controllers, &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: owner.APIVersion, Kind: owner.Kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: owner.Name, UID: owner.UID},
		})
	}
	return controllers
}

// CustomDaemonSetPod makes the pod a daemon of a NodeAgent (example.com/v1)
// with the given name: a DaemonSet controller other than the DaemonSet,
// which annotates its pods snapshot.DaemonSetPodAnnotation "true".
func CustomDaemonSetPod(nodeAgent string) PodOption {
	return func(pod *corev1.Pod) {
		pod.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "example.com/v1", Kind: "NodeAgent", Name: nodeAgent,
			UID: types.UID("uid-nodeagent-" + nodeAgent), Controller: ptr.To(true),
		}}
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		pod.Annotations[snapshot.DaemonSetPodAnnotation] = "true"
	}
}

// WithPodLabels adds labels.
func WithPodLabels(kv ...string) PodOption {
	return func(pod *corev1.Pod) {
		if pod.Labels == nil {
			pod.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			pod.Labels[kv[i]] = kv[i+1]
		}
	}
}

// WithToleration adds a toleration of key=value with the given effect.
func WithToleration(key, value string, effect corev1.TaintEffect) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: effect})
	}
}

// WithNodeSelector adds node selector entries.
func WithNodeSelector(kv ...string) PodOption {
	return func(pod *corev1.Pod) {
		if pod.Spec.NodeSelector == nil {
			pod.Spec.NodeSelector = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			pod.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

// WithRequest adds a request of the first container.
func WithRequest(name corev1.ResourceName, quantity string) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Containers[0].Resources.Requests[name] = resource.MustParse(quantity)
	}
}

// WithHostPort makes the first container bind a TCP host port.
func WithHostPort(port int32) PodOption {
	return func(pod *corev1.Pod) {
		pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP})
	}
}

// WithPriority sets the pod priority.
func WithPriority(priority int32) PodOption {
	return func(pod *corev1.Pod) { pod.Spec.Priority = ptr.To(priority) }
}

// CreatedAt sets the creation time.
func CreatedAt(t time.Time) PodOption {
	return func(pod *corev1.Pod) { pod.CreationTimestamp = metav1.NewTime(t) }
}

// Terminating marks the pod deleted with its grace period ending at
// gracePeriodEnd, which the API server records as its deletionTimestamp,
// and holds it with a finalizer, as fake clients require of objects being
// deleted.
func Terminating(gracePeriodEnd time.Time) PodOption {
	return func(pod *corev1.Pod) {
		pod.DeletionTimestamp = ptr.To(metav1.NewTime(gracePeriodEnd))
		pod.Finalizers = append(pod.Finalizers, "test.capi-autoscaler.io/hold")
	}
}

// Replicas returns n pods named prefix-0..n-1 owned by one ReplicaSet.
func Replicas(prefix string, n int, cpu, memory string, opts ...PodOption) []*corev1.Pod {
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		pods = append(pods, Pod(fmt.Sprintf("%s-%d", prefix, i), cpu, memory, append([]PodOption{OwnedBy(prefix)}, opts...)...))
	}
	return pods
}

// NodeGroup is an in-memory node group that records resizes.
type NodeGroup struct {
	Name     string
	Min, Max int
	Target   int
	// Nodes are the names of the registered members.
	Nodes []string
	// Template is returned by TemplateNode; when nil it fails.
	Template *corev1.Node
	// Price is the group's own price per node-hour, in its Options.
	Price *pricing.Price
	// Increases records the deltas passed to IncreaseSize.
	Increases []int
	// Deleted records the names of the nodes passed to DeleteNodes.
	Deleted []string
	// ScaleDownRefusal, when set, is what CheckScaleDown and DeleteNodes
	// return, as a group that started rolling out or was paused would.
	ScaleDownRefusal error
	// DeleteNodesErr, when set, is what DeleteNodes returns after its
	// checks passed, as an API server refusing the write would.
	DeleteNodesErr error
	// Cancelled records the names of the nodes passed to CancelDeletion.
	Cancelled []string
	// MinRule, set by WithMinSize, makes MinSize of Min.
	MinRule nodegroups.MinSizeRule
	// GroupLabels are the labels of the object behind the group.
	GroupLabels map[string]string
}

var _ nodegroups.NodeGroup = &NodeGroup{}

// ID implements nodegroups.NodeGroup.
func (g *NodeGroup) ID() string { return g.Name }

// MinSize implements nodegroups.NodeGroup.
func (g *NodeGroup) MinSize() int {
	if g.MinRule != nil {
		return min(g.MinRule(g.Min), g.Max)
	}
	return g.Min
}

// Labels implements nodegroups.NodeGroup.
func (g *NodeGroup) Labels() map[string]string { return g.GroupLabels }

// WithMinSize implements nodegroups.NodeGroup: it sets MinRule on the
// group itself, so that the test sees what is asked of it.
func (g *NodeGroup) WithMinSize(rule nodegroups.MinSizeRule) nodegroups.NodeGroup {
	g.MinRule = rule
	return g
}

// MaxSize implements nodegroups.NodeGroup.
func (g *NodeGroup) MaxSize() int { return g.Max }

// TargetSize implements nodegroups.NodeGroup.
func (g *NodeGroup) TargetSize() int { return g.Target }

// Instances implements nodegroups.NodeGroup.
func (g *NodeGroup) Instances() []nodegroups.Instance {
	instances := make([]nodegroups.Instance, 0, len(g.Nodes))
	for _, name := range g.Nodes {
		instances = append(instances, nodegroups.Instance{ID: "fake://" + name, NodeName: name, State: nodegroups.InstanceRunning})
	}
	return instances
}

// Options implements nodegroups.NodeGroup.
func (g *NodeGroup) Options() nodegroups.GroupOptions { return nodegroups.GroupOptions{Price: g.Price} }

// ScaleDownBlockedReason implements nodegroups.NodeGroup.
func (g *NodeGroup) ScaleDownBlockedReason() string { return "" }

// RemovesChosenInstances implements nodegroups.NodeGroup.
func (g *NodeGroup) RemovesChosenInstances() bool { return true }

// TemplateNode implements nodegroups.NodeGroup.
func (g *NodeGroup) TemplateNode(context.Context) (*corev1.Node, error) {
	if g.Template == nil {
		return nil, errors.New("no capacity information")
	}
	return g.Template, nil
}

// IncreaseSize implements nodegroups.NodeGroup.
func (g *NodeGroup) IncreaseSize(_ context.Context, delta int) error {
	if g.Target+delta > g.Max {
		return fmt.Errorf("size %d would exceed the maximum %d", g.Target+delta, g.Max)
	}
	g.Target += delta
	g.Increases = append(g.Increases, delta)
	return nil
}

// CheckScaleDown implements nodegroups.NodeGroup.
func (g *NodeGroup) CheckScaleDown(_ context.Context, removing int) error {
	if g.ScaleDownRefusal != nil {
		return g.ScaleDownRefusal
	}
	if g.Target-removing < g.MinSize() {
		return &nodegroups.RefusedError{Reason: fmt.Sprintf("size %d would go below the minimum %d", g.Target-removing, g.MinSize())}
	}
	return nil
}

// CancelDeletion implements nodegroups.NodeGroup.
func (g *NodeGroup) CancelDeletion(_ context.Context, nodes []*corev1.Node) error {
	for _, node := range nodes {
		g.Cancelled = append(g.Cancelled, node.Name)
	}
	return nil
}

// DeleteNodes implements nodegroups.NodeGroup.
func (g *NodeGroup) DeleteNodes(ctx context.Context, nodes []*corev1.Node) error {
	if err := g.CheckScaleDown(ctx, len(nodes)); err != nil {
		return err
	}
	if g.DeleteNodesErr != nil {
		return g.DeleteNodesErr
	}
	for _, node := range nodes {
		i := slices.Index(g.Nodes, node.Name)
		if i < 0 {
			return fmt.Errorf("node %s is not in group %s", node.Name, g.Name)
		}
		g.Nodes = slices.Delete(g.Nodes, i, i+1)
		g.Target--
		g.Deleted = append(g.Deleted, node.Name)
	}
	return nil
}

// DeleteInstances implements nodegroups.NodeGroup; the test group has
// only registered members, so it only lowers the target.
func (g *NodeGroup) DeleteInstances(ctx context.Context, instances []nodegroups.Instance) error {
	return g.DecreaseTargetSize(ctx, len(instances))
}

// DecreaseTargetSize implements nodegroups.NodeGroup.
func (g *NodeGroup) DecreaseTargetSize(_ context.Context, delta int) error {
	if g.Target-delta < len(g.Nodes) {
		return fmt.Errorf("target %d would be below the %d registered nodes", g.Target-delta, len(g.Nodes))
	}
	g.Target -= delta
	return nil
}
