package soak

import (
	"context"
	"errors"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
)

// RunInput is the input of Run.
type RunInput struct {
	Env       *Env
	Generator GeneratorOptions
	// Duration is how long operations are applied: the last one is the
	// last whose wait ends before it is over.
	Duration time.Duration
	Checker  *Checker
}

// pendingUndo is an Undo due at a time.
type pendingUndo struct {
	due  time.Time
	op   Operation
	undo *Undo
}

// NothingToActOn is what an Undo returns when it found nothing to act
// on: a crash armed that no write set off. Its entry says so, as an
// operation's Result.Skipped does.
type NothingToActOn struct{ Reason string }

func (e *NothingToActOn) Error() string { return e.Reason }

// Run applies the generator's operations, each after its wait, for the
// duration, undoes what each left in effect when its time comes, starts
// the suite's manager again as soon as an armed crash killed it, checks
// the invariants after each step (failing the spec with the seed and the
// history at the first violation), and at the end undoes whatever is
// still in effect, armed crashes disarmed, and leaves the suite's manager
// running. It returns the history.
func Run(ctx context.Context, input RunInput) *History {
	env, checker := input.Env, input.Checker
	history := checker.History
	env.history = history
	env.crashes = make(chan struct{}, 1)
	generator := NewGenerator(input.Generator)
	end := time.Now().Add(input.Duration)
	var undos []pendingUndo

	runUndos := func(until time.Time) {
		for len(undos) > 0 && !undos[0].due.After(until) {
			u := undos[0]
			undos = undos[1:]
			undoneAt := time.Now()
			entry := Applied{At: undoneAt, Op: u.op, Undo: u.undo.Name, Err: u.undo.Do(ctx, env)}
			var nothing *NothingToActOn
			if errors.As(entry.Err, &nothing) {
				entry.Result.Skipped, entry.Err = nothing.Reason, nil
			}
			history.Record(entry)
			env.restartCrashed(ctx)
			checker.Check(ctx)
		}
	}
	for {
		op := generator.Next()
		at := time.Now().Add(op.Wait)
		if at.After(end) {
			break
		}
		// Wait for the operation's time, undoing what is due meanwhile.
		for {
			next := at
			if len(undos) > 0 && undos[0].due.Before(next) {
				next = undos[0].due
			}
			reached, ok := waitUntil(ctx, next, env.crashes)
			if !ok {
				return history
			}
			if !reached {
				env.restartCrashed(ctx)
				checker.Check(ctx)
				continue
			}
			if next.Equal(at) {
				break
			}
			runUndos(next)
		}
		By(op.Name())
		// Recorded at its start: what a watch sees while it is applied
		// comes after it in the history.
		appliedAt := time.Now()
		result, err := op.Apply(ctx, env)
		history.Record(Applied{At: appliedAt, Op: op, Result: result, Err: err})
		var violation *ViolationError
		if errors.As(err, &violation) {
			checker.Fail(time.Now(), violation.Error())
		}
		if result.Undo != nil {
			undos = append(undos, pendingUndo{due: time.Now().Add(result.Undo.After), op: op, undo: result.Undo})
			slices.SortStableFunc(undos, func(a, b pendingUndo) int { return a.due.Compare(b.due) })
		}
		env.restartCrashed(ctx)
		checker.Check(ctx)
	}
	By("Undoing what the operations left in effect")
	runUndos(time.Now().Add(24 * time.Hour))
	// No crash fires once disarmed; the last to fire may have killed the
	// suite's manager during the undos.
	env.disarmAll()
	env.restartCrashed(ctx)
	checker.Check(ctx)
	return history
}

// waitUntil waits until t (reached) or until woken; ok is false if ctx
// ends first.
func waitUntil(ctx context.Context, t time.Time, wake <-chan struct{}) (reached, ok bool) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true, true
	case <-wake:
		return false, true
	case <-ctx.Done():
		return false, false
	}
}
