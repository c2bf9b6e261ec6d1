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
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/retry"
)

// The annotations that record on a Node what the autoscaler did to it, so
// that it undoes exactly that, and so that a restarted process or a new
// leader knows too: a deletion taint or a cordon without them was placed by
// someone else (an administrator, another cluster autoscaler) and is never
// removed. Their values name the ClusterAutoscaler that placed them
// (ownership.Stamp): the engine of one takes back only its own, those of a
// ClusterAutoscaler that no longer exists, and those of versions that
// recorded none (ownership.Owner.Claim).
const (
	// TaintedAnnotation says that the autoscaler put the deletion taint on
	// the node; its value stamps the taint's.
	TaintedAnnotation = "autoscaling.cluster.x-k8s.io/tainted"
	// CordonedAnnotation says that the autoscaler cordoned the node, which
	// was schedulable before; its value stamps when.
	CordonedAnnotation = "autoscaling.cluster.x-k8s.io/cordoned"
)

// HasDeletionTaint tells whether the node carries nodefacts.ToBeDeletedTaint,
// which marks a node an autoscaler is removing so that the scheduler places
// nothing new on it. Its value is the unix time the removal started.
func HasDeletionTaint(node *corev1.Node) bool {
	return nodefacts.HasTaint(node, nodefacts.ToBeDeletedTaint)
}

// OwnsDeletionTaint tells whether the node's deletion taint is this
// autoscaler's, whichever ClusterAutoscaler placed it.
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

// DeletionTaintOfAnother names the ClusterAutoscaler other than owner
// whose engine is removing the node, or "": it carries the deletion taint
// that this autoscaler placed for another ClusterAutoscaler that exists.
func DeletionTaintOfAnother(ctx context.Context, owner ownership.Owner, node *corev1.Node) (string, error) {
	if !OwnsDeletionTaint(node) {
		return "", nil
	}
	claim, err := owner.Claim(ctx, node.Annotations[TaintedAnnotation])
	if err != nil || claim.Ours() {
		return "", err
	}
	return claim.PlacedBy(), nil
}

// ownMarks sorts what the autoscaler recorded on the node: the
// annotations that owner may take back (ownership.Claim.Ours), and who
// placed those it may not, for messages.
func ownMarks(ctx context.Context, owner ownership.Owner, node *corev1.Node) (ours []string, another string, err error) {
	for _, annotation := range []string{TaintedAnnotation, CordonedAnnotation} {
		value, ok := node.Annotations[annotation]
		if !ok {
			continue
		}
		claim, err := owner.Claim(ctx, value)
		switch {
		case err != nil:
			return nil, "", err
		case claim.Ours():
			ours = append(ours, annotation)
		default:
			another = claim.PlacedBy()
		}
	}
	return ours, another, nil
}

// hasMarks tells whether the node carries anything of the autoscaler's
// to undo, whichever ClusterAutoscaler placed it.
func hasMarks(node *corev1.Node) bool {
	_, tainted := node.Annotations[TaintedAnnotation]
	_, cordoned := node.Annotations[CordonedAnnotation]
	return tainted || cordoned
}

// ForeignTaintError refuses to take a node that another autoscaler is
// removing.
type ForeignTaintError struct {
	Node string
	// PlacedBy names the ClusterAutoscaler whose engine placed the taint,
	// when this autoscaler placed it for another; "" for another product.
	PlacedBy string
}

func (e *ForeignTaintError) Error() string {
	if e.PlacedBy != "" {
		return fmt.Sprintf("node %s carries a %s taint that the engine of %s placed", e.Node, nodefacts.ToBeDeletedTaint, e.PlacedBy)
	}
	return fmt.Sprintf("node %s carries a %s taint that another cluster autoscaler placed", e.Node, nodefacts.ToBeDeletedTaint)
}

func isDeletionTaint(taint corev1.Taint) bool { return taint.Key == nodefacts.ToBeDeletedTaint }

// addDeletionTaint puts the deletion taint on the named node and, when
// asked, cordons it, recording both as owner's, and returns the node's
// resourceVersion with the taint. A node that another autoscaler, or the
// engine of another ClusterAutoscaler, tainted is refused with a
// *ForeignTaintError; a node already cordoned by someone else stays theirs
// to uncordon.
func addDeletionTaint(ctx context.Context, client kubernetes.Interface, owner ownership.Owner, name string, now time.Time, cordon bool) (string, error) {
	node, err := updateNode(ctx, client, name, func(node *corev1.Node) (bool, error) {
		if HasForeignDeletionTaint(node) {
			return false, &ForeignTaintError{Node: name}
		}
		another, err := DeletionTaintOfAnother(ctx, owner, node)
		if err != nil {
			return false, err
		}
		if another != "" {
			return false, &ForeignTaintError{Node: name, PlacedBy: another}
		}
		changed := false
		if !HasDeletionTaint(node) {
			value := strconv.FormatInt(now.Unix(), 10)
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: nodefacts.ToBeDeletedTaint, Value: value, Effect: corev1.TaintEffectNoSchedule})
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, TaintedAnnotation, owner.Stamp(value))
			changed = true
		}
		if cordon && !node.Spec.Unschedulable {
			node.Spec.Unschedulable = true
			metav1.SetMetaDataAnnotation(&node.ObjectMeta, CordonedAnnotation, owner.Stamp(strconv.FormatInt(now.Unix(), 10)))
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
// its removal and that owner may take back (ownership.Claim.Ours): the
// deletion taint and the cordon it recorded, whatever
// cordonNodeBeforeTerminating says now. A taint or cordon it did not
// place, or placed for another ClusterAutoscaler that exists, stays; a
// node that is gone has nothing to release. It says whether it took
// anything off.
func ReleaseNode(ctx context.Context, client kubernetes.Interface, owner ownership.Owner, name string) (bool, error) {
	released := false
	_, err := updateNode(ctx, client, name, func(node *corev1.Node) (bool, error) {
		released = false
		ours, another, err := ownMarks(ctx, owner, node)
		if err != nil {
			return false, err
		}
		if another != "" {
			klog.FromContext(ctx).V(2).Info("Leaving the deletion taint or cordon that the engine of another ClusterAutoscaler placed", "node", klog.KObj(node), "placedBy", another)
		}
		for _, annotation := range ours {
			switch annotation {
			case TaintedAnnotation:
				node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, isDeletionTaint)
			case CordonedAnnotation:
				node.Spec.Unschedulable = false
			}
			delete(node.Annotations, annotation)
		}
		released = len(ours) > 0
		return released, nil
	})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return released && err == nil, err
}

// updateNode reads the node, lets change modify it and writes it back
// when change says it did, retrying on conflicts. It returns the node as
// last read or written.
func updateNode(ctx context.Context, client kubernetes.Interface, name string, change func(*corev1.Node) (bool, error)) (*corev1.Node, error) {
	var node *corev1.Node
	err := retry.OnConflict(func() error {
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
