// Package provisioning is what the engine knows of ProvisioningRequests
// (autoscaling.x-k8s.io/v1) and what it answers. Of the class
// check-capacity it asks: does the cluster, as it is, have room for all the
// pods a request asks for? Of the class best-effort-atomic-scale-up: if
// not, can one scale-up add the nodes for all of them? It adds them all or
// none, and removes those it added when any fails. A request whose pods all
// fit gets that room booked: the engine keeps it, as it keeps the room of
// pending pods, until the booking ends or the request's pods take it.
package provisioning

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
)

// ConsumeAnnotations name, on a pod, the request in its namespace whose
// capacity the pod takes: the current key and the one upstream still
// honours.
var ConsumeAnnotations = []string{
	provisioningv1.ConsumeProvisioningRequestAnnotation,
	provisioningv1.DeprecatedConsumeProvisioningRequestAnnotation,
}

// Class is how a request is served.
type Class string

const (
	// CheckCapacity requests are answered from the nodes that exist.
	CheckCapacity Class = provisioningv1.CheckCapacityProvisioningClass
	// AtomicScaleUp requests get the nodes for all their pods, or none.
	AtomicScaleUp Class = provisioningv1.BestEffortAtomicScaleUpProvisioningClass
)

// Request is a ProvisioningRequest the engine serves, resolved.
type Request struct {
	Namespace string
	Name      string
	UID       types.UID
	Class     Class
	PodSets   []PodSet
	// Booked is set once capacity was found or provisioned: its room is
	// kept for the pods still to come.
	Booked bool
	// ScaleUp is the atomic scale-up in progress for the request, or nil.
	ScaleUp *ScaleUp
	// NoRetry is set when a check-capacity request asks not to be tried
	// again (provisioningv1.NoRetryParameter): capacity not found fails
	// it. Upstream reads the parameter for that class only.
	NoRetry bool
}

// ScaleUp is an atomic scale-up in progress: the nodes it asked of each
// group, and the instances that appeared for them. It is kept in the
// request's status, so that a restarted manager follows it and can still
// remove what it added.
type ScaleUp struct {
	Started time.Time `json:"started"`
	// Groups are the nodes added to each group, by group ID.
	Groups map[string]int `json:"groups"`
	// Instances are, by group ID, the instances that appeared for the
	// scale-up, at most as many as it added there: their Machines' names,
	// or their IDs when they have no Machine.
	Instances map[string][]string `json:"instances,omitempty"`
}

// PodSet is Count pods of Template.
type PodSet struct {
	Template corev1.PodTemplateSpec
	Count    int32
}

// Key is the request's namespace/name.
func (r *Request) Key() string { return r.Namespace + "/" + r.Name }

// Size is the number of pods the request asks for.
func (r *Request) Size() int {
	size := 0
	for _, set := range r.PodSets {
		size += int(set.Count)
	}
	return size
}

// Pods are the virtual pods of the request, less the first consumed ones:
// the pods that took their room already.
func (r *Request) Pods(consumed int) []*corev1.Pod {
	var pods []*corev1.Pod
	for i, set := range r.PodSets {
		for n := range set.Count {
			if consumed > 0 {
				consumed--
				continue
			}
			pods = append(pods, r.pod(i, n, &set.Template))
		}
	}
	return pods
}

func (r *Request) pod(set int, n int32, template *corev1.PodTemplateSpec) *corev1.Pod {
	spec := template.Spec.DeepCopy()
	spec.NodeName = ""
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: r.Namespace, Name: fmt.Sprintf("%s-%d-%d", r.Name, set, n),
			UID:    types.UID(fmt.Sprintf("%s-%d-%d", r.UID, set, n)),
			Labels: template.Labels, Annotations: maps.Clone(template.Annotations),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: provisioningv1.GroupVersion.String(), Kind: "ProvisioningRequest",
				Name: r.Name, UID: r.UID, Controller: ptr.To(true),
			}},
		},
		Spec:   *spec,
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// ConsumerOf is the key of the request a pod consumes, or "".
func ConsumerOf(namespace string, annotations map[string]string) string {
	for _, key := range ConsumeAnnotations {
		if name := annotations[key]; name != "" {
			return namespace + "/" + name
		}
	}
	return ""
}

// Outcome is what became of a request in a loop.
type Outcome string

