package autoscaler

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaleup"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// readRequests lists the ProvisioningRequests the engine serves, within
// OptionalReadTimeout, and the ends of those it no longer serves, which
// the loop answers with its own answers (giveAnswers). It writes
// nothing. Pending pods that consume a request whose atomic
// scale-up is in progress are left out of the snapshot: they wait for the
// nodes it adds, and must not start a scale-up of their own. A failure
// does not stop the loop: it goes on without requests, and the status says
// why.
func (s *steps) readRequests(ctx context.Context, in *snapshot.Input, l *loop) {
	if s.opts.Requests == nil {
		return
	}
	readCtx, cancel := context.WithTimeout(ctx, s.opts.OptionalReadTimeout)
	requests, ended, err := s.opts.Requests.ListRequests(readCtx)
	cancel()
	if err != nil {
		if s.told.requestsError.tellOnly(err.Error(), l.now) {
			klog.FromContext(ctx).Error(err, "Cannot read the provisioning requests of the cluster; none is answered")
		}
		l.status.RequestsError = err.Error()
		return
	}
	// The read succeeded: its next error is told.
	s.told.requestsError.endRound()
	l.requests = requests
	l.ended = ended

	listed := sets.New[types.UID]()
	scaling := sets.New[string]()
	l.reserved = map[string]int{}
	for i := range requests {
		request := &requests[i]
		listed.Insert(request.UID)
		// Only the engine's records, and the management cluster's, say
		// what a scale-up added: the request's status is written in the
		// workload cluster, where its tenants may write it too.
		switch remembered := s.atomic.inProgress(request.UID); {
		case request.Booked:
			// Its scale-up is over, whatever its status names: that
			// keeps no group from scaling down.
			request.ScaleUp = nil
		case remembered != nil:
			remembered.record = &provisioning.ScaleUp{Started: remembered.record.Started, Groups: remembered.record.Groups,
				Instances: s.atomic.claimsOf(request.UID)}
			request.ScaleUp = remembered.record
		case request.ScaleUp != nil:
			klog.FromContext(ctx).V(2).Info("Ignoring the atomic scale-up a ProvisioningRequest's status names: this autoscaler has no record of it",
				"ProvisioningRequest", klog.KRef(request.Namespace, request.Name))
			request.ScaleUp = nil
		}
		if request.ScaleUp == nil {
			continue
		}
		scaling.Insert(request.Key())
		registered := registeredInstances(l.groups.Groups, request.ScaleUp)
		for id, added := range request.ScaleUp.Groups {
			l.reserved[id] += max(added-registered[id], 0)
		}
	}
	// A request deleted during its scale-up leaves its nodes to scale-down.
	s.atomic.forgetAllBut(listed)
	if scaling.Len() > 0 {
		in.Pods = slices.DeleteFunc(slices.Clone(in.Pods), func(pod *corev1.Pod) bool {
			return pod.Spec.NodeName == "" && scaling.Has(provisioning.ConsumerOf(pod.Namespace, pod.Annotations))
		})
		in.CachedPods = slices.DeleteFunc(slices.Clone(in.CachedPods), func(pod *snapshot.Pod) bool {
			return pod.NodeName == "" && scaling.Has(provisioning.ConsumerOf(pod.Namespace, pod.Annotations))
		})
	}
}

// registeredInstances counts, by group ID, the instances of a scale-up
// that registered a node.
func registeredInstances(groups []nodegroups.NodeGroup, scaleUp *provisioning.ScaleUp) map[string]int {
	counts := map[string]int{}
	for _, group := range groups {
		ours := sets.New(scaleUp.Instances[group.ID()]...)
		if _, ok := scaleUp.Groups[group.ID()]; !ok {
			continue
		}
		for _, instance := range group.Instances() {
			if ours.Has(instanceKey(instance)) && instance.NodeName != "" {
				counts[group.ID()]++
			}
		}
	}
	return counts
}

