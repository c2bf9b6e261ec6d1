package simulator

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// SetTemplates builds the template of every node group of snap and stores
// it there (snapshot.SetTemplate): from a member of the group that shows
// what a new node would be when it has one, else from the group's own
// TemplateNode, turned into a template by rules, plus the pods of the
// DaemonSets that would run on it and, from a member, those of the
// DaemonSet controllers of other kinds, and, from a member, copies of the
// member's node-local ResourceSlices (snapshot.NodeInfo.WithResourceSlices),
// or, from the group, the slice of the devices its template node describes
// (snapshot.TemplateDevicesAnnotation), so that claims for its devices fit
// the template. Groups that have a template keep
// it. Groups without one are returned with why; they cannot scale up.
func SetTemplates(ctx context.Context, snap *snapshot.Snapshot, rules nodefacts.Rules) map[string]error {
	logger := klog.FromContext(ctx)
	failed := map[string]error{}
	for _, group := range snap.NodeGroups() {
		if snap.Template(group.ID()) != nil {
			continue
		}
		var example *corev1.Node
		var limits snapshot.AttachLimits
		var customDaemons []*snapshot.PodInfo
		var resourceSlices []*resourceapi.ResourceSlice
		var devices snapshot.TemplateDevices
		if member := TemplateMember(snap, group); member != nil {
			example, limits, customDaemons = member.Node(), member.AttachLimits(), customDaemonSetPods(member)
			resourceSlices = member.ResourceSlices()
		} else {
			var err error
			if example, err = group.TemplateNode(ctx); err != nil {
				failed[group.ID()] = err
				continue
			}
			if limits, err = templateAttachLimits(example); err != nil {
				failed[group.ID()] = err
				continue
			}
			if devices, err = snapshot.TemplateDevicesOf(example); err != nil {
				failed[group.ID()] = err
				continue
			}
		}
		node := rules.TemplateNode(example, group.ID())
		if devices.Count > 0 {
			resourceSlices = devices.ResourceSlices(node.Name)
		}
		snap.SetTemplate(group.ID(), TemplateNodeInfo(ctx, node, snap.DaemonSets(), customDaemons...).WithAttachLimits(limits).WithResourceSlices(resourceSlices))
		logger.V(5).Info("Built node group template", "nodeGroup", group.ID(), "from", example.Name, "allocatable", node.Status.Allocatable, "attachLimits", limits, "resourceSlices", len(resourceSlices))
	}
	return failed
}

// templateAttachLimits reads the CSI attach limits a template node of a
// group without nodes carries (snapshot.AttachLimitsAnnotation).
func templateAttachLimits(node *corev1.Node) (snapshot.AttachLimits, error) {
	value, ok := node.Annotations[snapshot.AttachLimitsAnnotation]
	if !ok {
		return nil, nil
	}
	limits, err := snapshot.ParseAttachLimits(value)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", snapshot.AttachLimitsAnnotation, err)
	}
	return limits, nil
}

// TemplateMember returns the first registered member of the group that
// shows what a new node would be, or nil.
func TemplateMember(snap *snapshot.Snapshot, group nodegroups.NodeGroup) *snapshot.NodeInfo {
	for _, name := range snap.RegisteredNodes(group.ID()) {
		if nodeInfo := snap.NodeInfo(name); nodeInfo != nil && nodefacts.UsableAsTemplate(nodeInfo.Node()) {
			return nodeInfo
		}
	}
	return nil
}

// customDaemonSetPods are the pods the member runs for DaemonSet
// controllers of other kinds (snapshot.Pod.IsDaemonSetPod): a new node
// runs them too, and no object of theirs that the engine reads says so.
// The pods of DaemonSets come from the DaemonSets themselves.
func customDaemonSetPods(member *snapshot.NodeInfo) []*snapshot.PodInfo {
	var pods []*snapshot.PodInfo
	for _, pod := range member.Pods() {
		if pod.Pod.IsDaemonSetPod() && !controlledByADaemonSet(pod.Pod) && pod.Pod.DeletionTimestamp == nil {
			pods = append(pods, pod)
		}
	}
	return pods
}

// controlledByADaemonSet tells whether the pod's controller is one of the
// DaemonSets the snapshot holds.
func controlledByADaemonSet(pod *snapshot.Pod) bool {
	owner := pod.Controller()
	if owner == nil {
		return false
	}
	return schema.FromAPIVersionAndKind(owner.APIVersion, owner.Kind).GroupKind() == schema.GroupKind{Group: appsv1.GroupName, Kind: "DaemonSet"}
}

// TemplateNodeInfo returns node with the pods of the DaemonSets that would
// run on it, and others.
func TemplateNodeInfo(ctx context.Context, node *corev1.Node, daemonSets []*appsv1.DaemonSet, others ...*snapshot.PodInfo) *snapshot.NodeInfo {
	pods := DaemonSetPods(ctx, node, daemonSets)
	infos := make([]*snapshot.PodInfo, 0, len(pods)+len(others))
	for _, pod := range pods {
		infos = append(infos, snapshot.NewPodInfo(pod))
	}
	return snapshot.NewNodeInfo(node, append(infos, others...)...)
}

// DaemonSetPods returns the pods the DaemonSet controller would create for
// node: those whose node selector, node affinity and tolerations (with the
// tolerations the controller adds) let them run there.
func DaemonSetPods(ctx context.Context, node *corev1.Node, daemonSets []*appsv1.DaemonSet) []*corev1.Pod {
	logger := klog.FromContext(ctx)
	var pods []*corev1.Pod
	for _, ds := range daemonSets {
		pod := daemonSetPod(ds, node.Name)
		if match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !match {
			continue
		}
		if _, untolerated := findUntoleratedTaint(logger, node, pod.Spec.Tolerations); untolerated {
			continue
		}
		pods = append(pods, pod)
	}
	return pods
}

func daemonSetPod(ds *appsv1.DaemonSet, nodeName string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%s", ds.Name, nodeName),
			Namespace: ds.Namespace,
			Labels:    ds.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, daemonSetTolerations(pod.Spec.HostNetwork)...)
	return pod
}

// daemonSetTolerations are the tolerations the DaemonSet controller adds
// to every daemon pod.
func daemonSetTolerations(hostNetwork bool) []corev1.Toleration {
	tolerations := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if hostNetwork {
		tolerations = append(tolerations, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return tolerations
}
