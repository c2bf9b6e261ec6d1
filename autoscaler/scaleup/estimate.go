package scaleup

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// estimate is what adding nodes to one node group, and to the groups
// similar to it, would do for the pending pods. It is one option for the
// expanders, named after its group.
type estimate struct {
	group    nodegroups.NodeGroup
	template *snapshot.NodeInfo
	// nodes is how many new nodes the helped pods need, in all.
	nodes int
	// increases are the new nodes per group, by group ID; each has a pod.
	increases []Increase
	pods      []*corev1.Pod
	// nominations are where the pods go, in the order they were placed.
	nominations []Nomination
	// requested is the sum of the requests of pods.
	requested snapshot.Resources
	// reasons say why pods of a pod group are not helped.
	reasons map[*simulator.PodGroup][]string
	// opts are what binpacking had, to place the pods again when the
	// estimate is chosen.
	opts binpackOptions
}

// candidate is a node group that may grow in this loop.
type candidate struct {
	group    nodegroups.NodeGroup
	template *snapshot.NodeInfo
	// upcoming is how many nodes of the group are on their way; planned
	// how many earlier rounds of this plan add.
	upcoming, planned int
	// similar are the other candidates similar to this one, by group ID.
	similar []*candidate
	// probe is how each pending pod group fares on a new, empty node of
	// the group.
	probe map[*simulator.PodGroup]probeResult
}

// size is the group's size once the nodes planned so far are added.
func (c *candidate) size() int { return c.group.TargetSize() + c.planned }

// room is how many nodes the group may still add by its own max size.
func (c *candidate) room() int { return c.group.MaxSize() - c.size() }

type probeResult struct {
	reasons []string
	// lasting failures stay whatever else is placed.
	lasting bool
}

// takes tells whether new nodes of the group can take pods of podGroup,
// now or once other pods are placed.
func (c *candidate) takes(podGroup *simulator.PodGroup) bool {
	result := c.probe[podGroup]
	return result.reasons == nil || !result.lasting
}

// probeCandidate checks every pod group on a new node of the group, in a
// fork of its own.
func probeCandidate(sched *simulator.Scheduler, c *candidate, podGroups []*simulator.PodGroup) {
	sched.Fork()
	defer sched.Revert()
	probe := c.template.CopyAs(c.template.Name() + "-probe")
	// The name is unique within this fork: the template name is.
	_ = sched.AddNode(probe)
	c.probe = make(map[*simulator.PodGroup]probeResult, len(podGroups))
	for _, podGroup := range podGroups {
		reasons, lasting := sched.CheckGroupLasting(podGroup, probe.Name())
		c.probe[podGroup] = probeResult{reasons: reasons, lasting: lasting}
	}
}

// binpackOptions are the inputs of binpack besides the scheduler.
type binpackOptions struct {
	// members are the groups that may get new nodes, the group the option
	// is named after first.
	members []*candidate
	// balance gives each new node to the smallest member that takes the
	// pod; otherwise the first member gets every node it takes, and the
	// others only the pods it cannot take.
	balance bool
	// podGroups are the pods still pending once existing and upcoming nodes
	// have taken what they can, in placement order.
	podGroups []*simulator.PodGroup
	// maxNodes is the most nodes the members may add together, by the
	// cluster-wide limits; capReason says which limit that is.
	maxNodes  int
	capReason string
	// classes are the fit classes of podGroups (simulator.FitClasses).
	classes map[*simulator.PodGroup]int
}

// binpacker places pods on new nodes of the members, in a fork of the
// scheduler's snapshot.
type binpacker struct {
	sched *simulator.Scheduler
	opts  binpackOptions
	// nodes are the new nodes, in the order they were added; each has a pod.
	nodes []newNode
	// added counts the new nodes per member.
	added []int
	// nominations are where pods went, in order.
	nominations []Nomination
	// scans remember, per fit class, the new nodes where its pods failed
	// for a reason that lasts, other than cpu and memory: its pods skip them.
	scans map[int]*classScan
	// roomFrom is, per cpu and memory request, the first new node that may
	// have room for it: those before are too full, and stay so.
	roomFrom map[podShape]int
}

// classScan is what a fit class's pods failed on for good: unfit marks
// the new nodes, first is the first node not marked.
type classScan struct {
	unfit []bool
	first int
}

func (c *classScan) isUnfit(node int) bool { return node < len(c.unfit) && c.unfit[node] }

func (c *classScan) markUnfit(node int) {
	if node >= len(c.unfit) {
		c.unfit = append(c.unfit, make([]bool, node+1-len(c.unfit))...)
	}
	c.unfit[node] = true
	for c.isUnfit(c.first) {
		c.first++
	}
}

// podShape is the cpu and memory a pod requests.
type podShape struct{ milliCPU, memory int64 }

type newNode struct {
	name, group string
	// free is the cpu, memory and pod room the node has left: what the
	// binpacker placed there is all that changes it. A pod that requests
	// more fits nowhere here, without asking the scheduler.
	free snapshot.Resources
}

