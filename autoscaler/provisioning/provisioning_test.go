package provisioning

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
)

// TestConditions pins the condition each answer sets, beside Accepted,
// against the one the upstream autoscaler sets in the same situation
// (docs/capacity.md, "Conditions and reasons compared with upstream"):
// the last condition is the one a user or Kueue reads the answer from.
func TestConditions(t *testing.T) {
	type condition struct {
		conditionType string
		status        metav1.ConditionStatus
		reason        string
	}
	provisioned := func(status metav1.ConditionStatus, reason string) condition {
		return condition{provisioningv1.ProvisionedCondition, status, reason}
	}
	failed := func(reason string) condition {
		return condition{provisioningv1.FailedCondition, metav1.ConditionTrue, reason}
	}
	bookingExpired := func(reason string) condition {
		return condition{provisioningv1.BookingExpiredCondition, metav1.ConditionTrue, reason}
	}
	for _, tc := range []struct {
		name    string
		outcome Outcome
		noRetry bool
		want    []condition
	}{
		// checkcapacity/provisioningclass.go, besteffortatomic/provisioning_class.go
		{"all the pods fit", Found, false, []condition{provisioned(metav1.ConditionTrue, provisioningv1.CapacityIsFoundReason)}},
		{"not all fit, retried", NotFound, false, []condition{provisioned(metav1.ConditionFalse, provisioningv1.CapacityIsNotFoundReason)}},
		{"not all fit, noRetry", NotFound, true, []condition{failed(provisioningv1.CapacityIsNotFoundReason)}},
		{"the atomic scale-up's nodes are up", Provisioned, false, []condition{provisioned(metav1.ConditionTrue, provisioningv1.CapacityIsProvisionedReason)}},
		// processors/provreq/processor_test.go: TestRefresh, TestBookCapacityConsumed
		{"booked for 10 minutes", BookingExpired, false, []condition{bookingExpired(provisioningv1.CapacityReservationTimeExpiredReason)}},
		{"all the pods scheduled", BookingConsumed, false, []condition{bookingExpired(provisioningv1.CapacityBookingConsumedReason)}},
		{"not provisioned within 7 days", Expired, false, []condition{failed(provisioningv1.ExpiredReason)}},
		// processors/provreq/injector.go, processor.go (bookCapacity)
		{"pods cannot be built", PodsUnavailable, false, []condition{failed(provisioningv1.FailedToCreatePodsReason)}},
		{"booked pods cannot be built", BookingFailed, false, []condition{failed(provisioningv1.FailedToBookCapacityReason)}},
		// processors/provreq/processor_test.go: TestDeleteOldProvReqs
		{"over for 7 days", Deleted, false, nil},
		// capi-autoscaler's own: upstream has no such step.
		{"atomic scale-up in progress", ScalingUp, false, []condition{provisioned(metav1.ConditionFalse, provisioningv1.ScaleUpInProgressReason)}},
		{"atomic scale-up rolled back", ScaleUpFailed, false, []condition{
			provisioned(metav1.ConditionFalse, provisioningv1.ScaleUpFailedReason), failed(provisioningv1.ScaleUpFailedReason)}},
		{"atomic scale-up no longer followable", Unfollowable, false, []condition{failed(provisioningv1.ScaleUpFailedReason)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Answer{Outcome: tc.outcome, Message: "why"}.Conditions(tc.noRetry)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d conditions %+v, want %+v", len(got), got, tc.want)
			}
			for i, want := range tc.want {
				if got[i].Type != want.conditionType || got[i].Status != want.status || got[i].Reason != want.reason || got[i].Message != "why" {
					t.Errorf("condition %d: got %s=%s (%s) %q, want %s=%s (%s) with the answer's message",
						i, got[i].Type, got[i].Status, got[i].Reason, got[i].Message, want.conditionType, want.status, want.reason)
				}
			}
		})
	}
}
