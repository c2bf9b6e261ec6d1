package localstack

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateReadyNode creates node on an API server that nothing manages
// Nodes of (see StartAPIServer): it writes the node's status with a Ready
// condition through the status subresource, as kwok would, then removes
// the not-ready taint the API server put on it, as the node lifecycle
// controller would.
func CreateReadyNode(ctx context.Context, c client.Client, node *corev1.Node) error {
	status := node.Status
	if err := c.Create(ctx, node); err != nil {
		return fmt.Errorf("creating node %s: %w", node.Name, err)
	}
	now := metav1.Now()
	node.Status = status
	node.Status.Conditions = []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "set by the local stack's client",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}
	if err := c.Status().Update(ctx, node); err != nil {
		return fmt.Errorf("making node %s Ready: %w", node.Name, err)
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
	if err := c.Update(ctx, node); err != nil {
		return fmt.Errorf("removing the not-ready taint of node %s: %w", node.Name, err)
	}
	return nil
}
