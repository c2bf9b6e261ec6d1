// Package clusterstate keeps what the engine must remember between loops
// about its node groups: how many of their nodes are registered and ready,
// the scale-ups still waiting for nodes, and the groups backing off after a
// failure. It decides nothing on its own; the loop reads it and acts.
package clusterstate

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
)

// Options configure a Registry.
type Options struct {
	// Groups.For(group).MaxNodeProvisionTime is how long a node requested
	// for group may take to register.
	Groups nodegroups.Settings
	// NodeRules tell whether a node is Ready, NotStarted or Unready.
	NodeRules nodefacts.Rules
	Backoff   BackoffOptions
	// OkTotalUnreadyCount and MaxTotalUnreadyPercentage: the cluster (or a
	// group) is unhealthy when more nodes than both are unready.
	OkTotalUnreadyCount       int
	MaxTotalUnreadyPercentage float64
}

// Readiness counts the nodes of a group or of the whole cluster.
type Readiness struct {
	// Registered nodes joined the cluster (Ready, Unready or NotStarted).
	Registered int
	Ready      int
	// Unready nodes have not been Ready for longer than the startup time.
	Unready int
	// NotStarted nodes registered recently and are not Ready yet, or still
	// carry a startup taint: they are on their way.
	NotStarted int
	// Deleting instances are being removed.
	Deleting int
}

// GroupState is what one loop knows about a node group.
type GroupState struct {
	Group nodegroups.NodeGroup
	// Target is the target size when the loop started.
	Target int
	Readiness
	// Upcoming are the nodes still expected: target size minus the started
	// nodes that stay and the instances given up on.
	Upcoming int
	// NotCreated are requested instances that do not exist yet.
	NotCreated int
	// LongUnregistered are removable instances that have had no registered
	// node for the provision time, counted from the first Update that saw
	// them without one.
	LongUnregistered []nodegroups.Instance
	// Failed are instances whose provisioning failed.
	Failed []nodegroups.Instance
	// NewlyFailed are the Failed instances not seen failed in an earlier
	// Update: a failed instance stays in the group until its deletion
	// starts, and must count as one failure, not one per loop.
	NewlyFailed []nodegroups.Instance
}

// Converged is true when every requested node of the group is there.
func (g *GroupState) Converged() bool {
	return g.Upcoming == 0 && g.NotCreated == 0
}

// TimedOutScaleUp is a scale-up whose nodes did not all register in time.
type TimedOutScaleUp struct {
	Group nodegroups.NodeGroup
	// Missing is the number of requested nodes that never registered.
	Missing   int
	Requested time.Time
}

// Registry remembers node group state between loops. It is used by the
// loop only and is not safe for concurrent use.
type Registry struct {
	opts     Options
	groups   map[string]*GroupState
	order    []string
	total    Readiness
	requests map[string]*scaleUpRequest
	backoffs map[string]*backoff
	// failed are the IDs of the failed instances of each group in the
	// last Update.
	failed map[string]map[string]bool
	// unregisteredSince is when an Update first saw each instance without
	// a registered node, by group and instance ID; an instance leaves it
	// when it registers, fails, is being deleted or disappears. It is kept
	// in memory only: a restarted engine starts every clock again, which
	// errs on the side of keeping machines.
	unregisteredSince map[string]map[string]time.Time
}

type scaleUpRequest struct {
	delta int
	time  time.Time
}

// NewRegistry returns an empty Registry.
func NewRegistry(opts Options) *Registry {
	return &Registry{
		opts:              opts,
		groups:            map[string]*GroupState{},
		requests:          map[string]*scaleUpRequest{},
		backoffs:          map[string]*backoff{},
		failed:            map[string]map[string]bool{},
		unregisteredSince: map[string]map[string]time.Time{},
	}
}

// SetOptions replaces the options; the remembered state is kept.
func (r *Registry) SetOptions(opts Options) { r.opts = opts }

// Update recomputes the state of every group from this loop's view, and
// returns the scale-ups that timed out. Those groups are put in backoff;
// the caller corrects their target size. Groups that disappeared are
// forgotten.
func (r *Registry) Update(groups []nodegroups.NodeGroup, nodes []*corev1.Node, now time.Time) []TimedOutScaleUp {
	nodesByName := make(map[string]*corev1.Node, len(nodes))
	r.total = Readiness{}
	for _, node := range nodes {
		nodesByName[node.Name] = node
		r.total.count(r.opts.NodeRules.Readiness(node, now))
	}

	current := make(map[string]*GroupState, len(groups))
	unregisteredSince := make(map[string]map[string]time.Time, len(groups))
	r.order = r.order[:0]
	for _, group := range groups {
		state, since := r.groupState(group, nodesByName, now)
		current[group.ID()] = state
		if len(since) > 0 {
			unregisteredSince[group.ID()] = since
		}
		r.order = append(r.order, group.ID())
	}
	r.groups = current
	r.unregisteredSince = unregisteredSince
	for id := range r.requests {
		if _, ok := current[id]; !ok {
			delete(r.requests, id)
		}
	}
	r.trackFailures(current)

	var timedOut []TimedOutScaleUp
	for _, id := range r.order {
		state := current[id]
		request, ok := r.requests[id]
		if !ok {
			continue
		}
		if state.Upcoming == 0 {
			delete(r.requests, id)
			continue
		}
		if now.Sub(request.time) < r.provisionTime(state.Group) {
			continue
		}
		delete(r.requests, id)
		timedOut = append(timedOut, TimedOutScaleUp{Group: state.Group, Missing: state.Upcoming, Requested: request.time})
		r.Backoff(id, "ScaleUpTimedOut", fmt.Sprintf("%d node(s) requested at %s did not register within %s",
			state.Upcoming, request.time.UTC().Format(time.RFC3339), r.provisionTime(state.Group)), now)
	}
	return timedOut
}

