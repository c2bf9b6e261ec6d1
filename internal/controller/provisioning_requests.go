package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
	// terminalRequestTTL is how long a request stays once it is over: 7
	// days after its Provisioned or Failed condition last changed, as
	// upstream deletes it, it is deleted.
	terminalRequestTTL = 7 * 24 * time.Hour
	// acceptedMessage goes with Accepted=True, as upstream's says who
	// took the request up.
	acceptedMessage = "The request is served by the cluster autoscaler (capi-autoscaler)"
)

// provisioningRequests are the ProvisioningRequests of one workload
// cluster of the classes check-capacity and best-effort-atomic-scale-up,
// for its engine (provisioning.Lister): it lists those waiting for an
// answer, scaling up or booked, with their pods resolved, and writes the
// engine's answers, the bookings' end and the failures to their status, as
// the upstream autoscaler does. An atomic scale-up in progress is kept in
// the status too (provisioningv1.ScaleUpDetail). Listing only reads; the
// status is written when the engine's actuation answers (Answer), never in
// DryRun mode.
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

// ours tells whether the engine serves the request's class: a class it
// knows, not meant for another instance.
func ours(request *provisioningv1.ProvisioningRequest) bool {
	switch provisioning.Class(request.Spec.ProvisioningClassName) {
	case provisioning.CheckCapacity:
		return request.Spec.Parameters[provisioningv1.ProcessorInstanceParameter] == ""
	case provisioning.AtomicScaleUp:
		return true
	}
	return false
}

// over tells whether a request is done: failed, or its booking ended.
func over(request *provisioningv1.ProvisioningRequest) bool {
	return meta.IsStatusConditionTrue(request.Status.Conditions, provisioningv1.FailedCondition) ||
		meta.IsStatusConditionTrue(request.Status.Conditions, provisioningv1.BookingExpiredCondition)
}

// overSince is when a request that is over ended: the last change of its
// Provisioned or Failed condition, the conditions upstream counts from.
func overSince(request *provisioningv1.ProvisioningRequest) time.Time {
	var since time.Time
	for _, conditionType := range []string{provisioningv1.ProvisionedCondition, provisioningv1.FailedCondition} {
		if condition := meta.FindStatusCondition(request.Status.Conditions, conditionType); condition != nil && condition.LastTransitionTime.After(since) {
			since = condition.LastTransitionTime.Time
		}
	}
	return since
}

// validity is how long after its creation a request that got no capacity
// is tried: its ValidUntilSeconds parameter for an atomic one, else 7 days.
func validity(request *provisioningv1.ProvisioningRequest) time.Duration {
	if provisioning.Class(request.Spec.ProvisioningClassName) == provisioning.AtomicScaleUp {
		if seconds, err := strconv.Atoi(string(request.Spec.Parameters[provisioningv1.ValidUntilSecondsParameter])); err == nil && seconds > 0 {
			return time.Duration(seconds) * time.Second
		}
	}
	return requestExpiry
}

// ListRequests lists the requests waiting for an answer, scaling up or
// booked, and, as answers, the ends of the bookings that are over, the
// failures of the requests that expired or whose pods cannot be built, and
// the requests over for terminalRequestTTL, which Answer writes or
// deletes. It writes nothing.
func (c *provisioningRequests) ListRequests(ctx context.Context) ([]provisioning.Request, []provisioning.Answer, error) {
	list := &provisioningv1.ProvisioningRequestList{}
	if listed, err := c.list(ctx, list); !listed {
		return nil, nil, err
	}
	now := c.clock.Now()
	live, err := c.live(ctx)
	if err != nil {
		return nil, nil, err
	}
	// Oldest first: they are answered in this order.
	slices.SortStableFunc(list.Items, func(a, b provisioningv1.ProvisioningRequest) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	podSets := map[types.UID][]provisioning.PodSet{}
	c.listed = map[types.UID]*provisioningv1.ProvisioningRequest{}
	var (
		requests []provisioning.Request
		ended    []provisioning.Answer
	)
	end := func(request *provisioningv1.ProvisioningRequest, outcome provisioning.Outcome, message string) {
		c.listed[request.UID] = request
		ended = append(ended, provisioning.Answer{Namespace: request.Namespace, Name: request.Name, UID: request.UID, Outcome: outcome, Message: message})
	}
	for i := range list.Items {
		request := &list.Items[i]
		if !ours(request) {
			continue
		}
		if over(request) {
			if now.Sub(overSince(request)) >= terminalRequestTTL {
				end(request, provisioning.Deleted, fmt.Sprintf("The request has been over for %s", terminalRequestTTL))
			}
			continue
		}
		provisioned := meta.FindStatusCondition(request.Status.Conditions, provisioningv1.ProvisionedCondition)
		booked := provisioned != nil && provisioned.Status == metav1.ConditionTrue
		scaleUp, err := scaleUpOf(request)
		switch {
		case err != nil:
			end(request, provisioning.Unfollowable, err.Error())
			continue
		case booked && now.Sub(provisioned.LastTransitionTime.Time) >= bookingTime:
			end(request, provisioning.BookingExpired, fmt.Sprintf("The capacity was booked for %s", bookingTime))
			continue
		case !booked && scaleUp == nil && now.Sub(request.CreationTimestamp.Time) >= validity(request):
			end(request, provisioning.Expired, fmt.Sprintf("No capacity was found within %s of the request's creation", validity(request)))
			continue
		}
		sets, known := c.podSets[request.UID]
		if !known {
			var err error
			if sets, err = resolvePodSets(ctx, live, request); apierrors.IsNotFound(err) {
				if booked {
					end(request, provisioning.BookingFailed, "The capacity booked cannot be kept: "+err.Error())
				} else {
					end(request, provisioning.PodsUnavailable, err.Error())
				}
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
			Namespace: request.Namespace, Name: request.Name, UID: request.UID,
			Class: provisioning.Class(request.Spec.ProvisioningClassName), PodSets: sets, Booked: booked, ScaleUp: scaleUp,
			NoRetry: noRetry(request),
		})
	}
	c.podSets = podSets
	return requests, ended, nil
}

// scaleUpOf reads the atomic scale-up in progress from a request's status.
func scaleUpOf(request *provisioningv1.ProvisioningRequest) (*provisioning.ScaleUp, error) {
	detail, ok := request.Status.ProvisioningClassDetails[provisioningv1.ScaleUpDetail]
	if !ok {
		return nil, nil
	}
	scaleUp := &provisioning.ScaleUp{}
	if err := json.Unmarshal([]byte(detail), scaleUp); err != nil || len(scaleUp.Groups) == 0 {
		return nil, fmt.Errorf("provisioningClassDetails[%s] no longer says which nodes the scale-up in progress added, so they cannot be followed: %q",
			provisioningv1.ScaleUpDetail, detail)
	}
	return scaleUp, nil
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

// Answer writes the engine's answers to the requests' status.
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
		if answer.Outcome == provisioning.Deleted {
			c.delete(ctx, live, request)
			continue
		}
		var conditions []metav1.Condition
		for _, set := range answer.Conditions(noRetry(request)) {
			conditions = append(conditions, metav1.Condition{Type: set.Type, Status: set.Status, Reason: set.Reason, Message: set.Message, LastTransitionTime: metav1.NewTime(now)})
		}
		var scaleUp *provisioning.ScaleUp
		if answer.Outcome == provisioning.ScalingUp {
			scaleUp = answer.ScaleUp
		}
		c.setStatus(ctx, live, request, scaleUp, conditions...)
	}
}

