// Package scaleup decides which node groups to grow, and by how much, so
// that pending pods can schedule. It simulates on a snapshot and returns a
// Plan; the caller executes it with NodeGroup.IncreaseSize.
package scaleup

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// ScaleUp plans scale-ups. Build it once per configuration with New.
type ScaleUp struct {
	opts          Options
	expanders     []expander
	ignoredLabels sets.Set[string]
}

// New validates the options and returns a ScaleUp.
func New(opts Options) (*ScaleUp, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Rand == nil {
		seed := uint64(opts.Clock.Now().UnixNano())
		opts.Rand = rand.New(rand.NewPCG(seed, seed>>1))
	}
	priorities, err := compilePriorities(opts.Priorities)
	if err != nil {
		return nil, err
	}
	s := &ScaleUp{opts: opts, ignoredLabels: sets.New(alwaysIgnoredLabels...).Insert(opts.BalancingIgnoredLabels...)}
	for _, name := range opts.Expanders {
		e, err := newExpander(name, opts, priorities)
		if err != nil {
			return nil, err
		}
		s.expanders = append(s.expanders, e)
	}
	return s, nil
}

// State is what the rest of the engine knows about the node groups in
// this loop.
type State struct {
	// Upcoming is the number of nodes per group ID that are requested but
	// not registered yet. Nil means TargetSize minus the registered nodes.
	Upcoming map[string]int
	// Skip, when set, returns why a group must not grow now, such as
	// "in backoff", or "" when it may.
	Skip func(nodegroups.NodeGroup) string
}

// Plan is a scale-up decision.
type Plan struct {
	// Increases are the node groups to grow, by ID.
	Increases []Increase
	// Helped are the pods the increases let schedule.
	Helped []*corev1.Pod
	// Absorbed are the candidates that fit on existing nodes or on nodes on
	// their way: they need no scale-up.
	Absorbed []*corev1.Pod
	// NoScaleUp are the candidates no node group can help, with why.
	NoScaleUp []NoScaleUp
}

// Increase grows one node group.
type Increase struct {
	Group nodegroups.NodeGroup
	Delta int
}

// NoScaleUp is a pod no node group can help.
type NoScaleUp struct {
	Pod *corev1.Pod
	// Reasons say, per node group ID, why the group cannot help. Shared
	// between pods of the same group: do not modify.
	Reasons map[string][]string
}

// Message is the upstream NotTriggerScaleUp event message, counting node
// groups per reason: "pod didn't trigger scale-up: 2 Insufficient cpu, 1 max node group size reached".
func (n NoScaleUp) Message() string {
	counts := map[string]int{}
	for _, reasons := range n.Reasons {
		for _, reason := range reasons {
			counts[reason]++
		}
	}
	return "pod didn't trigger scale-up: " + simulator.SummarizeReasons(counts)
}

// Plan decides a scale-up for the pending pods of snap. snap is left as it
// was, except that the templates of its node groups are built when missing.
func (s *ScaleUp) Plan(ctx context.Context, snap *snapshot.Snapshot, state State) *Plan {
	logger := klog.FromContext(ctx)
	plan := &Plan{}
	candidates := Candidates(snap.PendingPods(), s.opts.PriorityCutoff, s.opts.NewPodScaleUpDelay, s.opts.Clock.Now())
	if len(candidates) == 0 {
		return plan
	}
	templateErrors := simulator.SetTemplates(ctx, snap, s.opts.NodeRules)

	snap.Fork()
	defer snap.Revert()
	sched := simulator.NewScheduler(ctx, snap)
	upcoming := state.Upcoming
	if upcoming == nil {
		upcoming = UpcomingNodes(snap)
	}
	addUpcomingNodes(sched, snap, upcoming)

	// Pods that fit where they are or on nodes on their way wait for them.
	podGroups := simulator.GroupPods(candidates)
	absorbed := sched.ScheduleGroups(podGroups, simulator.ScheduleOptions{})
	for _, placement := range absorbed.Scheduled {
		plan.Absorbed = append(plan.Absorbed, placement.Pod)
	}
	podGroups = remaining(podGroups, absorbed.Unschedulable)
	if len(podGroups) == 0 {
		return plan
	}

	// Shared by the estimates of every node group, each in its own fork.
	sched.Prepare(podGroups...)
	totals := totalsOf(snap.NodeInfos())
	groupReasons := map[string]string{}
	var estimates []*estimate
	for _, group := range snap.NodeGroups() {
		est, reason := s.estimate(sched, group, podGroups, totals, state, templateErrors)
		if reason != "" {
			groupReasons[group.ID()] = reason
			continue
		}
		estimates = append(estimates, est)
	}
	slices.SortFunc(estimates, func(a, b *estimate) int { return strings.Compare(a.group.ID(), b.group.ID()) })

	options := slices.DeleteFunc(slices.Clone(estimates), func(est *estimate) bool { return est.nodes == 0 })
	if len(options) > 0 {
		chosen := s.choose(options)
		increases := []balancedIncrease{{estimate: chosen, delta: chosen.nodes}}
		if s.opts.BalanceSimilarNodeGroups {
			increases = balance(similarGroups(chosen, estimates, s.ignoredLabels), chosen.nodes)
		}
		for _, increase := range increases {
			plan.Increases = append(plan.Increases, Increase{Group: increase.estimate.group, Delta: increase.delta})
		}
		slices.SortFunc(plan.Increases, func(a, b Increase) int { return strings.Compare(a.Group.ID(), b.Group.ID()) })
		plan.Helped = chosen.pods
		logger.V(2).Info("Planned scale-up", "nodeGroup", chosen.group.ID(), "nodes", chosen.nodes, "pods", len(chosen.pods), "increases", len(plan.Increases))
	}
	plan.NoScaleUp = noScaleUp(podGroups, estimates, options, groupReasons)
	return plan
}

