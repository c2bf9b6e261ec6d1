// The request tracker's memory: the atomic scale-ups of
// ProvisioningRequests in progress, the increases new instances are
// credited to (increases.go), and the rollbacks that gave up.

package autoscaler

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
)

// atomicScaleUp is what the engine remembers of an atomic scale-up in
// progress: the record, also published in the management cluster
// (Status.AtomicScaleUps) and, for its users, in the request's status,
// with the instances credited to its increases (claimInstances), and its
// rollback once it failed.
type atomicScaleUp struct {
	record *provisioning.ScaleUp
	// queued is set once its increases are queued: at its start, or at the
	// first loop that follows a record an earlier engine left
	// (Options.AtomicScaleUps).
	queued   bool
	rollback *rollback
}

// atomicScaleUps are what the engine tracks of the atomic scale-ups of
// ProvisioningRequests, across loops and configurations: those in
// progress, the increases new instances are credited to, and the
// rollbacks that gave up.
type atomicScaleUps struct {
	// scaleUps are the atomic scale-ups in progress, by request UID.
	scaleUps map[types.UID]*atomicScaleUp
	// increases are, by group ID, the increases of the target size the
	// engine wrote that the instances appearing are credited to, oldest
	// first (claimInstances).
	increases map[string][]*increase
	// unfinishedRollbacks are the rollbacks that gave up, by request UID,
	// while what they left is still there.
	unfinishedRollbacks map[types.UID]unfinishedRollback
}

// restore takes over the atomic scale-ups an earlier engine left
// (Options.AtomicScaleUps). What the groups had before is not known: their
// increases are queued at the first loop (queueRestoredScaleUps).
func (t *atomicScaleUps) restore(records map[types.UID]provisioning.ScaleUp) {
	for uid, record := range records {
		t.remember(uid, &atomicScaleUp{record: &record})
	}
}

// remember keeps an atomic scale-up in progress across loops.
func (t *atomicScaleUps) remember(uid types.UID, scaleUp *atomicScaleUp) {
	if t.scaleUps == nil {
		t.scaleUps = map[types.UID]*atomicScaleUp{}
	}
	t.scaleUps[uid] = scaleUp
}

// inProgress is the atomic scale-up of request uid in progress, or nil.
func (t *atomicScaleUps) inProgress(uid types.UID) *atomicScaleUp {
	return t.scaleUps[uid]
}

// forget forgets an atomic scale-up that ended, and its increases.
func (t *atomicScaleUps) forget(uid types.UID) {
	delete(t.scaleUps, uid)
	for id, queue := range t.increases {
		for i := len(queue) - 1; i >= 0; i-- {
			if queue[i].request == uid {
				queue = forget(queue, i)
			}
		}
		t.increases[id] = queue
	}
}

// forgetAllBut forgets the atomic scale-ups of the requests not listed:
// a request deleted during its scale-up leaves its nodes to scale-down.
func (t *atomicScaleUps) forgetAllBut(listed sets.Set[types.UID]) {
	for uid := range t.scaleUps {
		if !listed.Has(uid) {
			t.forget(uid)
		}
	}
}

// records are the atomic scale-ups in progress, for the status: what a
// later engine follows and may roll back.
func (t *atomicScaleUps) records() map[types.UID]provisioning.ScaleUp {
	if len(t.scaleUps) == 0 {
		return nil
	}
	records := make(map[types.UID]provisioning.ScaleUp, len(t.scaleUps))
	for uid, scaleUp := range t.scaleUps {
		records[uid] = *scaleUp.record
	}
	return records
}

// giveUp forgets the atomic scale-up of request uid, whose rollback gave
// up, and keeps what the rollback left until it is gone.
func (t *atomicScaleUps) giveUp(uid types.UID, unfinished unfinishedRollback) {
	t.forget(uid)
	if t.unfinishedRollbacks == nil {
		t.unfinishedRollbacks = map[types.UID]unfinishedRollback{}
	}
	t.unfinishedRollbacks[uid] = unfinished
}

// unfinishedRollbackMessages say what the rollbacks that gave up left,
// and forget those whose instances are all gone or being deleted.
func (t *atomicScaleUps) unfinishedRollbackMessages(groups []nodegroups.NodeGroup) []string {
	var messages []string
	for uid, unfinished := range t.unfinishedRollbacks {
		for id, keys := range unfinished.left {
			remaining := map[string]bool{}
			if group := groupByID(groups, id); group != nil {
				for _, instance := range group.Instances() {
					remaining[instanceKey(instance)] = instance.State != nodegroups.InstanceDeleting
				}
			}
			if keys = slices.DeleteFunc(keys, func(key string) bool { return !remaining[key] }); len(keys) > 0 {
				unfinished.left[id] = keys
			} else {
				delete(unfinished.left, id)
			}
		}
		if len(unfinished.left) == 0 {
			delete(t.unfinishedRollbacks, uid)
			continue
		}
		messages = append(messages, fmt.Sprintf("ProvisioningRequest %s: %s", unfinished.request, unfinished.message()))
	}
	slices.Sort(messages)
	return messages
}
