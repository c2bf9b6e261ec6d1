package scaledown

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// defaultGracePeriod is what the API server gives a pod that sets none.
const defaultGracePeriod = 30 * time.Second

// step evicts the pods left on the node, deletes the node once they are
// gone, and fails the drain when its time limits are over. The pods are
// those of the loop's cache, until it has none left: then the API server
// says whether any it has not seen yet are there (podsLeft). A
// consolidation asks the API server first, before any eviction, and gives
// the node back when a pod its decision did not see is there.
func (a *Actuator) step(ctx context.Context, d *drain, cached NodePods) {
	logger := klog.FromContext(ctx).WithValues("node", klog.KObj(d.node))
	now := a.opts.Clock.Now()
	pods := podsToEvict(cached.PodsOn(d.node.Name), now)
	var err error
	if len(pods) == 0 || d.byConsolidation && !d.listed {
		pods, err = a.podsLeft(ctx, d.node.Name, d.taintVersion, now)
		if err != nil {
			d.refused = fmt.Errorf("listing pods: %w", err)
		}
		d.listed = d.listed || err == nil
		if err == nil && len(pods) == 0 {
			a.deleteDrained(ctx, d)
			return
		}
	}
	if pod := d.newcomer(pods); pod != nil {
		a.cancel(ctx, d.node, fmt.Sprintf("pod %s/%s was bound to the node after consolidation chose it, "+
			"and consolidation disrupts no pod bound less than consolidateAfter before", pod.Namespace, pod.Name))
		return
	}
	notEvicted := 0
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			if _, ok := d.evictedAt[pod.UID]; !ok {
				// Deleted by someone else: it is going all the same.
				d.evictedAt[pod.UID] = now
			}
			// It is not gone yet (podsToEvict), but its grace period, which
			// whoever deleted it chose, is not waited for beyond the cap.
			if deadline := d.evictedAt[pod.UID].Add(a.gracePeriod(pod) + terminationMargin); now.After(deadline) {
				a.fail(ctx, d.node, fmt.Sprintf("pod %s/%s did not terminate within %s of its eviction", pod.Namespace, pod.Name, deadline.Sub(d.evictedAt[pod.UID])))
				return
			}
			continue
		}
		if err := a.evict(ctx, pod); err != nil {
			logger.V(2).Info("Eviction refused, will retry", "pod", klog.KRef(pod.Namespace, pod.Name), "err", err)
			d.refused = fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
			notEvicted++
			continue
		}
		if _, ok := d.evictedAt[pod.UID]; !ok {
			a.evictedPods++
			a.recorder.Event(pod.Full(), corev1.EventTypeNormal, EventReasonScaleDown, "deleting pod for node scale down")
		}
		d.evictedAt[pod.UID] = now
	}
	if (notEvicted > 0 || err != nil) && now.Sub(d.startedAt) >= a.opts.MaxPodEvictionTime {
		a.fail(ctx, d.node, fmt.Sprintf("failed to drain the node within %s: %v", a.opts.MaxPodEvictionTime, d.refused))
	}
}

// newcomer is a pod of pods, not being deleted, that was not on the node
// when consolidation chose it, such as a pod kube-scheduler bound there
// between the decision and the taint; nil when there is none or when
// scale-down chose the node, which evicts what runs there as upstream does.
func (d *drain) newcomer(pods []*snapshot.Pod) *snapshot.Pod {
	if !d.byConsolidation {
		return nil
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil && !d.moves[pod.UID] {
			return pod
		}
	}
	return nil
}

// evict asks the Eviction API to evict the pod, with its grace period
// capped; a pod already gone, or replaced by another of the same name, is
// evicted.
func (a *Actuator) evict(ctx context.Context, pod *snapshot.Pod) error {
	eviction := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To(int64(a.gracePeriod(pod).Seconds())),
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		},
	}
	err := a.client.CoreV1().Pods(pod.Namespace).EvictV1(ctx, eviction)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// gracePeriod is the pod's termination grace period, capped.
func (a *Actuator) gracePeriod(pod *snapshot.Pod) time.Duration {
	grace := defaultGracePeriod
	if seconds := pod.Spec.TerminationGracePeriodSeconds; seconds != nil {
		grace = time.Duration(*seconds) * time.Second
	}
	return min(grace, a.opts.MaxGracefulTermination)
}

// deleteDrained deletes the drained node through its group.
func (a *Actuator) deleteDrained(ctx context.Context, d *drain) {
	if err := d.group.DeleteNodes(ctx, []*corev1.Node{d.node}); err != nil {
		a.notDeleted(ctx, d.node, "the drained node", err)
		return
	}
	delete(a.drains, d.node.Name)
	a.handedOver[d.node.Name] = &handOver{node: d.node, group: d.group, at: a.opts.Clock.Now()}
	a.lastDeletion = a.opts.Clock.Now()
	a.deletedNodes++
	if d.byConsolidation {
		a.consolidatedNodes++
	}
	klog.FromContext(ctx).Info("Removed drained node", "node", klog.KObj(d.node), "nodeGroup", d.group.ID())
}
