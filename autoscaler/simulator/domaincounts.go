package simulator

import (
	"maps"
	"math"
)

// domainCounts counts the pods matching one spread constraint per topology
// domain of the eligible nodes, and keeps the smallest count up to date in
// constant time per change: a hostname spread has a domain per node, and
// finding the minimum again after each placement would cost a pass over
// every node.
type domainCounts struct {
	// counts are the matching pods per domain; nodes the eligible nodes per
	// domain, so that a domain goes with its last node.
	counts, nodes map[string]int
	// domainsAt counts the domains per count; min is the smallest count
	// held, math.MaxInt without domains.
	domainsAt map[int]int
	min       int
}

func newDomainCounts() domainCounts {
	return domainCounts{counts: map[string]int{}, nodes: map[string]int{}, domainsAt: map[int]int{}, min: math.MaxInt}
}

// domainCountsOf returns the counts, none yet, of the domains of the
// eligible nodes, given as nodes per domain: what addNode for each node
// gives.
func domainCountsOf(nodes map[string]int) domainCounts {
	d := domainCounts{counts: make(map[string]int, len(nodes)), nodes: maps.Clone(nodes), domainsAt: map[int]int{}, min: math.MaxInt}
	for domain := range nodes {
		d.counts[domain] = 0
	}
	if len(nodes) > 0 {
		d.domainsAt[0], d.min = len(nodes), 0
	}
	return d
}

func (d *domainCounts) clone() domainCounts {
	return domainCounts{counts: maps.Clone(d.counts), nodes: maps.Clone(d.nodes), domainsAt: maps.Clone(d.domainsAt), min: d.min}
}

// addNode accounts for an eligible node of domain; a new domain has no
// pods yet.
func (d *domainCounts) addNode(domain string) {
	if d.nodes[domain]++; d.nodes[domain] > 1 {
		return
	}
	d.counts[domain] = 0
	d.domainsAt[0]++
	d.min = 0
}

// removeNode undoes addNode; the domain goes, with its count, with its
// last node.
func (d *domainCounts) removeNode(domain string) {
	if d.nodes[domain]--; d.nodes[domain] > 0 {
		return
	}
	count := d.counts[domain]
	delete(d.nodes, domain)
	delete(d.counts, domain)
	d.leave(count)
}

// add changes the count of a domain of an eligible node by delta.
func (d *domainCounts) add(domain string, delta int) {
	from := d.counts[domain]
	to := from + delta
	d.counts[domain] = to
	d.domainsAt[to]++
	d.min = min(d.min, to)
	d.leave(from)
}

// leave forgets a domain that held count, finding the new minimum among
// the counts held, which are few, when it was the last at the minimum.
func (d *domainCounts) leave(count int) {
	if d.domainsAt[count]--; d.domainsAt[count] > 0 {
		return
	}
	delete(d.domainsAt, count)
	if count != d.min {
		return
	}
	d.min = math.MaxInt
	for held := range d.domainsAt {
		d.min = min(d.min, held)
	}
}

// minimum is the smallest count, as kube-scheduler's PodTopologySpread
// computes it: 0 while there are fewer domains than minDomains.
func (d *domainCounts) minimum(minDomains int) int {
	if len(d.counts) < minDomains {
		return 0
	}
	return d.min
}
