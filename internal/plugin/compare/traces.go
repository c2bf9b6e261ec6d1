// What the other autoscaler left in the workload cluster, read for a
// comparison: its events, the pods they name and its status ConfigMap.

package compare

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// theirTraces is what the other autoscaler left in the workload cluster.
type theirTraces struct {
	scaleUps   []TheirScaleUpEvent
	scaleDowns []TheirScaleDown
	pods       map[string]PodCreation
	status     *TheirStatus
	// notes say what could not be read or understood.
	notes []string
}

// listPage is how many events or pods a request lists at most.
const listPage = 500

// readTheirTraces reads the other autoscaler's events, the pods of its
// scale-ups within the window and its status ConfigMap. Its notes tell of
// the events within the window it does not understand.
func readTheirTraces(ctx context.Context, c client.Reader, statusKey client.ObjectKey, within func(time.Time) bool) (*theirTraces, error) {
	traces := &theirTraces{pods: map[string]PodCreation{}}
	scaleUps, err := listEvents(ctx, c, autoscaler.EventTriggeredScaleUp)
	if err != nil {
		return nil, err
	}
	namespaces := sets.New[string]()
	for i := range scaleUps {
		e := &scaleUps[i]
		if e.InvolvedObject.Kind != "Pod" || !fromOtherAutoscaler(e) {
			continue
		}
		scaleUp := TheirScaleUpEvent{
			Pod: e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name, UID: e.InvolvedObject.UID,
			Time: firstOccurrence(e), Message: e.Message,
		}
		traces.scaleUps = append(traces.scaleUps, scaleUp)
		if within(scaleUp.Time) {
			namespaces.Insert(e.InvolvedObject.Namespace)
		}
	}

	var unparsed []string
	for _, reason := range []string{scaledown.EventReasonScaleDown, reasonScaleDownEmpty} {
		events, err := listEvents(ctx, c, reason)
		if err != nil {
			return nil, err
		}
		for i := range events {
			e := &events[i]
			if !fromOtherAutoscaler(e) {
				continue
			}
			node, err := scaleDownNode(e)
			switch {
			case errors.Is(err, errNotAboutANode):
			case err != nil:
				if within(firstOccurrence(e)) {
					unparsed = append(unparsed, err.Error())
				}
			default:
				traces.scaleDowns = append(traces.scaleDowns, TheirScaleDown{Node: node, Time: firstOccurrence(e)})
			}
		}
	}
	if len(unparsed) > 0 {
		traces.notes = append(traces.notes, fmt.Sprintf("%s of the other autoscaler not understood, e.g. %s", cli.Plural(int32(len(unparsed)), "scale-down event"), unparsed[0]))
	}

	var unreadable []string
	var firstErr error
	for _, namespace := range sets.List(namespaces) {
		if err := readPodCreations(ctx, c, namespace, traces.pods); err != nil {
			unreadable = append(unreadable, namespace)
			firstErr = cmp.Or(firstErr, err)
		}
	}
	if len(unreadable) > 0 {
		traces.notes = append(traces.notes, fmt.Sprintf("cannot read the pods of namespaces %s, so the other autoscaler's latency for them is unknown: %v",
			strings.Join(unreadable, ", "), firstErr))
	}

	configMap := &corev1.ConfigMap{}
	switch err := c.Get(ctx, statusKey, configMap); {
	case apierrors.IsNotFound(err):
		traces.notes = append(traces.notes, fmt.Sprintf("no status ConfigMap %s: the other autoscaler writes none (capi-autoscaler does not; upstream not with --write-status-configmap=false), or another (--status-configmap)", statusKey))
	case err != nil:
		traces.notes = append(traces.notes, fmt.Sprintf("cannot read the other autoscaler's status ConfigMap %s: %v", statusKey, err))
	default:
		traces.status = parseTheirStatus(configMap)
	}
	return traces, nil
}

// listEvents lists the events of every namespace with reason.
func listEvents(ctx context.Context, c client.Reader, reason string) ([]corev1.Event, error) {
	var all []corev1.Event
	list := &corev1.EventList{}
	for {
		if err := c.List(ctx, list, client.MatchingFields{"reason": reason}, client.Limit(listPage), client.Continue(list.Continue)); err != nil {
			return nil, fmt.Errorf("listing the %s events of the workload cluster: %w", reason, err)
		}
		all = append(all, list.Items...)
		if list.Continue == "" {
			return all, nil
		}
	}
}

// readPodCreations adds when the pods of namespace were created.
func readPodCreations(ctx context.Context, c client.Reader, namespace string, pods map[string]PodCreation) error {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	for {
		if err := c.List(ctx, list, client.InNamespace(namespace), client.Limit(listPage), client.Continue(list.Continue)); err != nil {
			return err
		}
		for _, pod := range list.Items {
			pods[pod.Namespace+"/"+pod.Name] = PodCreation{UID: pod.UID, Created: pod.CreationTimestamp.Time}
		}
		if list.Continue == "" {
			return nil
		}
	}
}
