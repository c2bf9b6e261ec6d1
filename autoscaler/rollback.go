// The atomic scale-ups of ProvisioningRequests that failed: what tells
// a failure, and the rollback that takes back what they added, over as
// many loops as it takes.

package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// Events of the atomic scale-ups of ProvisioningRequests, on node groups.
const (
	// EventScaleUpRolledBack says that a rollback handed instances and
	// nodes of a failed atomic scale-up for removal.
	EventScaleUpRolledBack = "ScaleUpRolledBack"
	// EventScaleUpRollbackIncomplete says that a rollback gave up, after
	// rollbackTimeout, on instances it could not remove.
	EventScaleUpRollbackIncomplete = "ScaleUpRollbackIncomplete"
)

// rollbackTimeout bounds the rollback of a failed atomic scale-up: what it
// could not remove by then (its group refused the removal all along, being
// paused, rolling out or at its min size, or the removals failed) is left
// as any node or Machine is, to scale-down and to the removal of
// long-unregistered Machines, and the request fails. Longer than a pause
// for a move or a short rollout, and than NodeDeletionTimeout, after which
// a node the group did not remove is given back; short enough that a
// request whose capacity never comes is not kept waiting.
const rollbackTimeout = 10 * time.Minute

// rollback is the taking back of a failed atomic scale-up, over as many
// loops as it takes, within rollbackTimeout.
type rollback struct {
	failure string
	started time.Time
	// done are the keys of its instances handed for removal, or left to
	// scale-down because they run pods: nothing is asked twice.
	done sets.Set[string]
	// givenUp are, by group ID, the sizes without an instance given up.
	givenUp map[string]int
	// kept counts its nodes left to scale-down because they run pods.
	kept int
}

// unfinishedRollback is a rollback that gave up: the instances it left,
// by group ID, shown on the ClusterAutoscaler until they are gone.
type unfinishedRollback struct {
	request string
	left    map[string][]string
	cause   string
}

// followScaleUp waits for the nodes of a scale-up in progress, and rolls
// it back when one of its instances failed or its nodes did not all come
// within the groups' max provision time: over as many loops as it takes,
// within rollbackTimeout.
func (s *steps) followScaleUp(ctx context.Context, l *loop, request *provisioning.Request, answer provisioning.Answer) provisioning.Answer {
	// The engine's own record: readRequests takes no other.
	remembered := s.atomic.inProgress(request.UID)
	if remembered.rollback != nil {
		return s.act.rollBack(ctx, l, request, remembered, remembered.rollback.failure, answer)
	}
	failure := s.scaleUpFailure(l, remembered.record)
	if failure == "" {
		answer.Outcome, answer.ScaleUp = provisioning.ScalingUp, remembered.record
		answer.Message = fmt.Sprintf("Waiting for the nodes of the scale-up started at %s", remembered.record.Started.UTC().Format("15:04:05"))
		return answer
	}
	return s.act.rollBack(ctx, l, request, remembered, failure, answer)
}

// scaleUpFailure says why a scale-up in progress failed, or "": a group of
// it backs off (one of its instances failed, or it could not grow), one of
// its instances failed or was removed, or its nodes did not all register
// within the group's max provision time.
func (s *steps) scaleUpFailure(l *loop, record *provisioning.ScaleUp) string {
	registered := registeredInstances(l.groups.Groups, record)
	for _, id := range slices.Sorted(maps.Keys(record.Groups)) {
		group := groupByID(l.groups.Groups, id)
		if group == nil {
			return fmt.Sprintf("Node group %s is no longer autoscaled", id)
		}
		if backoff := s.state.BackoffOf(id, l.now); !backoff.Until.IsZero() {
			return fmt.Sprintf("Node group %s failed to scale up (%s): %s", id, backoff.Reason, backoff.Message)
		}
		present := instanceKeys(group)
		for _, instance := range group.Instances() {
			if slices.Contains(record.Instances[id], instanceKey(instance)) && instance.Error != nil {
				return fmt.Sprintf("Instance %s of %s failed: %s", instanceKey(instance), id, instance.Error.Message)
			}
		}
		for _, ours := range record.Instances[id] {
			if !present.Has(ours) {
				return fmt.Sprintf("Instance %s of %s was removed", ours, id)
			}
		}
		if provisionTime := s.provisionTime(group); registered[id] < record.Groups[id] && l.now.Sub(record.Started) >= provisionTime {
			return fmt.Sprintf("%d of the %d nodes added to %s registered within %s", registered[id], record.Groups[id], id, provisionTime)
		}
	}
	return ""
}

