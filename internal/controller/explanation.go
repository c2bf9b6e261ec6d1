package controller

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

const (
	// explanationInterval is how often at most the explanation of a
	// ClusterAutoscaler is written: the loops of a busy cluster change it
	// every time. Short enough that a pod just created is explained by the
	// time its user asks; the upstream autoscaler writes its status
	// ConfigMap every loop.
	explanationInterval = 15 * time.Second
	// maxExplanationBytes keeps the explanation well within what an object
	// may hold (1 MiB), so that thousands of nodes cost a bounded write.
	maxExplanationBytes = 256 * 1024
	// maxExplainedPodNames is how many pods of a group are named.
	maxExplainedPodNames = 20
	// explanationFieldOwner is the field manager of the explanation's
	// server-side applies.
	explanationFieldOwner = "capi-autoscaler-explanation"
)

// explanationPublished is the last explanation written for an engine:
// when, and what it said but for its loop time; and whether the ConfigMap
// is known to be the ClusterAutoscaler's, or known not to be.
type explanationPublished struct {
	at      time.Time
	content []byte
	owned   bool
	foreign bool
}

// The API server authorizes an apply that creates the object as a create.
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;patch,roleName=manager-namespace-role

// publishExplanation writes what the engine's last loop decided, and why,
// into the ClusterAutoscaler's explanation ConfigMap, at most every
// explanationInterval and only when it changed. A failed write is logged
// and tried again at the next reconcile: the explanation is for users who
// ask, autoscaling does not depend on it.
func (r *ClusterAutoscalerReconciler) publishExplanation(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler, running *runningEngine, loop autoscaler.Status) {
	if loop.Err != nil || r.Clock.Since(running.explanation.at) < explanationInterval {
		return
	}
	explanation := explanationOf(loop)
	content, err := json.Marshal(explanation)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot encode the explanation")
		return
	}
	if bytes.Equal(content, running.explanation.content) {
		// Only its loop time would change.
		return
	}
	explanation.LoopTime = metav1.NewTime(loop.Time)
	explanation.DryRun = loop.DryRun
	data, err := json.Marshal(explanation)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot encode the explanation")
		return
	}
	configMap := corev1ac.ConfigMap(autoscalingv1alpha1.ExplanationConfigMapName(ca.Name), ca.Namespace).
		WithLabels(map[string]string{autoscalingv1alpha1.ExplanationLabel: ca.Name}).
		WithOwnerReferences(metav1ac.OwnerReference().
			WithAPIVersion(autoscalingv1alpha1.GroupVersion.String()).WithKind("ClusterAutoscaler").
			WithName(ca.Name).WithUID(ca.UID).WithController(true)).
		WithData(map[string]string{autoscalingv1alpha1.ExplanationDataKey: string(data)})
	owned, err := r.ownExplanation(ctx, ca, running, configMap)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot write the explanation", "ConfigMap", klog.KRef(ca.Namespace, *configMap.Name))
		return
	}
	if !owned {
		return
	}
	if err := r.Client.Apply(ctx, configMap, client.FieldOwner(explanationFieldOwner), client.ForceOwnership); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Cannot write the explanation", "ConfigMap", klog.KRef(ca.Namespace, *configMap.Name))
		return
	}
	running.explanation = explanationPublished{at: r.Clock.Now(), content: content, owned: true}
}