// estimate binpacks the pods on new nodes of one group, or says why the
// group cannot grow at all.
func (s *ScaleUp) estimate(sched *simulator.Scheduler, group nodegroups.NodeGroup, podGroups []*simulator.PodGroup,
	totals clusterTotals, state State, templateErrors map[string]error) (*estimate, string) {
	if state.Skip != nil {
		if reason := state.Skip(group); reason != "" {
			return nil, reason
		}
	}
	template := sched.Snapshot().Template(group.ID())
	if template == nil {
		if err := templateErrors[group.ID()]; err != nil {
			return nil, fmt.Sprintf("%s: %v", ReasonNoTemplate, err)
		}
		return nil, ReasonNoTemplate
	}
	maxNodes, capReason := group.MaxSize()-group.TargetSize(), ReasonMaxGroupSize
	if s.opts.MaxNodesPerScaleUp > 0 && s.opts.MaxNodesPerScaleUp < maxNodes {
		maxNodes, capReason = s.opts.MaxNodesPerScaleUp, ReasonMaxNodesPerScaleUp
	}
	if allowed, reason := s.opts.Limits.nodesAllowed(totals, template); allowed < maxNodes {
		maxNodes, capReason = allowed, reason
	}
	if maxNodes <= 0 {
		return nil, capReason
	}
	return binpack(sched, binpackOptions{
		group: group, template: template, podGroups: podGroups, maxNodes: maxNodes, capReason: capReason,
	}), ""
}

func (s *ScaleUp) choose(options []*estimate) *estimate {
	for _, e := range s.expanders {
		if len(options) == 1 {
			break
		}
		options = e.best(options)
	}
	return options[0]
}

// UpcomingNodes counts per group the nodes asked for but not registered:
// target size minus the group's nodes in the snapshot.
func UpcomingNodes(snap *snapshot.Snapshot) map[string]int {
	upcoming := map[string]int{}
	for _, group := range snap.NodeGroups() {
		if n := group.TargetSize() - len(snap.RegisteredNodes(group.ID())); n > 0 {
			upcoming[group.ID()] = n
		}
	}
	return upcoming
}

func addUpcomingNodes(sched *simulator.Scheduler, snap *snapshot.Snapshot, upcoming map[string]int) {
	for _, group := range snap.NodeGroups() {
		template := snap.Template(group.ID())
		if template == nil {
			continue
		}
		for i := range upcoming[group.ID()] {
			// Template names are unique, so these are too.
			_ = sched.AddNode(template.CopyAs(fmt.Sprintf("%s-upcoming-%d", template.Name(), i)))
		}
	}
}

// remaining returns the pod groups restricted to their unschedulable pods.
func remaining(podGroups []*simulator.PodGroup, unschedulable []simulator.Unschedulable) []*simulator.PodGroup {
	pending := make(sets.Set[*corev1.Pod], len(unschedulable))
	for _, u := range unschedulable {
		pending.Insert(u.Pod)
	}
	var result []*simulator.PodGroup
	for _, podGroup := range podGroups {
		pods := slices.DeleteFunc(slices.Clone(podGroup.Pods), func(pod *corev1.Pod) bool { return !pending.Has(pod) })
		if len(pods) == len(podGroup.Pods) {
			result = append(result, podGroup)
		} else if len(pods) > 0 {
			result = append(result, podGroup.Subset(pods))
		}
	}
	return result
}

// noScaleUp lists the pods that no option helps, with each group's reason.
func noScaleUp(podGroups []*simulator.PodGroup, estimates, options []*estimate, groupReasons map[string]string) []NoScaleUp {
	helped := sets.New[*corev1.Pod]()
	for _, option := range options {
		helped.Insert(option.pods...)
	}
	var result []NoScaleUp
	for _, podGroup := range podGroups {
		var reasons map[string][]string
		for _, pod := range podGroup.Pods {
			if helped.Has(pod) {
				continue
			}
			if reasons == nil {
				reasons = make(map[string][]string, len(groupReasons)+len(estimates))
				for id, reason := range groupReasons {
					reasons[id] = []string{reason}
				}
				for _, est := range estimates {
					if why := est.reasons[podGroup]; len(why) > 0 {
						reasons[est.group.ID()] = why
					}
				}
			}
			result = append(result, NoScaleUp{Pod: pod, Reasons: reasons})
		}
	}
	return result
}
