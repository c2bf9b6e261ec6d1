package scaledown

import (
	"sync/atomic"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/simulator"
)

// DefaultMinParallelWork is a MinParallelWork that keeps small clusters on
// one goroutine: a candidate whose pods fit nowhere costs its pods tried on
// every node, and below some ten thousand such tries the branches cost
// more than they save.
const DefaultMinParallelWork = 10000

// outcome is what a pass decided for a candidate: it goes, empty or not,
// or it stays, and why.
type outcome struct {
	empty bool
	kept  *Decision
}

// tryEach tries to remove the candidates one after the other, each as if
// those accepted before it were gone (tryRemove), and returns what it
// decided for each, in the order of candidates.
//
// A candidate that stays leaves the pass as it was: the candidates after
// it are simulated from the same state until one goes. Those that stay are
// the costly ones, their pods tried on every node, and they come in runs,
// the busier nodes last. So after a candidate stays, when the rest is
// enough work (Options.MinParallelWork), the next candidates are tried on
// Options.Workers branches of the simulator at once from that state
// (tryOnBranches), up to the first that goes, which is then removed on
// sched, as a single goroutine removes it: the plan is the one of a
// single goroutine, whatever the number of workers.
func (p *Planner) tryEach(sched *simulator.Scheduler, state *pass, candidates []*candidate) []outcome {
	outcomes := make([]outcome, len(candidates))
	pace := newPacer()
	for i := 0; i < len(candidates); i++ {
		if pace.ready() && p.parallel(len(candidates)-i, len(sched.Snapshot().NodeInfos())) {
			decided := p.tryOnBranches(sched, state, candidates[i:], outcomes[i:])
			pace.tried(decided)
			if i += decided; i == len(candidates) {
				break
			}
		}
		empty, kept := p.tryRemove(sched, candidates[i], state)
		outcomes[i] = outcome{empty: empty, kept: kept}
		pace.record(kept != nil)
	}
	return outcomes
}

// pacer tells a pass when to try its next candidates on the workers:
// after a candidate stayed, when they are enough work. A try on the
// branches whose first candidate goes decided nothing, and that candidate
// is then simulated twice: the candidates that must stay in a row before
// the next try double, so that candidates that go and stay by turns cost
// at most a few such tries.
type pacer struct {
	// stayed counts the candidates that stayed in a row; wait is how many
	// must have before the workers start.
	stayed, wait int
}

func newPacer() pacer { return pacer{wait: 1} }

// ready tells whether enough candidates stayed in a row for the next ones
// to go on the workers, when they are enough work (Planner.parallel).
func (pc *pacer) ready() bool { return pc.stayed >= pc.wait }

// tried records a try on the branches that found decided candidates that
// stay before the first that goes.
func (pc *pacer) tried(decided int) {
	if decided == 0 {
		pc.wait *= 2
	} else {
		pc.wait = 1
	}
}

// record records whether a candidate stayed.
func (pc *pacer) record(stayed bool) {
	if stayed {
		pc.stayed++
	} else {
		pc.stayed = 0
	}
}

// parallel tells whether candidates that may each have their pods tried on
// every one of nodes are enough work for the workers.
func (p *Planner) parallel(candidates, nodes int) bool {
	return min(p.opts.Workers, candidates) > 1 && candidates*nodes >= p.opts.MinParallelWork
}

// tryOnBranches tries the candidates, each from the state of sched and
// the pass, on branches of sched, one per worker, each taking the next
// candidate until one would go. It records in outcomes why each candidate
// before the first that would go stays, and returns how many they are;
// sched and the pass are left as they were.
// The workers also try candidates after that one, in vain: the state they
// start from changes with its removal.
func (p *Planner) tryOnBranches(sched *simulator.Scheduler, state *pass, candidates []*candidate, outcomes []outcome) int {
	branches := sched.Branches(min(p.opts.Workers, len(candidates)), nil)
	kept := make([]*Decision, len(candidates))
	var next, undecided atomic.Int64
	undecided.Store(int64(len(candidates)))
	simulator.OnEach(branches, func(branch *simulator.Scheduler) {
		view := *state
		view.scans = state.scans.Branch(branch)
		for i := next.Add(1) - 1; i < undecided.Load(); i = next.Add(1) - 1 {
			if kept[i] = p.stays(branch, candidates[i], &view); kept[i] == nil {
				lowerTo(&undecided, i)
			}
		}
	})
	n := int(undecided.Load())
	for i := range n {
		outcomes[i] = outcome{kept: kept[i]}
	}
	return n
}

// stays tells why c stays after the removals accepted so far, or nil when
// it would go; sched and state are left as they were.
func (p *Planner) stays(sched *simulator.Scheduler, c *candidate, state *pass) *Decision {
	_, groups, _, kept := p.podsToMove(sched, c, state)
	if kept != nil {
		return kept
	}
	defer sched.Forget(groups)
	if _, kept := p.moveInFork(sched, c, groups, state); kept != nil {
		return kept
	}
	sched.Revert()
	return nil
}

// lowerTo sets v to i when i is lower.
func lowerTo(v *atomic.Int64, i int64) {
	for {
		current := v.Load()
		if i >= current || v.CompareAndSwap(current, i) {
			return
		}
	}
}
