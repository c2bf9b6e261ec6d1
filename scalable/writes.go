package scalable

import (
	"fmt"
	"time"
)

// Writes remembers the replicas the autoscaler wrote to each resource and
// the generations those writes gave it. Without them, the generation a
// write of replicas raises would look like a template change not yet
// observed, and a change of replicas by another writer (a GitOps tool, a
// ClusterClass topology, someone with kubectl) would go unnoticed. It
// lives as long as the engine of one cluster, whose loop alone uses it.
type Writes struct {
	byID map[string]*write
}

// NewWrites returns an empty Writes.
func NewWrites() *Writes { return &Writes{byID: map[string]*write{}} }

type write struct {
	replicas int
	// generation is the one the last write gave the resource.
	generation int64
	at         time.Time
	// generations are those the autoscaler's writes gave the resource.
	generations map[int64]bool
	// overwrittenBy says how another writer changed the replicas since.
	overwrittenBy string
}

// record remembers a write of replicas that gave the resource generation.
func (w *Writes) record(id string, replicas int, generation int64, at time.Time) {
	if w == nil {
		return
	}
	entry := w.byID[id]
	if entry == nil {
		entry = &write{generations: map[int64]bool{}}
		w.byID[id] = entry
	}
	entry.replicas, entry.generation, entry.at, entry.overwrittenBy = replicas, generation, at, ""
	entry.generations[generation] = true
}

// own tells whether every generation after observed, up to current, came
// from the autoscaler's own writes of replicas.
func (w *Writes) own(id string, observed, current int64) bool {
	if w == nil || w.byID[id] == nil {
		return false
	}
	// The controller has seen those up to observed: they are never asked of again.
	for g := range w.byID[id].generations {
		if g <= observed {
			delete(w.byID[id].generations, g)
		}
	}
	for g := observed + 1; g <= current; g++ {
		if !w.byID[id].generations[g] {
			return false
		}
	}
	return true
}

// overwritten says how the replicas of a resource read at generation
// changed since the autoscaler's last write, or "". A read older than
// that write (a cache that lags) tells nothing.
func (w *Writes) overwritten(id string, generation int64, replicas int) string {
	if w == nil || w.byID[id] == nil {
		return ""
	}
	entry := w.byID[id]
	if entry.overwrittenBy == "" && generation >= entry.generation && replicas != entry.replicas {
		entry.overwrittenBy = fmt.Sprintf("%s: replicas changed from %d, which the autoscaler set at %s, to %d by another writer "+
			"(a GitOps tool, a ClusterClass topology or kubectl?); the autoscaler goes on from %d, but two writers of replicas undo each other",
			id, entry.replicas, entry.at.UTC().Format(time.RFC3339), replicas, replicas)
	}
	return entry.overwrittenBy
}
