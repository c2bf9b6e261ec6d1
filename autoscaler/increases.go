package autoscaler

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// increase is a raise of a group's target size that the engine wrote, for
// pending pods or for the atomic scale-up of a ProvisioningRequest, and
// the instances credited to it so far. The engine queues the increases of
// each group, oldest first, and credits each new instance of the group to
// the oldest increase that still lacks instances and that the instance
// may have come from (mayClaim): an instance is never credited to two, so
// a rollback takes back only the instances of its own increases, never
// those of a scale-up written after it (a pod's node) or of a
// replacement Cluster API made on its own.
type increase struct {
	// request is the UID of the ProvisioningRequest whose atomic scale-up
	// the increase is; "" for a scale-up of pending pods.
	request types.UID
	delta   int
	// at is when the engine wrote the increase.
	at time.Time
	// known are the group's instances when it was written, and the
	// instances credited to increases forgotten since: none is its.
	known sets.Set[string]
	// owners are the owners of the group's instances when it was written
	// (the MachineSets of a MachineDeployment that had Machines then), one
	// of which every instance of it has; empty when the group had no
	// instance to tell them, and then any owner is accepted.
	owners  sets.Set[string]
	claimed []string
}

// newIncrease is an increase of delta written at at to group, whose
// instances are as the loop read them: those created since the read and
// before the write are told apart by their creation time.
func newIncrease(group nodegroups.NodeGroup, delta int, request types.UID, at time.Time) *increase {
	inc := &increase{request: request, delta: delta, at: at, known: sets.New[string](), owners: sets.New[string]()}
	for _, instance := range group.Instances() {
		inc.known.Insert(instanceKey(instance))
		if instance.Owner != "" && instance.State != nodegroups.InstanceDeleting {
			inc.owners.Insert(instance.Owner)
		}
	}
	return inc
}

// mayClaim tells whether instance may have come from the increase: it was
// not known when the increase was written, the API server created it at
// or after the write (its timestamps have seconds; a clock of the engine
// ahead of the API server's makes the engine miss instances of its own,
// which it then leaves to scale-down, never take another's), and an owner
// the group had then created it.
func (inc *increase) mayClaim(instance nodegroups.Instance) bool {
	return !inc.known.Has(instanceKey(instance)) &&
		!instance.Created.IsZero() && !instance.Created.Before(inc.at.Truncate(time.Second)) &&
		(inc.owners.Len() == 0 || inc.owners.Has(instance.Owner))
}

func (inc *increase) complete() bool { return len(inc.claimed) >= inc.delta }

// queueIncrease remembers an increase the engine wrote.
func (t *atomicScaleUps) queueIncrease(group nodegroups.NodeGroup, delta int, request types.UID, at time.Time) {
	t.enqueue(group.ID(), newIncrease(group, delta, request, at))
}

// enqueue puts inc in the queue of group id, in the order of the writes.
func (t *atomicScaleUps) enqueue(id string, inc *increase) {
	if t.increases == nil {
		t.increases = map[string][]*increase{}
	}
	queue := t.increases[id]
	i := slices.IndexFunc(queue, func(queued *increase) bool { return queued.at.After(inc.at) })
	if i < 0 {
		i = len(queue)
	}
	t.increases[id] = slices.Insert(queue, i, inc)
}

// claimInstances credits the new instances of each group to its queued
// increases, the oldest increase first and the oldest instance first,
// after forgetting the increases that no atomic scale-up needs any more
// (forgetSettled).
func (t *atomicScaleUps) claimInstances(groups []nodegroups.NodeGroup, now time.Time, provisionTime func(nodegroups.NodeGroup) time.Duration) {
	t.queueRestoredScaleUps(groups)
	listed := make(map[string]bool, len(groups))
	for _, group := range groups {
		listed[group.ID()] = true
	}
	// The increases of a group no longer autoscaled credit nothing; those
	// of an atomic scale-up end with it.
	for id, queue := range t.increases {
		if !listed[id] && !slices.ContainsFunc(queue, func(inc *increase) bool { return inc.request != "" }) {
			delete(t.increases, id)
		}
	}
	for _, group := range groups {
		id := group.ID()
		queue := forgetSettled(t.increases[id], now, provisionTime(group))
		if len(queue) == 0 {
			delete(t.increases, id)
			continue
		}
		t.increases[id] = queue
		claimed := sets.New[string]()
		for _, inc := range queue {
			claimed.Insert(inc.claimed...)
		}
		candidates := slices.DeleteFunc(slices.Clone(group.Instances()), func(instance nodegroups.Instance) bool {
			return claimed.Has(instanceKey(instance))
		})
		slices.SortFunc(candidates, func(a, b nodegroups.Instance) int {
			return cmp.Or(a.Created.Compare(b.Created), cmp.Compare(instanceKey(a), instanceKey(b)))
		})
		for _, inc := range queue {
			for _, instance := range candidates {
				key := instanceKey(instance)
				if inc.complete() {
					break
				}
				if !claimed.Has(key) && inc.mayClaim(instance) {
					inc.claimed = append(inc.claimed, key)
					claimed.Insert(key)
				}
			}
		}
	}
}

// queueRestoredScaleUps queues the increases of the atomic scale-ups that
// an earlier engine left (Options.AtomicScaleUps), at their first loop:
// the instances the groups have then are known, with those the record
// credits to the scale-up kept as its own, and those that appear from
// then on, created since the scale-up started, may be its.
func (t *atomicScaleUps) queueRestoredScaleUps(groups []nodegroups.NodeGroup) {
	for uid, scaleUp := range t.scaleUps {
		if scaleUp.queued {
			continue
		}
		scaleUp.queued = true
		for id, delta := range scaleUp.record.Groups {
			group := groupByID(groups, id)
			if group == nil {
				continue
			}
			inc := newIncrease(group, delta, uid, scaleUp.record.Started)
			inc.claimed = slices.Clone(scaleUp.record.Instances[id])
			inc.known.Delete(inc.claimed...)
			t.enqueue(id, inc)
		}
	}
}

// forgetSettled drops from the queue of a group the increases for pending
// pods that no later atomic scale-up needs to be told apart from: those
// that got all their instances, or that are older than the group's
// provision time. An increase forgotten leaves its instances known to the
// later ones, so that none of them takes them. The increases of atomic
// scale-ups are forgotten when the scale-ups end (atomicScaleUps.forget).
func forgetSettled(queue []*increase, now time.Time, provisionTime time.Duration) []*increase {
	atomicLater := false
	for i := len(queue) - 1; i >= 0; i-- {
		inc := queue[i]
		if inc.request != "" {
			atomicLater = true
			continue
		}
		if !atomicLater && (inc.complete() || now.Sub(inc.at) >= provisionTime) {
			queue = forget(queue, i)
		}
	}
	return queue
}

// forget drops the i-th increase of queue; the later ones know its
// instances.
func forget(queue []*increase, i int) []*increase {
	for _, later := range queue[i+1:] {
		later.known.Insert(queue[i].claimed...)
	}
	return slices.Delete(queue, i, i+1)
}

// claimsOf are, by group ID, the instances credited to the increases of
// the atomic scale-up of request uid.
func (t *atomicScaleUps) claimsOf(uid types.UID) map[string][]string {
	claims := map[string][]string{}
	for id, queue := range t.increases {
		for _, inc := range queue {
			if inc.request == uid && len(inc.claimed) > 0 {
				claims[id] = slices.Clone(inc.claimed)
			}
		}
	}
	return claims
}