// mayTake tells whether the node has room for the cpu, memory and pod
// count of a pod requesting request, as kube-scheduler's NodeResourcesFit
// counts them; the scheduler decides the rest.
func (n *newNode) mayTake(request snapshot.Resources) bool {
	return n.free.Pods >= 1 && (request.MilliCPU <= 0 || request.MilliCPU <= n.free.MilliCPU) &&
		(request.Memory <= 0 || request.Memory <= n.free.Memory)
}

// took accounts for a pod placed on the node.
func (n *newNode) took(request snapshot.Resources) {
	n.free.Pods--
	n.free.MilliCPU -= request.MilliCPU
	n.free.Memory -= request.Memory
}

func (b *binpacker) nominate(pod *corev1.Pod, node int) {
	b.nominations = append(b.nominations, Nomination{Pod: pod.UID, Node: b.nodes[node].name, Group: b.nodes[node].group})
}

// pendingPods are the pods of a pod group not placed yet.
type pendingPods struct {
	group *simulator.PodGroup
	pods  []*corev1.Pod
}

// binpack estimates, in a fork of the scheduler, what new nodes of the
// members would do for the pods.
func binpack(sched *simulator.Scheduler, opts binpackOptions) *estimate {
	sched.Fork()
	defer sched.Revert()
	return binpackOn(sched, opts)
}

// binpackOn places the pods on new nodes of the members first fit, in
// placement order, adding a node when no new node takes the next pod, up
// to the limits. Pods whose fit depends on other pods (topology spread,
// pod affinity) are tried again once others were placed, until a pass
// places nothing, so that a zone spread fills every zone in one estimate.
func binpackOn(sched *simulator.Scheduler, opts binpackOptions) *estimate {
	lead := opts.members[0]
	est := &estimate{group: lead.group, template: lead.template, reasons: map[*simulator.PodGroup][]string{}, opts: opts}
	b := &binpacker{sched: sched, opts: opts, added: make([]int, len(opts.members)),
		scans: map[int]*classScan{}, roomFrom: map[podShape]int{}}

	var pending []pendingPods
	for _, podGroup := range opts.podGroups {
		if !slices.ContainsFunc(opts.members, func(member *candidate) bool { return member.takes(podGroup) }) {
			est.reasons[podGroup] = lead.probe[podGroup].reasons
			continue
		}
		pending = append(pending, pendingPods{group: podGroup, pods: podGroup.Pods})
	}
	for len(pending) > 0 {
		var retry []pendingPods
		progress := false
		for _, p := range pending {
			placed, reasons := b.placeAll(p)
			est.pods = append(est.pods, p.pods[:placed]...)
			for range placed {
				est.requested.Add(p.group.Requests())
			}
			progress = progress || placed > 0
			if placed == len(p.pods) {
				// Helped in full, maybe on a retry.
				delete(est.reasons, p.group)
				continue
			}
			est.reasons[p.group] = reasons
			if p.group.DependsOnOtherPods() {
				retry = append(retry, pendingPods{group: p.group, pods: p.pods[placed:]})
			}
		}
		if !progress {
			break
		}
		pending = retry
	}
	est.nodes, est.nominations = len(b.nodes), b.nominations
	for i, member := range opts.members {
		if b.added[i] > 0 {
			est.increases = append(est.increases, Increase{Group: member.group, Delta: b.added[i]})
		}
	}
	slices.SortFunc(est.increases, func(a, b Increase) int { return strings.Compare(a.Group.ID(), b.Group.ID()) })
	return est
}

// placeAll places the pods in order until one fits nowhere: its siblings
// would not fit either. It returns how many it placed and why the next
// did not fit.
func (b *binpacker) placeAll(p pendingPods) (int, []string) {
	request := p.group.Requests()
	class := b.opts.classes[p.group]
	for i, pod := range p.pods {
		if node := b.placeOnNodeAdded(p.group, class, request, pod); node >= 0 {
			b.nodes[node].took(request)
			b.nominate(pod, node)
			continue
		}
		if reasons := b.placeOnNewNode(p.group, pod); reasons != nil {
			return i, reasons
		}
	}
	return len(p.pods), nil
}

// placeOnNodeAdded places the pod on the first new node that takes it and
// returns its index, or -1. New nodes only fill up, so a node without
// room for the pod's cpu or memory is skipped, and so is one where its
// class failed for a reason that lasts.
func (b *binpacker) placeOnNodeAdded(podGroup *simulator.PodGroup, class int, request snapshot.Resources, pod *corev1.Pod) int {
	scan := b.scans[class]
	if scan == nil {
		scan = &classScan{}
		b.scans[class] = scan
	}
	shape := podShape{milliCPU: request.MilliCPU, memory: request.Memory}
	for i := max(scan.first, b.roomFrom[shape]); i < len(b.nodes); i++ {
		if !b.nodes[i].mayTake(request) {
			if i == b.roomFrom[shape] {
				b.roomFrom[shape]++
			}
			continue
		}
		if scan.isUnfit(i) {
			continue
		}
		reasons, lasting := b.sched.PlaceOnLasting(podGroup, pod, b.nodes[i].name)
		if reasons == nil {
			return i
		}
		if lasting {
			scan.markUnfit(i)
		}
	}
	return -1
}

