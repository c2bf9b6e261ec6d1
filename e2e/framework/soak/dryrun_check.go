package soak

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// dryRunWrites records, from the fault proxies, the writes of the
// engines of the DryRun ClusterAutoscaler: the connection of an engine to
// the workload cluster names its ClusterAutoscaler in its user agent
// (internal/controller engineRESTConfig).
type dryRunWrites struct {
	trial types.NamespacedName

	mu         sync.Mutex
	violations []framework.Violation
}

func (w *dryRunWrites) observe(r faultproxy.Request) {
	if violation := dryRunWrite(r, w.trial); violation != "" {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.violations = append(w.violations, framework.Violation{At: time.Now(), Message: violation})
	}
}

// take returns the violations recorded since the last call.
func (w *dryRunWrites) take() []framework.Violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	violations := w.violations
	w.violations = nil
	return violations
}

var requestCodecs = serializer.NewCodecFactory(localstack.Scheme)

// dryRunWrite says what the request of the engine of the DryRun
// ClusterAutoscaler trial tried to write, "" when it is no write of it
// or one DryRun may make: an event of what it would do (Would*, in
// autoscaler/dryrun.go), or an update of such an event's count. Whether
// the API server accepted it does not matter: DryRun must not try.
func dryRunWrite(r faultproxy.Request, trial types.NamespacedName) string {
	if !strings.HasSuffix(r.UserAgent, fmt.Sprintf("(ClusterAutoscaler %s)", trial)) {
		return ""
	}
	if !slices.Contains([]string{"create", "update", "patch", "delete", "deletecollection"}, r.Verb) {
		return ""
	}
	if r.APIGroup == "" && r.Resource == "events" {
		if r.Verb == "patch" {
			return ""
		}
		obj, _, err := requestCodecs.UniversalDeserializer().Decode(r.Body, nil, nil)
		if event, ok := obj.(*corev1.Event); err == nil && ok {
			if strings.HasPrefix(event.Reason, "Would") {
				return ""
			}
			return fmt.Sprintf("the engine of the DryRun ClusterAutoscaler %s recorded a %s event on %s %s: %s",
				trial, event.Reason, event.InvolvedObject.Kind, event.InvolvedObject.Name, event.Message)
		}
	}
	name := r.Name
	if r.Namespace != "" {
		name = r.Namespace + "/" + name
	}
	return fmt.Sprintf("the engine of the DryRun ClusterAutoscaler %s tried to %s %s (status %d)", trial, r.Rule(), name, r.Status)
}

// actuationReasons are the reasons of the events an engine records when
// it acts (autoscaler), which none of a DryRun ClusterAutoscaler may have.
var actuationReasons = []string{
	autoscaler.EventTriggeredScaleUp, autoscaler.EventScaledUpGroup, autoscaler.EventFailedToScaleUpGroup,
	autoscaler.EventScaleUpTimedOut, autoscaler.EventDeleteUnregistered, autoscaler.EventNodeNotDeleted,
	autoscaler.EventScaleUpRolledBack, autoscaler.EventScaleUpRollbackIncomplete,
	scaledown.EventReasonScaleDown, scaledown.EventReasonScaleDownFailed, scaledown.EventReasonScaleDownCancelled,
}

// dryRunStamps are the marks, taints and cordons that a DryRun
// ClusterAutoscaler (by UID) placed, as their values say (ownership.Stamp),
// and its events that tell of an action.
func dryRunStamps(dryRuns []types.UID, machines []clusterv1.Machine, nodes []corev1.Node, events []corev1.Event) []string {
	var violations []string
	placedBy := func(value string) bool {
		placer, _ := ownership.Parse(value)
		return placer != "" && slices.Contains(dryRuns, placer)
	}
	for _, m := range machines {
		if value, ok := m.Annotations[scalable.MarkedAnnotation]; ok && placedBy(value) {
			violations = append(violations, fmt.Sprintf("Machine %s carries the delete-machine mark of a DryRun ClusterAutoscaler (%s=%s)", klog.KObj(&m), scalable.MarkedAnnotation, value))
		}
	}
	for _, node := range nodes {
		for _, annotation := range []string{scaledown.TaintedAnnotation, scaledown.CordonedAnnotation} {
			if value, ok := node.Annotations[annotation]; ok && placedBy(value) {
				violations = append(violations, fmt.Sprintf("Node %s carries the taint or cordon of a DryRun ClusterAutoscaler (%s=%s)", node.Name, annotation, value))
			}
		}
	}
	for _, event := range events {
		if slices.Contains(dryRuns, event.InvolvedObject.UID) && slices.Contains(actuationReasons, event.Reason) {
			violations = append(violations, fmt.Sprintf("the DryRun ClusterAutoscaler %s/%s has a %s event: %s", event.InvolvedObject.Namespace, event.InvolvedObject.Name, event.Reason, event.Message))
		}
	}
	return violations
}

// checkDryRun lists what dryRunStamps looks at.
func (c *Checker) checkDryRun(ctx context.Context) ([]string, error) {
	env := c.Env
	if len(env.dryRuns) == 0 {
		return nil, nil
	}
	mgmt, workload := env.Stack.Management.Client, env.Stack.Workload.Client
	machines := &clusterv1.MachineList{}
	if err := mgmt.List(ctx, machines, client.InNamespace(env.Namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: env.Cluster.Name}); err != nil {
		return nil, err
	}
	nodes := &corev1.NodeList{}
	if err := workload.List(ctx, nodes, client.MatchingLabels{framework.ClusterLabel: env.Cluster.Name}); err != nil {
		return nil, err
	}
	events := &corev1.EventList{}
	if err := mgmt.List(ctx, events, client.InNamespace(env.Namespace)); err != nil {
		return nil, err
	}
	return dryRunStamps(env.dryRuns, machines.Items, nodes.Items, events.Items), nil
}
