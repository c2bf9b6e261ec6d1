package simulator

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Taints the autoscaler puts on nodes it removes; a template must not
// inherit them from the real node it is copied from.
const (
	ToBeDeletedTaint       = "ToBeDeletedByClusterAutoscaler"
	DeletionCandidateTaint = "DeletionCandidateOfClusterAutoscaler"
)

// SetTemplates builds the template of every node group of snap and stores
// it there (snapshot.SetTemplate): a copy of a ready member of the group
// when it has one, else the group's own TemplateNode, plus the pods of the
// DaemonSets that would run on it. Groups that have a template keep it.
// Groups without one are returned with why; they cannot scale up.
func SetTemplates(ctx context.Context, snap *snapshot.Snapshot) map[string]error {
	logger := klog.FromContext(ctx)
	failed := map[string]error{}
	for _, group := range snap.NodeGroups() {
		if snap.Template(group.ID()) != nil {
			continue
		}
		node := templateFromMember(snap, group)
		if node == nil {
			var err error
			if node, err = group.TemplateNode(ctx); err != nil {
				failed[group.ID()] = err
				continue
			}
			node = node.DeepCopy()
		}
		node.Name = templateName(group.ID())
		if node.Labels == nil {
			node.Labels = map[string]string{}
		}
		node.Labels[corev1.LabelHostname] = node.Name
		snap.SetTemplate(group.ID(), TemplateNodeInfo(ctx, node, snap.DaemonSets()))
		logger.V(5).Info("Built node group template", "nodeGroup", group.ID(), "allocatable", node.Status.Allocatable)
	}
	return failed
}

func templateName(groupID string) string {
	return "template-" + strings.NewReplacer("/", "-", ".", "-").Replace(strings.ToLower(groupID))
}

// templateFromMember copies a ready, schedulable member of the group
// without the marks of its own life: taints added by the autoscaler or by
// node conditions.
func templateFromMember(snap *snapshot.Snapshot, group nodegroups.NodeGroup) *corev1.Node {
	for _, name := range snap.RegisteredNodes(group.ID()) {
		nodeInfo := snap.NodeInfo(name)
		if nodeInfo == nil || !usableAsTemplate(nodeInfo.Node()) {
			continue
		}
		node := nodeInfo.Node().DeepCopy()
		node.Spec.Taints = nil
		for _, taint := range nodeInfo.Node().Spec.Taints {
			if !transientTaint(taint) {
				node.Spec.Taints = append(node.Spec.Taints, taint)
			}
		}
		node.Spec.ProviderID = ""
		node.ResourceVersion, node.UID = "", ""
		return node
	}
	return nil
}

func usableAsTemplate(node *corev1.Node) bool {
	if node.Spec.Unschedulable || node.DeletionTimestamp != nil {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if taint.Key == ToBeDeletedTaint {
			return false
		}
	}
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue
		}
	}
	return false
}

func transientTaint(taint corev1.Taint) bool {
	return taint.Key == ToBeDeletedTaint || taint.Key == DeletionCandidateTaint ||
		strings.HasPrefix(taint.Key, "node.kubernetes.io/") || taint.Key == "node.cloudprovider.kubernetes.io/uninitialized"
}

// TemplateNodeInfo returns node with the pods of the DaemonSets that would
// run on it.
func TemplateNodeInfo(ctx context.Context, node *corev1.Node, daemonSets []*appsv1.DaemonSet) *snapshot.NodeInfo {
	pods := DaemonSetPods(ctx, node, daemonSets)
	infos := make([]*snapshot.PodInfo, 0, len(pods))
	for _, pod := range pods {
		infos = append(infos, snapshot.NewPodInfo(pod))
	}
	return snapshot.NewNodeInfo(node, infos...)
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
		if _, untolerated := findUntoleratedTaint(logger, node, pod); untolerated {
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