const (
	// Found: all the pods fit on the nodes that exist; their room is booked.
	Found Outcome = "Found"
	// NotFound: not all the pods fit, nor could one scale-up add nodes for
	// all of them; the request is tried again.
	NotFound Outcome = "NotFound"
	// ScalingUp: an atomic scale-up for the pods was started, or goes on
	// (Answer.ScaleUp).
	ScalingUp Outcome = "ScalingUp"
	// Provisioned: the nodes of the atomic scale-up are up and the pods fit;
	// their room is booked.
	Provisioned Outcome = "Provisioned"
	// ScaleUpFailed: a node of the atomic scale-up failed or did not come in
	// time, and the nodes it added were removed.
	ScaleUpFailed Outcome = "ScaleUpFailed"
	// BookingConsumed: every pod of a booked request is scheduled, so its
	// booking ends before its time, as upstream ends it.
	BookingConsumed Outcome = "BookingConsumed"

	// The outcomes of the requests that a Lister no longer serves, which
	// it lists as answers beside the requests it serves.

	// BookingExpired: the capacity found or provisioned stayed booked as
	// long as a booking lasts.
	BookingExpired Outcome = "BookingExpired"
	// Expired: no capacity was found within the request's validity.
	Expired Outcome = "Expired"
	// Unfollowable: the request's status no longer says which nodes the
	// atomic scale-up in progress added.
	Unfollowable Outcome = "Unfollowable"
	// PodsUnavailable: the pod templates the request names do not exist.
	PodsUnavailable Outcome = "PodsUnavailable"
	// BookingFailed: the pod templates of a booked request no longer
	// exist, so its room cannot be kept.
	BookingFailed Outcome = "BookingFailed"
	// Deleted: the request has been over (failed, or its booking ended)
	// for as long as upstream keeps such a request, and is deleted. It
	// sets no condition.
	Deleted Outcome = "Deleted"
)

// Answer is what became of a request in a loop, and why.
type Answer struct {
	Namespace string
	Name      string
	UID       types.UID
	Outcome   Outcome
	Message   string
	// ScaleUp is the scale-up in progress, with Outcome ScalingUp.
	ScaleUp *ScaleUp
}

// Condition is a condition an answer sets on its request.
type Condition struct {
	Type    string
	Status  metav1.ConditionStatus
	Reason  string
	Message string
}

// Conditions are the conditions the answer sets on its request, besides
// Accepted, as upstream sets them; the last is the one that tells the
// answer. noRetry is the request's (Request.NoRetry). A Deleted request
// gets none.
func (a Answer) Conditions(noRetry bool) []Condition {
	set := func(conditionType string, status metav1.ConditionStatus, reason string) Condition {
		return Condition{Type: conditionType, Status: status, Reason: reason, Message: a.Message}
	}
	switch a.Outcome {
	case Found:
		return []Condition{set(provisioningv1.ProvisionedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsFoundReason)}
	case Provisioned:
		return []Condition{set(provisioningv1.ProvisionedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsProvisionedReason)}
	case ScalingUp:
		return []Condition{set(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.ScaleUpInProgressReason)}
	case ScaleUpFailed:
		return []Condition{
			set(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.ScaleUpFailedReason),
			set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ScaleUpFailedReason),
		}
	case BookingExpired:
		return []Condition{set(provisioningv1.BookingExpiredCondition, metav1.ConditionTrue, provisioningv1.CapacityReservationTimeExpiredReason)}
	case BookingConsumed:
		return []Condition{set(provisioningv1.BookingExpiredCondition, metav1.ConditionTrue, provisioningv1.CapacityBookingConsumedReason)}
	case Expired:
		return []Condition{set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ExpiredReason)}
	case Unfollowable:
		return []Condition{set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.ScaleUpFailedReason)}
	case PodsUnavailable:
		return []Condition{set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.FailedToCreatePodsReason)}
	case BookingFailed:
		return []Condition{set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.FailedToBookCapacityReason)}
	case NotFound:
		if noRetry {
			return []Condition{set(provisioningv1.FailedCondition, metav1.ConditionTrue, provisioningv1.CapacityIsNotFoundReason)}
		}
		return []Condition{set(provisioningv1.ProvisionedCondition, metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason)}
	}
	return nil
}

// Lister lists the requests of a cluster that the engine serves, waiting
// for an answer, scaling up or booked, and records the answers.
type Lister interface {
	// ListRequests lists the requests the engine serves and, as answers,
	// the ends of those it read that it no longer serves. It writes
	// nothing.
	ListRequests(ctx context.Context) ([]Request, []Answer, error)
	// Answer records the answers, those of ListRequests included, in the
	// requests' status.
	Answer(ctx context.Context, answers []Answer)
}
