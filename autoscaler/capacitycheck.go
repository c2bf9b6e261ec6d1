package autoscaler

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// checkCapacity answers the check-capacity ProvisioningRequests on the
// nodes that exist, without scaling: in a fork of the snapshot that holds
// the room pending pods wait for, the booked requests keep their room
// first, then each request waiting for an answer, oldest first, is found
// when all its pods fit, and its room is booked for the next ones. The
// room of booked requests is kept from scale-down (l.booked).
func (s *steps) checkCapacity(ctx context.Context, l *loop) {
	if s.opts.Requests == nil {
		return
	}
	readCtx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	requests, err := s.opts.Requests.ListRequests(readCtx)
	cancel()
	if err != nil {
		if err.Error() != s.history.requestsError {
			klog.FromContext(ctx).Error(err, "Cannot read the provisioning requests of the cluster; none is answered")
		}
		s.history.requestsError = err.Error()
		l.status.RequestsError = err.Error()
		return
	}
	s.history.requestsError = ""
	if len(requests) == 0 {
		return
	}
	// Booked first: their room was promised.
	slices.SortStableFunc(requests, func(a, b provisioning.Request) int {
		if a.Booked != b.Booked {
			if a.Booked {
				return -1
			}
			return 1
		}
		return 0
	})
	consumed := consumers(l.snapshot)

	l.snapshot.Fork()
	defer l.snapshot.Revert()
	placeWaitingPods(l.snapshot, l.absorbed)
	sched := simulator.NewScheduler(ctx, l.snapshot)
	var answers []provisioning.Answer
	for i := range requests {
		request := &requests[i]
		pods := request.Pods(consumed[request.Key()])
		sched.Fork()
		result := sched.SchedulePods(pods, simulator.ScheduleOptions{})
		found := len(result.Unschedulable) == 0
		if request.Booked || found {
			sched.Commit()
			l.booked = append(l.booked, result.Scheduled...)
		} else {
			sched.Revert()
		}
		if request.Booked {
			continue
		}
		answer := provisioning.Answer{Namespace: request.Namespace, Name: request.Name, UID: request.UID, Found: found}
		if !found {
			answer.Message = fmt.Sprintf("%d of the %d pods fit on no node of the cluster as it is", cmp.Or(len(pods)-len(result.Scheduled), 0), len(pods))
		}
		answers = append(answers, answer)
	}
	s.opts.Requests.Answer(ctx, answers)
}

// consumers counts, by request key, the pods of the snapshot that consume
// a ProvisioningRequest.
func consumers(snap *snapshot.Snapshot) map[string]int {
	counts := map[string]int{}
	for _, node := range snap.NodeInfos() {
		for _, pod := range snap.PodsOn(node.Node().Name) {
			if key := provisioning.ConsumerOf(pod.Namespace, pod.Annotations); key != "" {
				counts[key]++
			}
		}
	}
	for _, pod := range snap.PendingPods() {
		if key := provisioning.ConsumerOf(pod.Namespace, pod.Annotations); key != "" {
			counts[key]++
		}
	}
	return counts
}
