package view

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// conditionTypes are the conditions the views show, in this order.
var conditionTypes = []string{
	autoscalingv1alpha1.ReadyCondition,
	autoscalingv1alpha1.ScalingActiveCondition,
	autoscalingv1alpha1.ClusterHealthyCondition,
	autoscalingv1alpha1.ConfigurationAppliedCondition,
}

// reportingConditionTypes are conditions the views show after those, only
// when set: they appear with what they report.
var reportingConditionTypes = []string{
	autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition,
	autoscalingv1alpha1.ScheduledMinimumsValidCondition,
}

// Observe reads the ClusterAutoscalers in scope, their explanations and the
// events of them and their node groups, as the status and live views show
// them.
func Observe(ctx context.Context, c client.Reader, scope cli.Scope) (*StatusView, error) {
	autoscalers, err := listClusterAutoscalers(ctx, c, scope)
	if err != nil {
		return nil, err
	}
	events := &eventReader{client: c}
	view := &StatusView{Clusters: []ClusterView{}}
	for i := range autoscalers {
		ca := &autoscalers[i]
		cluster := clusterView(ca)
		explanation, err := readExplanation(ctx, c, ca)
		switch {
		case isReadProblem(err):
			cluster.Problems = append(cluster.Problems, err.Error())
		case err != nil:
			return nil, err
		case explanation != nil:
			addExplanation(&cluster, explanation)
		}
		recent, err := events.recent(ctx, ca)
		switch {
		case apierrors.IsForbidden(err):
			cluster.Problems = append(cluster.Problems, "cannot read events: "+err.Error())
		case err != nil:
			return nil, err
		default:
			cluster.RecentEvents = recent
		}
		view.Clusters = append(view.Clusters, cluster)
	}
	return view, nil
}

// listClusterAutoscalers lists the ClusterAutoscalers in scope, by namespace
// and Cluster, then in the order in which they own their Cluster: the oldest
// first, ties broken by name.
func listClusterAutoscalers(ctx context.Context, c client.Reader, scope cli.Scope) ([]autoscalingv1alpha1.ClusterAutoscaler, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	if err := c.List(ctx, list, client.InNamespace(scope.Namespace)); err != nil {
		return nil, fmt.Errorf("listing ClusterAutoscalers %s: %w", scope, err)
	}
	autoscalers := slices.DeleteFunc(list.Items, func(ca autoscalingv1alpha1.ClusterAutoscaler) bool {
		return scope.Cluster != "" && ca.Spec.ClusterName != scope.Cluster
	})
	slices.SortFunc(autoscalers, func(a, b autoscalingv1alpha1.ClusterAutoscaler) int {
		return cmp.Or(
			strings.Compare(a.Namespace, b.Namespace),
			strings.Compare(a.Spec.ClusterName, b.Spec.ClusterName),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			strings.Compare(a.Name, b.Name))
	})
	return autoscalers, nil
}

// dryRunDecisionViews are the decisions of a DryRun ClusterAutoscaler.
func dryRunDecisionViews(decisions []autoscalingv1alpha1.DryRunDecision) []DryRunDecisionView {
	views := make([]DryRunDecisionView, 0, len(decisions))
	for i := range decisions {
		d := &decisions[i]
		view := DryRunDecisionView{Time: &d.Time, Kind: string(d.Kind), ProvisioningRequest: d.ProvisioningRequest,
			NodeGroups: []NodeGroupDeltaView{}, Nodes: d.Nodes, Pods: d.PodCount}
		if a := d.Answer; a != nil {
			view.Answer = &AnswerView{ConditionType: a.ConditionType, Status: a.Status, Reason: a.Reason, Message: a.Message}
		}
		for _, g := range d.NodeGroups {
			view.NodeGroups = append(view.NodeGroups, NodeGroupDeltaView{ID: g.ID, Delta: g.Delta})
		}
		views = append(views, view)
	}
	return views
}

// clusterView is what the status of a ClusterAutoscaler says.
func clusterView(ca *autoscalingv1alpha1.ClusterAutoscaler) ClusterView {
	status := &ca.Status
	view := ClusterView{
		Namespace:         ca.Namespace,
		Cluster:           ca.Spec.ClusterName,
		ClusterAutoscaler: ca.Name,
		Mode:              string(ca.Spec.Mode),
		DryRunDecisions:   dryRunDecisionViews(status.DryRunDecisions),
		Nodes:             status.Nodes,
		ReadyNodes:        status.ReadyNodes,
		NodeGroups:        []NodeGroupView{},
		Pending:           PendingView{UnschedulablePods: status.UnschedulablePods, PodsLeftForNextLoop: status.PodsLeftForNextLoop},
		LastLoopTime:      status.LastLoopTime,
		LastScaleUpTime:   status.LastScaleUpTime,
		LastScaleDownTime: status.LastScaleDownTime,
		RecentEvents:      []EventView{},
	}
	for _, conditionType := range conditionTypes {
		condition := ConditionView{Type: conditionType, Status: metav1.ConditionUnknown}
		if c := meta.FindStatusCondition(status.Conditions, conditionType); c != nil {
			condition.Status, condition.Reason, condition.Message = c.Status, c.Reason, c.Message
		}
		view.Conditions = append(view.Conditions, condition)
	}
	for _, conditionType := range reportingConditionTypes {
		if c := meta.FindStatusCondition(status.Conditions, conditionType); c != nil {
			view.Conditions = append(view.Conditions, ConditionView{Type: conditionType, Status: c.Status, Reason: c.Reason, Message: c.Message})
		}
	}
	for _, row := range status.NodeGroups {
		group := nodeGroupView(row.ID)
		group.MinSize, group.MaxSize = row.MinSize, row.MaxSize
		group.TargetSize, group.Registered, group.Ready, group.Upcoming = row.TargetSize, row.Registered, row.Ready, row.Upcoming
		group.BackoffUntil, group.BackoffReason, group.Problem = row.BackoffUntil, row.BackoffReason, row.Problem
		group.Price, group.PriceSource = row.Price, string(row.PriceSource)
		group.ScheduledMinimum = scheduledMinimumView(row.ScheduledMinimum)
		view.NodeGroups = append(view.NodeGroups, group)
	}
	for _, reason := range status.NotTriggerScaleUpReasons {
		view.Pending.NotTriggerScaleUpReasons = append(view.Pending.NotTriggerScaleUpReasons, ReasonCountView{
			// The status keeps the pods' event messages; the view says it once.
			Reason: strings.TrimPrefix(reason.Reason, scaleup.NotTriggerScaleUpPrefix), Pods: reason.Pods})
	}
	for _, buffer := range status.CapacityBuffers {
		view.Pending.CapacityBuffers = append(view.Pending.CapacityBuffers, CapacityBufferView{
			Name: buffer.Name, Replicas: buffer.Replicas, Held: buffer.Held, Upcoming: buffer.Upcoming,
			Unplaceable: buffer.Unplaceable, Message: buffer.Message,
		})
	}
	return view
}

