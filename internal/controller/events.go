package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// Event actions of the events.k8s.io API, which asks what was done.
const (
	// autoscaleAction is the action of events about node groups.
	autoscaleAction = "Autoscale"
	// cleanupAction is the action of events about deleting a ClusterAutoscaler.
	cleanupAction = "Cleanup"
)

// maxEventNote is the longest note the events.k8s.io API accepts: it
// refuses a longer one, and the event is lost.
const maxEventNote = 1024

// noteBoundedRecorder cuts the notes of its events to what the API accepts.
type noteBoundedRecorder struct {
	events.EventRecorder
}

func (r noteBoundedRecorder) Eventf(regarding, related runtime.Object, eventType, reason, action, note string, args ...any) {
	r.EventRecorder.Eventf(regarding, related, eventType, reason, action, "%s", truncate(fmt.Sprintf(note, args...), maxEventNote))
}

// nodeGroupEventRecorder records the engine's node group events on the
// MachineDeployment, MachineSet or MachinePool behind the group, in the management
// cluster, where `kubectl describe` shows them.
type nodeGroupEventRecorder struct {
	// ctx is the engine's; the reads come from the manager's cache.
	ctx      context.Context
	client   client.Reader
	recorder events.EventRecorder
}

var (
	_ autoscaler.NodeGroupEventRecorder = &nodeGroupEventRecorder{}
	_ clusterapi.EventRecorder          = &nodeGroupEventRecorder{}
)

// Event records an event on the resource whose node group ID
// (Kind/namespace/name) is groupID. Events of unknown or vanished resources
// are logged instead.
func (r *nodeGroupEventRecorder) Event(groupID, eventType, reason, message string) {
	obj := scalable.EmptyObject(groupID)
	if obj == nil {
		ctrl.LoggerFrom(r.ctx).Info("Not recording an event on an unknown kind of node group", "nodeGroup", groupID, "reason", reason, "message", message)
		return
	}
	// The UID lets `kubectl describe` find the event.
	if err := r.client.Get(r.ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		ctrl.LoggerFrom(r.ctx).V(2).Info("Not recording an event on a node group that cannot be read", "nodeGroup", groupID, "reason", reason, "message", message, "err", err.Error())
		return
	}
	r.recorder.Eventf(obj, nil, eventType, reason, autoscaleAction, "%s", message)
}
