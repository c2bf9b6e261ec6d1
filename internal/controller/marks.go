package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
)

// marksOwner is the owner of the deletion marks, taints and cordons that
// the engine of ca places, and that its sweeps take back.
func (r *ClusterAutoscalerReconciler) marksOwner(ca *autoscalingv1alpha1.ClusterAutoscaler) ownership.Owner {
	return ownership.Owner{UID: ca.UID, ClusterAutoscalers: clusterAutoscalersByUID{reader: r.Client}}
}

// clusterAutoscalersByUID finds ClusterAutoscalers by UID in the manager's
// cache. A ClusterAutoscaler just created is missing from it for a moment,
// but has not placed anything yet; one of a namespace this manager does
// not watch, or of another management cluster, counts as gone, so that
// what it left on a Cluster this one owns is adopted.
type clusterAutoscalersByUID struct {
	reader client.Reader
}

func (c clusterAutoscalersByUID) Find(ctx context.Context, uid types.UID) (types.NamespacedName, bool, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	if err := c.reader.List(ctx, list); err != nil {
		return types.NamespacedName{}, false, fmt.Errorf("listing the ClusterAutoscalers: %w", err)
	}
	for i := range list.Items {
		if ca := &list.Items[i]; ca.UID == uid {
			return client.ObjectKeyFromObject(ca), true, nil
		}
	}
	return types.NamespacedName{}, false, nil
}

// markRelease says which delete-machine marks ReleaseDeletionMarks takes
// back for ca: its own, read from the API server.
func (r *ClusterAutoscalerReconciler) markRelease(ca *autoscalingv1alpha1.ClusterAutoscaler) clusterapi.MarkReleaseOptions {
	return clusterapi.MarkReleaseOptions{Client: r.Client, APIReader: r.APIReader, Cluster: clusterKey(ca), Owner: r.marksOwner(ca)}
}
