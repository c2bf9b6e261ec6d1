package view

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// recentEvents is how many events the views show per ClusterAutoscaler.
const recentEvents = 6

// eventReader reads the events the manager records in the management
// cluster on ClusterAutoscalers and on the MachineDeployments, MachineSets
// and MachinePools of node groups, through the events.k8s.io API, which
// serves those of the core API as well. It lists each namespace once.
type eventReader struct {
	client      client.Reader
	byNamespace map[string][]eventsv1.Event
}

// recent returns the latest events the manager recorded on ca and on its
// node groups, newest first.
func (r *eventReader) recent(ctx context.Context, ca *autoscalingv1alpha1.ClusterAutoscaler) ([]EventView, error) {
	objects := sets.New(scalable.ID(cli.ClusterAutoscalerKind, ca.Namespace, ca.Name))
	namespaces := sets.New(ca.Namespace)
	for _, group := range ca.Status.NodeGroups {
		if _, namespace, _, ok := scalable.ParseID(group.ID); ok {
			objects.Insert(group.ID)
			namespaces.Insert(namespace)
		}
	}
	views := []EventView{}
	for _, namespace := range sets.List(namespaces) {
		events, err := r.list(ctx, namespace)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			if e.ReportingController != autoscalingv1alpha1.EventSource || !objects.Has(scalable.ID(e.Regarding.Kind, e.Regarding.Namespace, e.Regarding.Name)) {
				continue
			}
			views = append(views, eventView(&e))
		}
	}
	slices.SortFunc(views, func(a, b EventView) int {
		return cmp.Or(b.Time.Compare(a.Time.Time), strings.Compare(a.Object, b.Object), strings.Compare(a.Reason, b.Reason))
	})
	return views[:min(len(views), recentEvents)], nil
}

func (r *eventReader) list(ctx context.Context, namespace string) ([]eventsv1.Event, error) {
	if events, ok := r.byNamespace[namespace]; ok {
		return events, nil
	}
	list := &eventsv1.EventList{}
	if err := r.client.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the events of namespace %s: %w", namespace, err)
	}
	if r.byNamespace == nil {
		r.byNamespace = map[string][]eventsv1.Event{}
	}
	r.byNamespace[namespace] = list.Items
	return list.Items, nil
}

func eventView(e *eventsv1.Event) EventView {
	view := EventView{Type: e.Type, Object: e.Regarding.Kind + "/" + e.Regarding.Name, Reason: e.Reason, Message: e.Note}
	view.Time.Time = eventTime(e)
	switch {
	case e.Series != nil:
		view.Count = e.Series.Count
	case e.DeprecatedCount > 1:
		view.Count = e.DeprecatedCount
	}
	return view
}

// eventTime is when an event last happened, whichever API recorded it.
func eventTime(e *eventsv1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	default:
		return e.CreationTimestamp.Time
	}
}
