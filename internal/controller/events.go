package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// newEventBroadcaster returns a broadcaster that records core/v1 events
// through events until it is shut down, in the management cluster as in
// the workload clusters; ctx only gives it its logger: the engines, as the
// manager stops, give back their drains and say so. Its EventCorrelator
// keeps events of different messages apart, counts the repeats of a
// message in one event and combines only floods of similar ones. The
// events.k8s.io recorder would instead fold every event of a reason on an
// object within 6 minutes into the series of the first and drop their
// notes: of two decisions, such as two consolidations of a group, users
// would read only the first.
func newEventBroadcaster(ctx context.Context, events typedcorev1.EventsGetter) record.EventBroadcaster {
	sink := &flushMarkingSink{
		EventSink: &typedcorev1.EventSinkImpl{Interface: events.Events("")},
		marker:    &corev1.ObjectReference{UID: uuid.NewUUID()},
		flushed:   make(chan struct{}),
	}
	broadcaster := record.NewBroadcaster(record.WithContext(context.WithoutCancel(ctx)))
	broadcaster.StartRecordingToSink(sink)
	return &flushingBroadcaster{EventBroadcaster: broadcaster, sink: sink, logger: klog.FromContext(ctx)}
}

// eventFlushTimeout bounds how long shutting a broadcaster down waits for
// the events recorded before to be written: an unreachable cluster must
// not hold up the stop of an engine, nor of the manager.
const eventFlushTimeout = 5 * time.Second

// flushingBroadcaster is a broadcaster whose Shutdown first writes the
// events recorded before it, for at most eventFlushTimeout. client-go's
// Shutdown stops the writer at once, dropping what it had not written yet,
// such as the events of the drains an engine gave back as it stopped.
type flushingBroadcaster struct {
	record.EventBroadcaster
	sink   *flushMarkingSink
	logger klog.Logger
}

// Shutdown records a marker after the events recorded so far and waits
// until the writer, which writes events one at a time in order, reaches
// it; then it stops the broadcaster.
func (b *flushingBroadcaster) Shutdown() {
	b.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{}).Event(b.sink.marker, corev1.EventTypeNormal, flushMarkerReason, "")
	timeout := time.NewTimer(eventFlushTimeout)
	defer timeout.Stop()
	select {
	case <-b.sink.flushed:
	case <-timeout.C:
		b.logger.Info("Stopped recording events before all were written", "timeout", eventFlushTimeout)
	}
	b.EventBroadcaster.Shutdown()
}

// flushMarkerReason is the reason of the marker event. A variable, not a
// constant: the events reference (make docs) lists the constant reasons of
// the events users see, and the marker is never written.
var flushMarkerReason = "FlushMarker"

// flushMarkingSink writes events to its EventSink, except the event on the
// marker, which it takes for a sign that the events before it were
// written or given up.
type flushMarkingSink struct {
	record.EventSink
	marker  *corev1.ObjectReference
	flushed chan struct{}
	// once keeps a second Shutdown's marker from closing flushed again.
	once sync.Once
}

func (s *flushMarkingSink) Create(event *corev1.Event) (*corev1.Event, error) {
	if event.InvolvedObject.UID == s.marker.UID {
		s.once.Do(func() { close(s.flushed) })
		return event, nil
	}
	return s.EventSink.Create(event)
}

// NewEventRecorder returns the recorder of the manager's events in the
// management cluster of mgr (on ClusterAutoscalers and on the objects
// behind node groups), and the function that stops it, once the events
// recorded before are written.
func NewEventRecorder(ctx context.Context, mgr ctrl.Manager) (record.EventRecorder, func(), error) {
	events, err := typedcorev1.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, nil, fmt.Errorf("creating the client of the manager's events: %w", err)
	}
	broadcaster := newEventBroadcaster(ctx, events)
	return broadcaster.NewRecorder(mgr.GetScheme(), corev1.EventSource{Component: autoscalingv1alpha1.EventSource}), broadcaster.Shutdown, nil
}

// maxEventMessage is the longest note the events.k8s.io API accepts. The
// core API takes longer messages of events such as these, without an
// eventTime, but the manager's stay within it: they read the same through
// either API, and one that tells many decisions does not grow unbounded.
const maxEventMessage = 1024

// messageBoundedRecorder cuts the messages of its events to
// maxEventMessage.
type messageBoundedRecorder struct {
	record.EventRecorder
}

var _ record.EventRecorder = messageBoundedRecorder{}

func (r messageBoundedRecorder) Event(object runtime.Object, eventType, reason, message string) {
	r.EventRecorder.Event(object, eventType, reason, truncate(message, maxEventMessage))
}

func (r messageBoundedRecorder) Eventf(object runtime.Object, eventType, reason, messageFmt string, args ...any) {
	r.Event(object, eventType, reason, fmt.Sprintf(messageFmt, args...))
}

func (r messageBoundedRecorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventType, reason, messageFmt string, args ...any) {
	r.EventRecorder.AnnotatedEventf(object, annotations, eventType, reason, "%s", truncate(fmt.Sprintf(messageFmt, args...), maxEventMessage))
}

// nodeGroupEventRecorder records the engine's node group events on the
// MachineDeployment, MachineSet or MachinePool behind the group, in the management
// cluster, where `kubectl describe` shows them.
type nodeGroupEventRecorder struct {
	// ctx is the engine's; the reads come from the manager's cache.
	ctx      context.Context
	client   client.Reader
	recorder record.EventRecorder
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
	r.recorder.Event(obj, eventType, reason, message)
}
