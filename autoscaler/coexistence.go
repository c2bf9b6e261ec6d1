package autoscaler

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// What the upstream cluster-autoscaler keeps in a workload cluster while
// it runs: the Lease of its leader election and its status ConfigMap,
// whose annotation says when it last wrote it, and whose key status holds
// the status (text before cluster-autoscaler 1.30, YAML since).
const (
	UpstreamNamespace        = metav1.NamespaceSystem
	upstreamLeaseName        = "cluster-autoscaler"
	UpstreamStatusConfigMap  = "cluster-autoscaler-status"
	UpstreamStatusDataKey    = "status"
	upstreamLastUpdatedKey   = "cluster-autoscaler.kubernetes.io/last-updated"
	upstreamLastUpdateFormat = "2006-01-02 15:04:05.999999999 -0700 MST"
)

// OtherAutoscalerRecency is how recently another autoscaler must have
// renewed its Lease or written its status to count as running: upstream
// renews every few seconds and writes its status every loop (10 s).
const OtherAutoscalerRecency = 2 * time.Minute

// checkOtherAutoscalers looks for another cluster autoscaler acting on the
// cluster: its deletion taint on a node this one did not taint, the
// deletion taint this autoscaler placed for another ClusterAutoscaler that
// exists (the engine of another Cluster sharing the nodes, or of the owner
// beside a DryRun one), a Lease it renewed or a status it wrote recently.
// Two autoscalers undo each other's work (one drains what the other scales
// up), so while another acts this one does nothing but release its own
// removals. The taints of a ClusterAutoscaler that no longer exists are
// the owner's to release (ownership.Owner.Claim), not another's evidence.
func (s *steps) checkOtherAutoscalers(ctx context.Context, l *loop) {
	l.otherAutoscaler = s.otherAutoscaler(ctx, l)
	if l.otherAutoscaler != "" {
		klog.FromContext(ctx).Info("Another cluster autoscaler acts on the cluster; not scaling", "evidence", l.otherAutoscaler)
	}
}

func (s *steps) otherAutoscaler(ctx context.Context, l *loop) string {
	for _, node := range l.nodes {
		if scaledown.HasForeignDeletionTaint(node) {
			return fmt.Sprintf("node %s carries a %s taint that this autoscaler did not place", node.Name, nodefacts.ToBeDeletedTaint)
		}
		another, err := scaledown.DeletionTaintOfAnother(ctx, s.opts.Owner, node)
		switch {
		case err != nil:
			return fmt.Sprintf("node %s carries a %s taint that may be another engine's: %v", node.Name, nodefacts.ToBeDeletedTaint, err)
		case another != "":
			return fmt.Sprintf("node %s carries a %s taint that the engine of %s placed", node.Name, nodefacts.ToBeDeletedTaint, another)
		}
	}
	logger := klog.FromContext(ctx)
	upstream := s.settings.config.Upstream
	lease, err := s.opts.Clientset.CoordinationV1().Leases(upstream.LeaseNamespace).Get(ctx, upstream.LeaseName, metav1.GetOptions{})
	switch {
	case err == nil:
		if renewed := lease.Spec.RenewTime; renewed != nil && l.now.Sub(renewed.Time) < OtherAutoscalerRecency {
			return fmt.Sprintf("Lease %s/%s was renewed at %s by %s", upstream.LeaseNamespace, upstream.LeaseName,
				renewed.UTC().Format(time.RFC3339), valueOrUnknown(lease.Spec.HolderIdentity))
		}
	case !apierrors.IsNotFound(err):
		// Narrower credentials may not allow the read: the taints above
		// still tell.
		logger.V(4).Info("Cannot read the upstream cluster-autoscaler's Lease", "err", err.Error())
	}
	status, err := s.opts.Clientset.CoreV1().ConfigMaps(upstream.Namespace).Get(ctx, upstream.StatusConfigMap, metav1.GetOptions{})
	switch {
	case err == nil:
		if written, ok := UpstreamStatusLastUpdated(status); ok && l.now.Sub(written) < OtherAutoscalerRecency {
			return fmt.Sprintf("ConfigMap %s/%s was written at %s", upstream.Namespace, upstream.StatusConfigMap, written.UTC().Format(time.RFC3339))
		}
	case !apierrors.IsNotFound(err):
		logger.V(4).Info("Cannot read the upstream cluster-autoscaler's status ConfigMap", "err", err.Error())
	}
	return ""
}

// UpstreamStatusLastUpdated is when the upstream autoscaler last wrote its
// status ConfigMap.
func UpstreamStatusLastUpdated(status *corev1.ConfigMap) (time.Time, bool) {
	value, ok := status.Annotations[upstreamLastUpdatedKey]
	if !ok {
		return time.Time{}, false
	}
	written, err := time.Parse(upstreamLastUpdateFormat, value)
	return written, err == nil
}

func valueOrUnknown(s *string) string {
	if s == nil || *s == "" {
		return "an unknown holder"
	}
	return *s
}