// nodeGroupView is the row of a group, named by its ID.
func nodeGroupView(id string) NodeGroupView {
	group := NodeGroupView{ID: id, Name: id}
	if kind, _, name, ok := scalable.ParseID(id); ok {
		group.Kind, group.Name = kind, name
	}
	return group
}

// addExplanation adds the nodes of the explanation to their groups. A node
// of a group the status does not list (yet) gets a row of its own.
func addExplanation(view *ClusterView, explanation *autoscalingv1alpha1.Explanation) {
	view.Explanation = ExplanationState{LoopTime: &explanation.LoopTime, OmittedNodes: explanation.OmittedNodes}
	for _, node := range explanation.Nodes {
		nodeView := NodeView{
			Name: node.Name, UtilizationPercent: node.UtilizationPercent,
			ScaleDown: string(node.ScaleDown), Reason: node.Reason, UnneededSince: node.UnneededSince,
		}
		if node.NodeGroup == "" {
			view.OtherNodes = append(view.OtherNodes, nodeView)
			continue
		}
		i := slices.IndexFunc(view.NodeGroups, func(g NodeGroupView) bool { return g.ID == node.NodeGroup })
		if i < 0 {
			view.NodeGroups = append(view.NodeGroups, nodeGroupView(node.NodeGroup))
			i = len(view.NodeGroups) - 1
		}
		view.NodeGroups[i].Nodes = append(view.NodeGroups[i].Nodes, nodeView)
	}
	byName := func(a, b NodeView) int { return strings.Compare(a.Name, b.Name) }
	for i := range view.NodeGroups {
		slices.SortFunc(view.NodeGroups[i].Nodes, byName)
	}
	slices.SortFunc(view.OtherNodes, byName)
}

// readProblem is an explanation that exists but cannot be used, or cannot
// be read with the user's credentials: the other views still work.
type readProblem struct{ message string }

func (p *readProblem) Error() string { return p.message }

func isReadProblem(err error) bool {
	var problem *readProblem
	return errors.As(err, &problem)
}

// readExplanation reads the explanation the manager published for ca: nil
// when there is none yet, a readProblem when it cannot be used.
func readExplanation(ctx context.Context, c client.Reader, ca *autoscalingv1alpha1.ClusterAutoscaler) (*autoscalingv1alpha1.Explanation, error) {
	key := client.ObjectKey{Namespace: ca.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(ca.Name)}
	configMap := &corev1.ConfigMap{}
	switch err := c.Get(ctx, key, configMap); {
	case apierrors.IsNotFound(err):
		return nil, nil
	case apierrors.IsForbidden(err):
		return nil, &readProblem{fmt.Sprintf("cannot read the explanation, ConfigMap %s: %v", key, err)}
	case err != nil:
		return nil, fmt.Errorf("reading the explanation, ConfigMap %s: %w", key, err)
	}
	data, ok := configMap.Data[autoscalingv1alpha1.ExplanationDataKey]
	if !ok {
		return nil, &readProblem{fmt.Sprintf("the explanation, ConfigMap %s, has no key %s", key, autoscalingv1alpha1.ExplanationDataKey)}
	}
	explanation := &autoscalingv1alpha1.Explanation{}
	if err := json.Unmarshal([]byte(data), explanation); err != nil {
		return nil, &readProblem{fmt.Sprintf("the explanation, ConfigMap %s, does not parse: %v", key, err)}
	}
	return explanation, nil
}

// scheduledMinimumView is a group's scheduled minimum row as the views
// show it; nil without one.
func scheduledMinimumView(m *autoscalingv1alpha1.NodeGroupScheduledMinimum) *ScheduledMinimumView {
	if m == nil {
		return nil
	}
	window := func(w autoscalingv1alpha1.ScheduledWindow) ScheduledWindowView {
		return ScheduledWindowView{Name: w.Name, MinSize: w.MinSize, Opens: w.Opens, Closes: w.Closes}
	}
	view := &ScheduledMinimumView{AnnotatedMinSize: m.AnnotatedMinSize}
	for _, w := range m.Active {
		view.Active = append(view.Active, window(w))
	}
	if m.Next != nil {
		next := window(*m.Next)
		view.Next = &next
	}
	return view
}