// bookRequests finds where the pods still to come of the booked requests
// have their room (l.booked): scale-up gives it to no other pod, and
// scale-down keeps it. Pods that consume a request take their share of its
// room already. A request whose pods are all scheduled holds no room: its
// booking is consumed, and answered so.
func (s *steps) bookRequests(ctx context.Context, l *loop) {
	if !slices.ContainsFunc(l.requests, func(r provisioning.Request) bool { return r.Booked }) {
		return
	}
	l.snapshot.Fork()
	defer l.snapshot.Revert()
	consumed := l.consumedRequests()
	sched := simulator.NewScheduler(ctx, l.snapshot)
	for i := range l.requests {
		request := &l.requests[i]
		switch {
		case !request.Booked:
		case consumed.scheduled[request.Key()] >= request.Size():
			l.answered = true
			l.answers = append(l.answers, provisioning.Answer{
				Namespace: request.Namespace, Name: request.Name, UID: request.UID, Outcome: provisioning.BookingConsumed,
				Message: fmt.Sprintf("All the %d pods of the request are scheduled; no capacity is booked for them any more", request.Size()),
			})
		default:
			result := sched.SchedulePods(request.Pods(consumed.pods[request.Key()]), simulator.ScheduleOptions{})
			l.booked = append(l.booked, result.Scheduled...)
		}
	}
}

// answerRequests answers the requests not booked, oldest first, after the
// scale-up of pending pods, on the nodes that exist with the room pending
// pods wait for held:
//   - a request whose pods all fit is found, and its room booked;
//   - a check-capacity request is otherwise not found;
//   - an atomic scale-up in progress is followed: provisioned once its
//     pods fit, rolled back when a node of it fails or does not come;
//   - a best-effort-atomic-scale-up request gets one scale-up for all its
//     pods, or none: at most one starts per loop, and none in a loop that
//     scaled up already, whose groups' sizes the plan would not see.
//
// The answers are given at the end of the loop (giveAnswers).
func (s *steps) answerRequests(ctx context.Context, l *loop) {
	if len(l.requests) == 0 {
		return
	}
	l.answered = true
	consumed := l.consumedRequests()
	l.snapshot.Fork()
	defer l.snapshot.Revert()
	placeWaitingPods(l.snapshot, slices.Concat(l.booked, l.absorbed))
	mayStart := !l.scaledUp

	for i := range l.requests {
		request := &l.requests[i]
		if request.Booked {
			continue
		}
		pods := request.Pods(consumed.pods[request.Key()])
		answer := provisioning.Answer{Namespace: request.Namespace, Name: request.Name, UID: request.UID}
		placements, unplaced := s.tryPlace(ctx, l, pods)
		switch {
		case unplaced == 0 && request.ScaleUp != nil:
			answer.Outcome, answer.Message = provisioning.Provisioned, "The nodes of the scale-up are up and all the pods fit; the capacity is booked for them"
			s.atomic.forget(request.UID)
		case unplaced == 0:
			answer.Outcome, answer.Message = provisioning.Found, "The pods fit in the cluster as it is; the capacity is booked for them"
		case request.ScaleUp != nil:
			answer = s.followScaleUp(ctx, l, request, answer)
		case request.Class == provisioning.CheckCapacity:
			answer.Outcome = provisioning.NotFound
			answer.Message = fmt.Sprintf("%d of the %d pods fit on no node of the cluster as it is", unplaced, len(pods))
		case !mayStart:
			continue
		default:
			answer = s.startScaleUp(ctx, l, request, pods, answer)
			mayStart = answer.Outcome != provisioning.ScalingUp
		}
		if answer.Outcome == provisioning.Found || answer.Outcome == provisioning.Provisioned {
			for _, placement := range placements {
				_ = l.snapshot.AddPod(snapshot.NewPodInfo(placement.Pod), placement.NodeName)
			}
			l.booked = append(l.booked, placements...)
		}
		l.answers = append(l.answers, answer)
	}
}

// giveAnswers has the actuation give the requests the loop answered, and
// those the read found no longer served, their answers.
func (s *steps) giveAnswers(ctx context.Context, l *loop) {
	if l.answered || len(l.ended) > 0 {
		answers := slices.Concat(l.ended, l.answers)
		l.status.Requests = answers
		s.act.answerRequests(ctx, l, answers)
	}
}

