package simulator

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/onsi/gomega"
)

// TestDomainCountsMinimumIsTheSmallestCount changes counts and domains at
// random and compares the kept minimum with the smallest count found by
// looking at every domain, including on clones changed apart.
func TestDomainCountsMinimumIsTheSmallestCount(t *testing.T) {
	g := NewWithT(t)
	rnd := rand.New(rand.NewPCG(3, 5))
	smallest := func(d *domainCounts, minDomains int) int {
		if len(d.counts) < minDomains {
			return 0
		}
		result := -1
		for _, count := range d.counts {
			if result < 0 || count < result {
				result = count
			}
		}
		return result
	}
	original := newDomainCounts()
	clone := &original
	for step := range 2000 {
		d := &original
		if step == 1000 {
			copied := original.clone()
			clone = &copied
		}
		if step > 1000 && step%2 == 0 {
			d = clone
		}
		domain := fmt.Sprintf("d%d", rnd.IntN(6))
		_, known := d.counts[domain]
		switch op := rnd.IntN(10); {
		case op < 2 || !known:
			d.addNode(domain)
		case op < 4:
			d.removeNode(domain)
		case op < 7 || d.counts[domain] == 0:
			d.add(domain, 1)
		default:
			d.add(domain, -1)
		}
		for _, minDomains := range []int{1, 4} {
			g.Expect(d.minimum(minDomains)).To(Equal(smallest(d, minDomains)), "step %d, minDomains %d: %v", step, minDomains, d.counts)
		}
	}
}
