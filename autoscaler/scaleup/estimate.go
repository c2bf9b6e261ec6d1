package scaleup

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// estimate is what adding nodes to one node group would do for the
// pending pods.
type estimate struct {
	group    nodegroups.NodeGroup
	template *snapshot.NodeInfo
	// nodes is how many new nodes the helped pods need.
	nodes int
	pods  []*corev1.Pod
	// requested is the sum of the requests of pods.
	requested snapshot.Resources
	// podGroups are the pod groups with at least one pod helped.
	podGroups []*simulator.PodGroup
	// fits are the pod groups that a new, empty node of the group takes.
	fits map[*simulator.PodGroup]bool
	// reasons say why pods of a pod group are not helped.
	reasons map[*simulator.PodGroup][]string
}

// binpackOptions are the inputs of binpack besides the scheduler.
type binpackOptions struct {
	group    nodegroups.NodeGroup
	template *snapshot.NodeInfo
	// podGroups are the pods still pending once existing and upcoming nodes
	// have taken what they can.
	podGroups []*simulator.PodGroup
	// maxNodes is the most nodes the group may add; capReason says which
	// limit that is.
	maxNodes  int
	capReason string
}

// binpack adds new nodes of the group to a fork of the scheduler's snapshot
// and places the pods on them first fit, largest pods first, adding a node
// when no new node takes the next pod, up to maxNodes.
func binpack(sched *simulator.Scheduler, opts binpackOptions) *estimate {
	est := &estimate{
		group: opts.group, template: opts.template,
		fits: map[*simulator.PodGroup]bool{}, reasons: map[*simulator.PodGroup][]string{},
	}
	sched.Fork()
	defer sched.Revert()

	var nodes []string
	used := map[int]bool{}
	addNode := func() string {
		name := fmt.Sprintf("%s-new-%d", opts.template.Name(), len(nodes))
		// The name is unique within this fork: the template name is.
		_ = sched.AddNode(opts.template.CopyAs(name))
		nodes = append(nodes, name)
		return name
	}
	// The first new node is also the probe telling which pods a new node
	// of this group could take at all.
	probe := addNode()
	for _, podGroup := range opts.podGroups {
		if reasons := sched.CheckGroup(podGroup, probe); reasons != nil {
			est.reasons[podGroup] = reasons
			continue
		}
		est.fits[podGroup] = true
	}

	for _, podGroup := range bySize(opts.podGroups, opts.template) {
		if !est.fits[podGroup] {
			continue
		}
		helped := 0
		cursor := 0
		for _, pod := range podGroup.Pods {
			// New nodes only fill up, so a node that did not take a pod will
			// not take its sibling, unless placement elsewhere matters.
			if podGroup.DependsOnOtherPods() {
				cursor = 0
			}
			for cursor < len(nodes) && sched.PlaceOn(podGroup, pod, nodes[cursor]) != nil {
				cursor++
			}
			if cursor == len(nodes) {
				if len(nodes) >= opts.maxNodes {
					est.reasons[podGroup] = []string{opts.capReason}
					break
				}
				if reasons := sched.PlaceOn(podGroup, pod, addNode()); reasons != nil {
					// Another new node would not do better.
					est.reasons[podGroup] = reasons
					break
				}
			}
			used[cursor] = true
			est.pods = append(est.pods, pod)
			est.requested.Add(podGroup.Requests())
			helped++
		}
		if helped > 0 {
			est.podGroups = append(est.podGroups, podGroup)
		}
	}
	est.nodes = len(used)
	return est
}

// bySize orders pod groups by how much of a node one of their pods takes,
// largest first, which keeps first-fit binpacking close to optimal.
func bySize(podGroups []*simulator.PodGroup, template *snapshot.NodeInfo) []*simulator.PodGroup {
	allocatable := template.Allocatable()
	share := func(podGroup *simulator.PodGroup) float64 {
		requests := podGroup.Requests()
		return fraction(requests.MilliCPU, allocatable.MilliCPU) + fraction(requests.Memory, allocatable.Memory)
	}
	sorted := slices.Clone(podGroups)
	slices.SortStableFunc(sorted, func(a, b *simulator.PodGroup) int {
		return cmp.Compare(share(b), share(a))
	})
	return sorted
}

func fraction(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}
