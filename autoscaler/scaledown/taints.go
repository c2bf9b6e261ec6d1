package scaledown

import (
	"context"
	"fmt"
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

// The annotations that record on a Node what the autoscaler did to it, so
// that it undoes exactly that, and so that a restarted process or a new
// leader knows too: a deletion taint or a cordon without them was placed by
// someone else (an administrator, another cluster autoscaler) and is never
// removed.
const (
	// TaintedAnnotation says that the autoscaler put the deletion taint on
	// the node; its value is the taint's.
	TaintedAnnotation = "autoscaling.cluster.x-k8s.io/tainted"
	// CordonedAnnotation says that the autoscaler cordoned the node, which
	// was schedulable before.
	CordonedAnnotation = "autoscaling.cluster.x-k8s.io/cordoned"
)

// HasDeletionTaint tells whether the node carries nodefacts.ToBeDeletedTaint,
// which marks a node an autoscaler is removing so that the scheduler places
// nothing new on it. Its value is the unix time the removal started.
func HasDeletionTaint(node *corev1.Node) bool {
	return nodefacts.HasTaint(node, nodefacts.ToBeDeletedTaint)
}

// OwnsDeletionTaint tells whether the node's deletion taint is this
// autoscaler's.
func OwnsDeletionTaint(node *corev1.Node) bool {
	_, ours := node.Annotations[TaintedAnnotation]
	return ours && HasDeletionTaint(node)
}

// HasForeignDeletionTaint tells whether another cluster autoscaler, such as
// the upstream one, is removing the node: it carries the deletion taint,
// which this autoscaler did not place.
func HasForeignDeletionTaint(node *corev1.Node) bool {
	_, ours := node.Annotations[TaintedAnnotation]
	return HasDeletionTaint(node) && !ours
}

// hasOwnMarks tells whether the node carries anything of the autoscaler's
// to undo.
func hasOwnMarks(node *corev1.Node) bool {
	_, tainted := node.Annotations[TaintedAnnotation]
	_, cordoned := node.Annotations[CordonedAnnotation]
	return tainted || cordoned
}

// ForeignTaintError refuses to take a node that another autoscaler is
// removing.
type ForeignTaintError struct{ Node string }

func (e *ForeignTaintError) Error() string {
	return fmt.Sprintf("node %s carries a %s taint that another cluster autoscaler placed", e.Node, nodefacts.ToBeDeletedTaint)
}

func isDeletionTaint(taint corev1.Taint) bool { return taint.Key == nodefacts.ToBeDeletedTaint }

// addDeletionTaint puts the deletion taint on the named node and, when
// asked, cordons it, recording both as the autoscaler's, and returns the
// node's resourceVersion with the taint. A node another autoscaler tainted
// is refused with a *ForeignTaintError; a node already cordoned by someone
// else stays theirs to uncordon.
func addDeletionTaint(ctx context.Context, client kubernetes.Interface, name string, now time.Time, cordon bool) (string, error) {
	node, err := updateNode(ctx, client, name, func(node *corev1.Node) (bool, error) {
		if HasForeignDeletionTaint(node) {
			return false, &ForeignTaintError{Node: name}
		}
		changed := false
		if !HasDeletionTaint(node) {
			value := strconv.FormatInt(now.Unix(), 10)
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: nodefacts.ToBeDeletedTaint, Value: value, Effect: corev1.TaintEffectNoSchedule})
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, TaintedAnnotation, value)
			changed = true
		}
		if cordon && !node.Spec.Unschedulable {
			node.Spec.Unschedulable = true
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, CordonedAnnotation, strconv.FormatInt(now.Unix(), 10))
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		return "", err
	}
	return node.ResourceVersion, nil
}

// ReleaseNode takes off the named node what the autoscaler put on it for
// its removal: the deletion taint and the cordon it recorded, whatever
// cordonNodeBeforeTerminating says now. A taint or cordon it did not place
// stays; a node that is gone has nothing to release.
func ReleaseNode(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := updateNode(ctx, client, name, func(node *corev1.Node) (bool, error) {
		if !hasOwnMarks(node) {
			return false, nil
		}
		if _, tainted := node.Annotations[TaintedAnnotation]; tainted {
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, isDeletionTaint)
			delete(node.Annotations, TaintedAnnotation)
		}
		if _, cordoned := node.Annotations[CordonedAnnotation]; cordoned {
			node.Spec.Unschedulable = false
			delete(node.Annotations, CordonedAnnotation)
		}
		return true, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// updateNode reads the node, lets change modify it and writes it back
// when change says it did, retrying on conflicts. It returns the node as
// last read or written.
func updateNode(ctx context.Context, client kubernetes.Interface, name string, change func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	var node *corev1.Node
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		read, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		node = read
		changed, err := change(read)
		if err != nil || !changed {
			return err
		}
		node, err = client.CoreV1().Nodes().Update(ctx, read, metav1.UpdateOptions{})
		return err
	})
	return node, err
}