// groupState also returns when each of the group's instances without a
// registered node was first seen so.
func (r *Registry) groupState(group nodegroups.NodeGroup, nodes map[string]*corev1.Node, now time.Time) (*GroupState, map[string]time.Time) {
	state := &GroupState{Group: group, Target: group.TargetSize()}
	since := map[string]time.Time{}
	staying := 0
	for _, instance := range group.Instances() {
		if instance.State == nodegroups.InstanceDeleting {
			state.Deleting++
			continue
		}
		staying++
		if instance.Error != nil {
			state.Failed = append(state.Failed, instance)
			continue
		}
		node, registered := nodes[instance.NodeName]
		if !registered {
			// The time counts from first sight, not from the instance's
			// creation: an old Machine whose Node was deleted gets the whole
			// provision time to register again, as upstream. An instance
			// whose ID changes (a Machine that gets its provider ID) starts
			// again.
			first, seen := r.unregisteredSince[group.ID()][instance.ID]
			if !seen {
				first = now
			}
			since[instance.ID] = first
			if instance.Removable && now.Sub(first) >= r.provisionTime(group) {
				state.LongUnregistered = append(state.LongUnregistered, instance)
			}
			continue
		}
		state.count(r.opts.NodeRules.Readiness(node, now))
	}
	// Nodes that registered but have not started yet cannot take pods, so
	// they are still awaited, as nodes that have not registered; instances
	// that failed or never registered are removed, not awaited.
	started := state.Ready + state.Unready
	state.Upcoming = max(0, state.Target-started-len(state.Failed)-len(state.LongUnregistered))
	state.NotCreated = max(0, state.Target-staying)
	return state, since
}

// trackFailures sets the groups' NewlyFailed and remembers their failed
// instances for the next Update.
func (r *Registry) trackFailures(groups map[string]*GroupState) {
	seen := make(map[string]map[string]bool, len(groups))
	for id, state := range groups {
		if len(state.Failed) == 0 {
			continue
		}
		seen[id] = make(map[string]bool, len(state.Failed))
		for _, instance := range state.Failed {
			seen[id][instance.ID] = true
			if !r.failed[id][instance.ID] {
				state.NewlyFailed = append(state.NewlyFailed, instance)
			}
		}
	}
	r.failed = seen
}

func (r *Registry) provisionTime(group nodegroups.NodeGroup) time.Duration {
	return r.opts.Groups.For(group).MaxNodeProvisionTime
}

func (c *Readiness) count(readiness nodefacts.Readiness) {
	c.Registered++
	switch readiness {
	case nodefacts.Ready:
		c.Ready++
	case nodefacts.NotStarted:
		c.NotStarted++
	default:
		c.Unready++
	}
}

// RegisterScaleUp records that a group was asked for delta more nodes.
// Requests for the same group merge and keep the newer time.
func (r *Registry) RegisterScaleUp(groupID string, delta int, now time.Time) {
	if request, ok := r.requests[groupID]; ok {
		request.delta += delta
		request.time = now
		return
	}
	r.requests[groupID] = &scaleUpRequest{delta: delta, time: now}
}

// Group returns the state of a group in the last Update, or nil.
func (r *Registry) Group(id string) *GroupState { return r.groups[id] }

// Groups returns the states of the last Update, in discovery order.
func (r *Registry) Groups() []*GroupState {
	states := make([]*GroupState, 0, len(r.order))
	for _, id := range r.order {
		states = append(states, r.groups[id])
	}
	return states
}

// Total counts every node of the cluster in the last Update.
func (r *Registry) Total() Readiness { return r.total }

// ClusterHealthy tells whether the cluster may be autoscaled, and if not why.
func (r *Registry) ClusterHealthy() (bool, string) {
	return r.healthy(r.total)
}

// GroupHealthy tells whether a group may be autoscaled, and if not why.
func (r *Registry) GroupHealthy(id string) (bool, string) {
	state, ok := r.groups[id]
	if !ok {
		return true, ""
	}
	return r.healthy(state.Readiness)
}

func (r *Registry) healthy(c Readiness) (bool, string) {
	message := fmt.Sprintf("%d of %d registered node(s) unready", c.Unready, c.Registered)
	if c.Registered == 0 {
		return true, message
	}
	percentage := 100 * float64(c.Unready) / float64(c.Registered)
	if c.Unready > r.opts.OkTotalUnreadyCount && percentage > r.opts.MaxTotalUnreadyPercentage {
		return false, fmt.Sprintf("%s (%.0f%%), more than %d and more than %.0f%%",
			message, percentage, r.opts.OkTotalUnreadyCount, r.opts.MaxTotalUnreadyPercentage)
	}
	return true, message
}
