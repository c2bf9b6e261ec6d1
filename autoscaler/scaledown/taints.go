package scaledown

import (
	"context"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

// HasDeletionTaint tells whether the node carries nodefacts.ToBeDeletedTaint,
// which marks a node the autoscaler is removing so that the scheduler places
// nothing new on it. Its value is the unix time the removal started.
func HasDeletionTaint(node *corev1.Node) bool {
	return nodefacts.HasTaint(node, nodefacts.ToBeDeletedTaint)
}

func isDeletionTaint(taint corev1.Taint) bool { return taint.Key == nodefacts.ToBeDeletedTaint }

// addDeletionTaint puts the deletion taint on the named node and, when
// asked, cordons it.
func addDeletionTaint(ctx context.Context, client kubernetes.Interface, name string, now time.Time, cordon bool) error {
	return updateNode(ctx, client, name, func(node *corev1.Node) bool {
		changed := false
		if !HasDeletionTaint(node) {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{
				Key: nodefacts.ToBeDeletedTaint, Value: strconv.FormatInt(now.Unix(), 10), Effect: corev1.TaintEffectNoSchedule,
			})
			changed = true
		}
		if cordon && !node.Spec.Unschedulable {
			node.Spec.Unschedulable = true
			changed = true
		}
		return changed
	})
}

// removeDeletionTaint takes the deletion taint off the named node and, when
// asked, uncordons it; a node that is gone has no taint to remove.
func removeDeletionTaint(ctx context.Context, client kubernetes.Interface, name string, uncordon bool) error {
	err := updateNode(ctx, client, name, func(node *corev1.Node) bool {
		if !HasDeletionTaint(node) {
			return false
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, isDeletionTaint)
		if uncordon {
			node.Spec.Unschedulable = false
		}
		return true
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// updateNode reads the node, lets change modify it and writes it back
// when change says it did, retrying on conflicts.
func updateNode(ctx context.Context, client kubernetes.Interface, name string, change func(*corev1.Node) bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !change(node) {
			return nil
		}
		_, err = client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}