// ownExplanation makes sure, before the engine's first write, that the
// explanation ConfigMap is the ClusterAutoscaler's: it creates it, or
// finds it controlled by the ClusterAutoscaler already. A ConfigMap of
// that name that someone else made is never taken over, which would have
// it deleted with the ClusterAutoscaler: the explanation is not written,
// and an event says why, once per engine. The manager may not read
// ConfigMaps, so ownership is tested in a JSON patch that changes nothing.
func (r *ClusterAutoscalerReconciler) ownExplanation(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler, running *runningEngine, configMap *corev1ac.ConfigMapApplyConfiguration) (bool, error) {
	if running.explanation.owned {
		return true, nil
	}
	if running.explanation.foreign {
		return false, nil
	}
	created := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ca.Namespace, Name: *configMap.Name}}
	err := r.Client.Create(ctx, created, client.FieldOwner(explanationFieldOwner))
	if err == nil {
		// Owned from the apply that follows, which adds the owner.
		running.explanation.owned = true
		return true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	test, err := json.Marshal([]map[string]any{{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": ca.UID}})
	if err != nil {
		return false, err
	}
	err = r.Client.Patch(ctx, created, client.RawPatch(types.JSONPatchType, test))
	switch {
	case err == nil:
		running.explanation.owned = true
		return true, nil
	case apierrors.IsInvalid(err):
		running.explanation.foreign = true
		ctrl.LoggerFrom(ctx).Info("Not writing the explanation: a ConfigMap of its name exists that is not this ClusterAutoscaler's", "ConfigMap", klog.KObj(created))
		r.Recorder.Eventf(ca, corev1.EventTypeWarning, ExplanationConfigMapTakenReason,
			"ConfigMap %s exists and is not this ClusterAutoscaler's: the explanation of its loops is not written there, nor is it taken over (it would be deleted with the ClusterAutoscaler); delete or rename it", *configMap.Name)
		return false, nil
	default:
		return false, err
	}
}

// ExplanationConfigMapTakenReason is the reason of the event that says the
// explanation ConfigMap's name is taken by another ConfigMap.
const ExplanationConfigMapTakenReason = "ExplanationConfigMapTaken"

// explanationOf is the explanation of a loop, without its time, within
// maxExplanationBytes: groups of pods name only some of their pods and take
// half of it at most, and the nodes least likely to be asked about are
// left out first.
func explanationOf(loop autoscaler.Status) autoscalingv1alpha1.Explanation {
	var explanation autoscalingv1alpha1.Explanation
	podsSize := 0
	for _, pending := range loop.Explanation.PendingPods {
		group := autoscalingv1alpha1.PendingPodsExplanation{
			Outcome:   pendingOutcomes[pending.Outcome],
			Count:     int32(len(pending.Pods)),
			NodeGroup: pending.NodeGroup,
			Node:      pending.Node,
		}
		for _, pod := range pending.Pods[:min(len(pending.Pods), maxExplainedPodNames)] {
			group.Pods = append(group.Pods, pod.Namespace+"/"+pod.Name)
		}
		for _, id := range slices.Sorted(maps.Keys(pending.Reasons)) {
			group.NodeGroupReasons = append(group.NodeGroupReasons, autoscalingv1alpha1.NodeGroupReasons{NodeGroup: id, Reasons: pending.Reasons[id]})
		}
		// Pods get half the room at most, nodes the rest.
		size := encodedSize(group)
		if podsSize+size > maxExplanationBytes/2 {
			explanation.OmittedPods += group.Count
			continue
		}
		podsSize += size
		explanation.OmittedPods += group.Count - int32(len(group.Pods))
		explanation.PendingPods = append(explanation.PendingPods, group)
	}
	nodes := make([]autoscalingv1alpha1.NodeExplanation, 0, len(loop.Explanation.Nodes))
	for _, decision := range loop.Explanation.Nodes {
		node := autoscalingv1alpha1.NodeExplanation{Name: decision.Name, NodeGroup: decision.NodeGroup, ScaleDown: autoscalingv1alpha1.NodeKept,
			Reason: string(decision.Kept.Reason), Message: truncate(decision.Kept.Message, maxReasonLength)}
		if decision.Removing {
			node.ScaleDown = autoscalingv1alpha1.NodeRemoving
		}
		if decision.Consolidation != "" {
			node.Reason, node.Message = autoscalingv1alpha1.ConsolidationReason, truncate(decision.Consolidation, maxReasonLength)
		}
		if decision.Measured {
			node.UtilizationPercent = ptr.To(int32(math.Round(decision.Utilization * 100)))
		}
		if !decision.UnneededSince.IsZero() {
			node.UnneededSince = statusTime(decision.UnneededSince)
		}
		nodes = append(nodes, node)
	}
	explanation.Nodes = withinBytes(nodes, maxExplanationBytes-encodedSize(explanation))
	explanation.OmittedNodes = int32(len(nodes) - len(explanation.Nodes))
	return explanation
}

// pendingOutcomes are the API's names of the engine's outcomes.
var pendingOutcomes = map[autoscaler.PendingOutcome]autoscalingv1alpha1.PendingPodsOutcome{
	autoscaler.TriggeredScaleUp:  autoscalingv1alpha1.PendingPodsTriggeredScaleUp,
	autoscaler.WaitForNode:       autoscalingv1alpha1.PendingPodsWaitForNode,
	autoscaler.NotTriggerScaleUp: autoscalingv1alpha1.PendingPodsNotTriggerScaleUp,
}

// withinBytes returns the nodes, in their order, whose encodings fit in
// budget bytes, leaving out first the nodes kept for their utilization,
// the most used first, then the others from the last.
func withinBytes(nodes []autoscalingv1alpha1.NodeExplanation, budget int) []autoscalingv1alpha1.NodeExplanation {
	// Most clusters fit: one encoding says so.
	if encodedSize(nodes) <= budget {
		return nodes
	}
	sizes := make([]int, len(nodes))
	total := 0
	for i := range nodes {
		sizes[i] = encodedSize(nodes[i]) + len(",")
		total += sizes[i]
	}
	leaveOut := make([]int, len(nodes))
	for i := range leaveOut {
		leaveOut[i] = i
	}
	busy := func(node autoscalingv1alpha1.NodeExplanation) bool {
		return node.Reason == string(scaledown.ReasonNotUnderutilized)
	}
	slices.SortStableFunc(leaveOut, func(a, b int) int {
		if busy(nodes[a]) != busy(nodes[b]) {
			if busy(nodes[a]) {
				return -1
			}
			return 1
		}
		if busy(nodes[a]) {
			return cmp.Compare(ptr.Deref(nodes[b].UtilizationPercent, 0), ptr.Deref(nodes[a].UtilizationPercent, 0))
		}
		return cmp.Compare(b, a)
	})
	left := make([]bool, len(nodes))
	for _, i := range leaveOut {
		if total <= budget {
			break
		}
		left[i] = true
		total -= sizes[i]
	}
	kept := make([]autoscalingv1alpha1.NodeExplanation, 0, len(nodes))
	for i, node := range nodes {
		if !left[i] {
			kept = append(kept, node)
		}
	}
	return kept
}

func encodedSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
