package agreement

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// judgeTimeout bounds how long kube-scheduler may take for one batch.
const judgeTimeout = 5 * time.Minute

// judge creates the pending pods and waits until kube-scheduler has found
// each unschedulable, which it does once the extender turned its feasible
// nodes away, or at once when no node was feasible. It returns the pods as
// read back, with the scheduler's condition.
func judge(ctx context.Context, c client.Client, pending []*corev1.Pod) ([]*corev1.Pod, error) {
	created := make([]*corev1.Pod, len(pending))
	for i, pod := range pending {
		created[i] = pod.DeepCopy()
	}
	if err := forEach(ctx, created, func(ctx context.Context, pod *corev1.Pod) error { return create(ctx, c, pod) }); err != nil {
		return nil, err
	}
	judged := map[types.UID]*corev1.Pod{}
	for _, pod := range created {
		judged[pod.UID] = nil
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, judgeTimeout, true, func(ctx context.Context) (bool, error) {
		var pods corev1.PodList
		if err := c.List(ctx, &pods); err != nil {
			return false, err
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if _, ours := judged[pod.UID]; !ours {
				continue
			}
			if pod.Spec.NodeName != "" {
				return false, fmt.Errorf("kube-scheduler bound pod %s/%s to %s: the extender should have turned every node away", pod.Namespace, pod.Name, pod.Spec.NodeName)
			}
			condition := scheduledCondition(pod)
			switch {
			case condition == nil || condition.Status != corev1.ConditionFalse:
			case condition.Reason != corev1.PodReasonUnschedulable:
				return false, fmt.Errorf("kube-scheduler failed on pod %s/%s: %s: %s", pod.Namespace, pod.Name, condition.Reason, condition.Message)
			default:
				judged[pod.UID] = pod
			}
		}
		for _, pod := range judged {
			if pod == nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for kube-scheduler to judge %d pods: %w", len(created), err)
	}
	out := make([]*corev1.Pod, len(created))
	for i, pod := range created {
		out[i] = judged[pod.UID]
	}
	return out, nil
}

func scheduledCondition(pod *corev1.Pod) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == corev1.PodScheduled {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}