// delete deletes a request that has been over for terminalRequestTTL,
// unless it changed since it was read.
func (c *provisioningRequests) delete(ctx context.Context, live client.Client, request *provisioningv1.ProvisioningRequest) {
	err := live.Delete(ctx, request, client.Preconditions{UID: &request.UID, ResourceVersion: &request.ResourceVersion})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Deleted a provisioning request over for a week", "ProvisioningRequest", klog.KObj(request))
	case apierrors.IsForbidden(err):
		// A workload role from before deletions: the request stays.
		klog.FromContext(ctx).V(2).Info("Not allowed to delete a provisioning request over for a week", "ProvisioningRequest", klog.KObj(request), "err", err)
	case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
		klog.FromContext(ctx).Error(err, "Failed to delete a provisioning request over for a week", "ProvisioningRequest", klog.KObj(request))
	}
}

// noRetry says whether a check-capacity request asks not to be tried
// again: capacity not found fails it. Upstream reads the parameter for
// that class only.
func noRetry(request *provisioningv1.ProvisioningRequest) bool {
	return provisioning.Class(request.Spec.ProvisioningClassName) == provisioning.CheckCapacity &&
		request.Spec.Parameters[provisioningv1.NoRetryParameter] == "true"
}

// setStatus sets Accepted and the given conditions on a request's status,
// and the scale-up in progress (none when nil), and writes it when it
// changed.
func (c *provisioningRequests) setStatus(ctx context.Context, live client.Client, request *provisioningv1.ProvisioningRequest,
	scaleUp *provisioning.ScaleUp, conditions ...metav1.Condition) {
	updated := request.DeepCopy()
	now := c.clock.Now()
	for _, condition := range append([]metav1.Condition{
		{Type: provisioningv1.AcceptedCondition, Status: metav1.ConditionTrue, Reason: provisioningv1.AcceptedReason, Message: acceptedMessage,
			LastTransitionTime: metav1.NewTime(now)},
	}, conditions...) {
		condition.ObservedGeneration = request.Generation
		meta.SetStatusCondition(&updated.Status.Conditions, condition)
	}
	delete(updated.Status.ProvisioningClassDetails, provisioningv1.ScaleUpDetail)
	if scaleUp != nil {
		detail, err := json.Marshal(scaleUp)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Failed to encode the scale-up of a provisioning request", "ProvisioningRequest", klog.KObj(request))
			return
		}
		if updated.Status.ProvisioningClassDetails == nil {
			updated.Status.ProvisioningClassDetails = map[string]provisioningv1.Detail{}
		}
		updated.Status.ProvisioningClassDetails[provisioningv1.ScaleUpDetail] = provisioningv1.Detail(detail)
	}
	if equality.Semantic.DeepEqual(request.Status, updated.Status) {
		return
	}
	if err := live.Status().Patch(ctx, updated, client.MergeFromWithOptions(request, client.MergeFromWithOptimisticLock{})); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to write the status of a provisioning request", "ProvisioningRequest", klog.KObj(request))
	}
}