// removeScaleUp takes back what a failed scale-up added, group by group: the
// sizes it asked for that have no instance yet are given up, its
// instances without a node are deleted, and its nodes that run no pod but
// DaemonSet and mirror pods are removed the way scale-down removes empty
// nodes: the actuator taints them, reads their pods from the API server,
// hands them to their group only if they are still empty, and follows
// them until they are gone. Nodes that run other pods stay, left to
// scale-down. Nothing is asked twice: an instance handed over, or being
// deleted, is done. It returns, by group ID, the instances still to
// remove.
func (a active) removeScaleUp(ctx context.Context, l *loop, record *provisioning.ScaleUp, rb *rollback) (map[string][]string, error) {
	s := a.s
	var errs []error
	left := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(record.Groups)) {
		group := groupByID(l.groups.Groups, id)
		if group == nil {
			continue
		}
		missing := record.Groups[id] - len(record.Instances[id]) - rb.givenUp[id]
		if notCreated := min(missing, s.state.Group(id).NotCreated-l.givenUp[id]); notCreated > 0 {
			if err := a.giveUp(ctx, l, group, notCreated); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			} else {
				rb.givenUp[id] += notCreated
			}
		}
		ours := sets.New(record.Instances[id]...)
		deleting := s.actuator.Progress().Deleting
		var unregistered []nodegroups.Instance
		var empty []scaledown.Removal
		emptyKeys := map[string]string{}
		for _, instance := range group.Instances() {
			key := instanceKey(instance)
			if !ours.Has(key) || rb.done.Has(key) {
				continue
			}
			switch info := l.snapshot.NodeInfo(instance.NodeName); {
			case instance.State == nodegroups.InstanceDeleting || instance.NodeName != "" && deleting[instance.NodeName]:
				rb.done.Insert(key)
			case instance.NodeName == "":
				unregistered = append(unregistered, instance)
			case info != nil && runsOnlyDaemons(l.snapshot.PodsOn(instance.NodeName)):
				empty = append(empty, scaledown.Removal{Node: info.Node(), Group: group})
				emptyKeys[instance.NodeName] = key
			default:
				rb.done.Insert(key)
				rb.kept++
			}
		}
		removedInstances, removedNodes := 0, 0
		if len(unregistered) > 0 {
			if err := group.DeleteInstances(ctx, unregistered); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
			} else {
				for _, instance := range unregistered {
					rb.done.Insert(instanceKey(instance))
				}
				removedInstances = len(unregistered)
			}
		}
		if len(empty) > 0 {
			s.actuator.Start(ctx, &scaledown.Plan{Empty: empty}, l.snapshot)
			handedOver := s.actuator.Progress().Deleted
			for _, removal := range empty {
				if handedOver[removal.Node.Name] {
					rb.done.Insert(emptyKeys[removal.Node.Name])
					removedNodes++
				}
			}
		}
		if removedInstances+removedNodes > 0 {
			a.groupEvent(id, corev1.EventTypeWarning, EventScaleUpRolledBack,
				fmt.Sprintf("Removing the %d instance(s) without a node and %d node(s) an atomic scale-up added", removedInstances, removedNodes))
		}
		present := instanceKeys(group)
		for _, key := range record.Instances[id] {
			if present.Has(key) && !rb.done.Has(key) {
				left[id] = append(left[id], key)
			}
		}
	}
	return left, errors.Join(errs...)
}

// runsOnlyDaemons tells whether pods are all DaemonSet and mirror pods.
func runsOnlyDaemons(pods []*snapshot.Pod) bool {
	for _, pod := range pods {
		if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; !pod.IsDaemonSetPod() && !mirror {
			return false
		}
	}
	return true
}

// message says what a rollback left and why.
func (u unfinishedRollback) message() string {
	var parts []string
	for _, id := range slices.Sorted(maps.Keys(u.left)) {
		parts = append(parts, fmt.Sprintf("%s of %s", strings.Join(u.left[id], ", "), id))
	}
	return fmt.Sprintf("the rollback could not remove %s within %s (%s)", strings.Join(parts, "; "), rollbackTimeout, u.cause)
}

func countLeft(left map[string][]string) int {
	count := 0
	for _, keys := range left {
		count += len(keys)
	}
	return count
}