// placeOnNewNode adds a node of the first member, in adding order, whose
// new node takes the pod. A new node that does not take it is removed
// again: no node is planned without a pod.
func (b *binpacker) placeOnNewNode(podGroup *simulator.PodGroup, pod *corev1.Pod) []string {
	if len(b.nodes) >= b.opts.maxNodes {
		return []string{b.opts.capReason}
	}
	var reasons []string
	for _, i := range b.addingOrder() {
		member := b.opts.members[i]
		if !member.takes(podGroup) {
			continue
		}
		if b.added[i] >= member.room() {
			if reasons == nil {
				reasons = []string{ReasonMaxGroupSize}
			}
			continue
		}
		// Named as it will be while on its way; unique, as template names are.
		name := upcomingNodeName(member.template, member.upcoming+member.planned+b.added[i])
		_ = b.sched.AddNode(member.template.CopyAs(name))
		unfit := b.sched.PlaceOn(podGroup, pod, name)
		if unfit == nil {
			b.added[i]++
			nodeInfo := b.sched.Snapshot().NodeInfo(name)
			free := nodeInfo.Allocatable().Clone()
			free.Sub(nodeInfo.Requested())
			b.nodes = append(b.nodes, newNode{name: name, group: member.group.ID(), free: free})
			b.nominate(pod, len(b.nodes)-1)
			return nil
		}
		_ = b.sched.RemoveNode(name)
		reasons = unfit
	}
	return reasons
}

// addingOrder is the order in which members are asked for a new node.
func (b *binpacker) addingOrder() []int {
	order := make([]int, len(b.opts.members))
	for i := range order {
		order[i] = i
	}
	target := func(i int) int { return b.opts.members[i].size() }
	slices.SortStableFunc(order, func(x, y int) int {
		if !b.opts.balance && (x == 0 || y == 0) {
			// The lead first.
			return cmp.Compare(x, y)
		}
		// The smallest group, ties to the one that was smallest before.
		return cmp.Or(cmp.Compare(target(x)+b.added[x], target(y)+b.added[y]), cmp.Compare(target(x), target(y)),
			strings.Compare(b.opts.members[x].group.ID(), b.opts.members[y].group.ID()))
	})
	return order
}

// placementOrder is the order in which both the absorption into nodes that
// exist or are on their way and binpacking on new nodes place pod groups,
// so that pods planned for in one loop find their place in the next: real
// pods before the virtual pods of capacity buffers, which hold room only
// where real pods leave it; then pods with required anti-affinity, since
// each needs a domain of its own and smaller pods can fill the room they
// leave; then the largest first, which keeps first-fit close to optimal.
func placementOrder(podGroups []*simulator.PodGroup) []*simulator.PodGroup {
	sorted := slices.Clone(podGroups)
	slices.SortStableFunc(sorted, func(a, b *simulator.PodGroup) int {
		return cmp.Or(realPodsFirst(a, b), antiAffinityFirst(a, b), largestRequestsFirst(a, b))
	})
	return sorted
}

// largestFirst orders pod groups as placementOrder does, but for
// required anti-affinity: the largest first, real pods before the virtual
// pods of capacity buffers.
func largestFirst(podGroups []*simulator.PodGroup) []*simulator.PodGroup {
	sorted := slices.Clone(podGroups)
	slices.SortStableFunc(sorted, func(a, b *simulator.PodGroup) int {
		return cmp.Or(realPodsFirst(a, b), largestRequestsFirst(a, b))
	})
	return sorted
}

// realPodsFirst orders real pods before the virtual pods of capacity
// buffers: real pods win every tie with the room buffers hold.
func realPodsFirst(a, b *simulator.PodGroup) int {
	return trueFirst(!buffers.IsBufferPod(a.Pods[0]), !buffers.IsBufferPod(b.Pods[0]))
}

// antiAffinityFirst orders pods with required anti-affinity first.
func antiAffinityFirst(a, b *simulator.PodGroup) int {
	return trueFirst(a.HasRequiredAntiAffinity(), b.HasRequiredAntiAffinity())
}

// trueFirst compares two conditions, the one that holds first.
func trueFirst(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	default:
		return 1
	}
}

// largestRequestsFirst orders by cpu requested, then memory, largest
// first.
func largestRequestsFirst(a, b *simulator.PodGroup) int {
	ra, rb := a.Requests(), b.Requests()
	return cmp.Or(cmp.Compare(rb.MilliCPU, ra.MilliCPU), cmp.Compare(rb.Memory, ra.Memory))
}

func fraction(part, whole int64) float64 {
	if whole <= 0 {
		return 0
	}
	return float64(part) / float64(whole)
}
