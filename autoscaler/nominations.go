package autoscaler

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
)

// maxNominationsPerLoop bounds the pods nominated in one loop, so that a
// large burst does not hold the loop on the client's rate limit: the next
// loops nominate the rest, long before machines boot. It is the client's
// default burst.
const maxNominationsPerLoop = 30

// nominate tells kube-scheduler which node the plan gave each pod that
// waits for a node on its way whose name is known, through the pod's
// status.nominatedNodeName (KEP-5278). kube-scheduler tries a pod's
// nominated node first and keeps its room from other pods of the same or
// lower priority. Without it, the oldest pods fill the first nodes to
// start, two by two, and pods that must keep apart can find no node with
// room left: a second round of machines for a burst that the plan fitted.
//
// kube-scheduler clears a nomination when the pod fails to schedule, as
// when other nodes register before its own: later loops write it again.
// Only the nominations that pods do not carry are written. A pod that
// changed since it was read (bound, or nominated by kube-scheduler) is
// left as it is: the next loop plans it again.
func (s *steps) nominate(ctx context.Context, placements []simulator.Placement) {
	logger := klog.FromContext(ctx)
	written := 0
	for _, placement := range placements {
		pod := placement.Pod
		if s.nominationsRefused || written == maxNominationsPerLoop {
			break
		}
		if pod.Status.NominatedNodeName == placement.NodeName {
			continue
		}
		err := nominatePod(ctx, s.opts.Clientset, pod, placement.NodeName)
		switch {
		case err == nil:
			written++
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
		case apierrors.IsForbidden(err):
			s.nominationsRefused = true
			logger.Error(err, "Cannot nominate pods to the nodes planned for them; kube-scheduler may place them so that more nodes are needed. Grant patch on pods/status in the workload cluster (config/workload-rbac)")
		default:
			// The API server is failing: the next loop tries again.
			logger.Error(err, "Failed to nominate a pod to the node planned for it", "pod", klog.KObj(pod), "node", placement.NodeName)
			return
		}
	}
	if written > 0 {
		logger.V(2).Info("Nominated pods to the nodes on their way planned for them", "pods", written)
	}
}

// nominatePod sets the pod's nominated node, on the version of the pod
// that was read.
func nominatePod(ctx context.Context, clientset kubernetes.Interface, pod *corev1.Pod, nodeName string) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": pod.ResourceVersion},
		"status":   map[string]any{"nominatedNodeName": nodeName},
	})
	if err != nil {
		return err
	}
	_, err = clientset.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
