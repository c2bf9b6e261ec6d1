package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

const (
	// bookingTime is how long the capacity found for a check-capacity
	// request stays booked for its pods, as upstream keeps it.
	bookingTime = 10 * time.Minute
	// requestExpiry is how long after its creation a check-capacity
	// request that found no capacity fails, as upstream (7 days).
	requestExpiry = 7 * 24 * time.Hour
)

// provisioningRequests are the check-capacity ProvisioningRequests of one
// workload cluster, for its engine (provisioning.Checker): it lists those
// waiting for an answer or booked, with their pods resolved, and writes
// the engine's answers, the bookings' end and the failures to their status,
// as the upstream autoscaler does.
type provisioningRequests struct {
	// optionalKind lists the ProvisioningRequests; its live client also
	// reads PodTemplates and writes the requests' status.
	optionalKind

	// podSets are the resolved pod sets, by request UID: a request's spec
	// does not change.
	podSets map[types.UID][]provisioning.PodSet
	// listed are the requests of the last list, by UID, whose status the
	// answers change.
	listed map[types.UID]*provisioningv1.ProvisioningRequest
}

// newProvisioningRequests lists the ProvisioningRequests of a workload
// cluster from its cache, and reads and writes the rest live.
func newProvisioningRequests(cached client.Reader, live func(context.Context) (client.Client, error), clock clock.PassiveClock) *provisioningRequests {
	return &provisioningRequests{optionalKind: optionalKind{kind: "ProvisioningRequests", cached: cached, live: live, clock: clock}}
}

// ListRequests lists the check-capacity requests waiting for an answer or
// booked. It ends the bookings that are over and fails the requests that
// expired or whose pods cannot be built.
func (c *provisioningRequests) ListRequests(ctx context.Context) ([]provisioning.Request, error) {
	list := &provisioningv1.ProvisioningRequestList{}
	if listed, err := c.list(ctx, list); !listed {
		return nil, err
	}
	now := c.clock.Now()
	live, err := c.live(ctx)
	if err != nil {
		return nil, err
	}
	podSets := map[types.UID][]provisioning.PodSet{}
	c.listed = map[types.UID]*provisioningv1.ProvisioningRequest{}
	var requests []provisioning.Request
	for i := range list.Items {
		request := &list.Items[i]
		if request.Spec.ProvisioningClassName != provisioningv1.CheckCapacityProvisioningClass ||
			request.Spec.Parameters[provisioningv1.ProcessorInstanceParameter] != "" ||
			meta.IsStatusConditionTrue(request.Status.Conditions, provisioningv1.FailedCondition) ||
			meta.IsStatusConditionTrue(request.Status.Conditions, provisioningv1.BookingExpiredCondition) {
			continue
		}
		provisioned := meta.FindStatusCondition(request.Status.Conditions, provisioningv1.ProvisionedCondition)
		booked := provisioned != nil && provisioned.Status == metav1.ConditionTrue
		switch {
		case booked && now.Sub(provisioned.LastTransitionTime.Time) >= bookingTime:
			c.setConditions(ctx, live, request, condition(provisioningv1.BookingExpiredCondition, metav1.ConditionTrue,
				provisioningv1.CapacityReservationTimeExpiredReason, fmt.Sprintf("The capacity was booked for %s", bookingTime), now))
			continue
		case !booked && now.Sub(request.CreationTimestamp.Time) >= requestExpiry:
			c.setConditions(ctx, live, request, condition(provisioningv1.FailedCondition, metav1.ConditionTrue,
				provisioningv1.ExpiredReason, fmt.Sprintf("No capacity was found within %s of the request's creation", requestExpiry), now))
			continue
		}
		sets, known := c.podSets[request.UID]
		if !known {
			var err error
			if sets, err = resolvePodSets(ctx, live, request); apierrors.IsNotFound(err) {
				c.setConditions(ctx, live, request, condition(provisioningv1.FailedCondition, metav1.ConditionTrue,
					provisioningv1.FailedToCreatePodsReason, err.Error(), now))
				continue
			} else if err != nil {
				// The API server failed: tried again next loop.
				klog.FromContext(ctx).Error(err, "Failed to read the pods of a provisioning request", "ProvisioningRequest", klog.KObj(request))
				continue
			}
		}
		podSets[request.UID] = sets
		c.listed[request.UID] = request
		requests = append(requests, provisioning.Request{
			Namespace: request.Namespace, Name: request.Name, UID: request.UID, PodSets: sets, Booked: booked,
		})
	}
	c.podSets = podSets
	return requests, nil
}