// tryPlace places pods on the nodes of the snapshot, all or none, and
// returns where, or how many fit nowhere.
func (s *steps) tryPlace(ctx context.Context, l *loop, pods []*corev1.Pod) ([]simulator.Placement, int) {
	l.snapshot.Fork()
	defer l.snapshot.Revert()
	result := simulator.NewScheduler(ctx, l.snapshot).SchedulePods(pods, simulator.ScheduleOptions{})
	if len(result.Unschedulable) > 0 {
		return nil, cmp.Or(len(pods)-len(result.Scheduled), 1)
	}
	return result.Scheduled, 0
}

// startScaleUp plans new nodes for all the pods of a request, within the
// groups' max sizes, the cluster's limits and backoffs, counting on no
// node on its way (those are other pods'), on groups that can take back
// the very instances it adds (RemovesChosenInstances), and has the
// actuation start it (startAtomicScaleUp): every group of the plan grows,
// or none.
func (s *steps) startScaleUp(ctx context.Context, l *loop, request *provisioning.Request, pods []*corev1.Pod, answer provisioning.Answer) provisioning.Answer {
	plan := s.settings.scaleUp.Plan(ctx, l.snapshot, scaleup.State{
		Upcoming: map[string]int{},
		Skip: func(group nodegroups.NodeGroup) string {
			if !group.RemovesChosenInstances() {
				return reasonCannotTakeBack
			}
			return s.skipScaleUpReason(group, l.now)
		},
		Pods: pods,
	})
	if len(plan.NoScaleUp) > 0 || len(plan.Increases) == 0 {
		answer.Outcome = provisioning.NotFound
		answer.Message = fmt.Sprintf("No scale-up can add nodes for all the %d pods; nothing was added", len(pods))
		if len(plan.NoScaleUp) > 0 {
			answer.Message = fmt.Sprintf("%d of the %d pods fit on no new node (%s); nothing was added",
				len(plan.NoScaleUp), len(pods), strings.TrimPrefix(plan.NoScaleUp[0].Message(), "pod didn't trigger scale-up: "))
		}
		return answer
	}
	return s.act.startAtomicScaleUp(ctx, l, request, plan, len(pods), answer)
}

// reasonCannotTakeBack is why an atomic scale-up leaves out a group whose
// instances cannot be removed one by one.
const reasonCannotTakeBack = "its instances cannot be removed one by one (a MachinePool without MachinePool Machines, or at zero), " +
	"so a failed atomic scale-up could not be taken back"

// instanceKey names an instance across loops: its Machine's name, as its
// ID becomes the provider ID when the Machine gets one.
func instanceKey(instance nodegroups.Instance) string {
	return cmp.Or(instance.Name, instance.ID)
}

// instanceKeys are the keys of a group's instances.
func instanceKeys(group nodegroups.NodeGroup) sets.Set[string] {
	keys := sets.New[string]()
	for _, instance := range group.Instances() {
		keys.Insert(instanceKey(instance))
	}
	return keys
}

func groupByID(groups []nodegroups.NodeGroup, id string) nodegroups.NodeGroup {
	for _, group := range groups {
		if group.ID() == id {
			return group
		}
	}
	return nil
}

// consumedRequests counts the pods of the loop's snapshot that consume a
// ProvisioningRequest, once per loop: booking and answering both need it,
// and the forks between them change no real pod.
func (l *loop) consumedRequests() consumption {
	if l.consumed.pods == nil {
		l.consumed = consumers(l.snapshot)
	}
	return l.consumed
}

// consumption counts, by request key, the pods that consume a
// ProvisioningRequest.
type consumption struct {
	// pods are all of them, pending ones included: each takes its share of
	// the request's room.
	pods map[string]int
	// scheduled are those bound to a node.
	scheduled map[string]int
}

// consumers counts the pods of the snapshot that consume a
// ProvisioningRequest.
func consumers(snap *snapshot.Snapshot) consumption {
	counts := consumption{pods: map[string]int{}, scheduled: map[string]int{}}
	for _, node := range snap.NodeInfos() {
		for _, pod := range snap.PodsOn(node.Node().Name) {
			if key := provisioning.ConsumerOf(pod.Namespace, pod.Annotations); key != "" {
				counts.pods[key]++
				counts.scheduled[key]++
			}
		}
	}
	for _, pod := range snap.PendingPods() {
		if key := provisioning.ConsumerOf(pod.Namespace, pod.Annotations); key != "" {
			counts.pods[key]++
		}
	}
	return counts
}