// resolvePodSets reads the PodTemplates of a request's podSets.
func resolvePodSets(ctx context.Context, live client.Client, request *provisioningv1.ProvisioningRequest) ([]provisioning.PodSet, error) {
	sets := make([]provisioning.PodSet, 0, len(request.Spec.PodSets))
	for _, set := range request.Spec.PodSets {
		template := &corev1.PodTemplate{}
		if err := live.Get(ctx, client.ObjectKey{Namespace: request.Namespace, Name: set.PodTemplateRef.Name}, template); err != nil {
			return nil, fmt.Errorf("reading PodTemplate %s: %w", set.PodTemplateRef.Name, err)
		}
		sets = append(sets, provisioning.PodSet{Template: template.Template, Count: set.Count})
	}
	return sets, nil
}

// Answer writes the engine's answers: Provisioned=True when the capacity
// was found (it is then booked), else Provisioned=False, or Failed=True
// for a request that asked not to be retried.
func (c *provisioningRequests) Answer(ctx context.Context, answers []provisioning.Answer) {
	live, err := c.live(ctx)
	if err != nil {
		return
	}
	now := c.clock.Now()
	for _, answer := range answers {
		request, ok := c.listed[answer.UID]
		if !ok {
			continue
		}
		switch {
		case answer.Found:
			c.setConditions(ctx, live, request, condition(provisioningv1.ProvisionedCondition, metav1.ConditionTrue,
				provisioningv1.CapacityIsFoundReason, "The pods fit in the cluster as it is; the capacity is booked for them", now))
		case request.Spec.Parameters[provisioningv1.NoRetryParameter] == "true":
			c.setConditions(ctx, live, request, condition(provisioningv1.FailedCondition, metav1.ConditionTrue,
				provisioningv1.CapacityIsNotFoundReason, answer.Message, now))
		default:
			c.setConditions(ctx, live, request, condition(provisioningv1.ProvisionedCondition, metav1.ConditionFalse,
				provisioningv1.CapacityIsNotFoundReason, answer.Message, now))
		}
	}
}

func condition(conditionType string, status metav1.ConditionStatus, reason, message string, now time.Time) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now)}
}

// setConditions sets Accepted and the given conditions on a request's
// status, and writes it when it changed.
func (c *provisioningRequests) setConditions(ctx context.Context, live client.Client, request *provisioningv1.ProvisioningRequest, conditions ...metav1.Condition) {
	updated := request.DeepCopy()
	now := c.clock.Now()
	for _, condition := range append([]metav1.Condition{
		{Type: provisioningv1.AcceptedCondition, Status: metav1.ConditionTrue, Reason: provisioningv1.AcceptedReason, LastTransitionTime: metav1.NewTime(now)},
	}, conditions...) {
		condition.ObservedGeneration = request.Generation
		meta.SetStatusCondition(&updated.Status.Conditions, condition)
	}
	if equality.Semantic.DeepEqual(request.Status, updated.Status) {
		return
	}
	if err := live.Status().Patch(ctx, updated, client.MergeFromWithOptions(request, client.MergeFromWithOptimisticLock{})); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to write the status of a provisioning request", "ProvisioningRequest", klog.KObj(request))
	}
}
