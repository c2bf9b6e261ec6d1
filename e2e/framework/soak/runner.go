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

// Run applies the generator's operations, each after its wait, for the
// duration, undoes what each left in effect when its time comes, checks
// the invariants after each step (failing the spec with the seed and the
// history at the first violation), and at the end undoes whatever is
// still in effect. It returns the history.
func Run(ctx context.Context, input RunInput) *History {
	env, checker := input.Env, input.Checker
	history := checker.History
	generator := NewGenerator(input.Generator)
	end := time.Now().Add(input.Duration)
	var undos []pendingUndo

	runUndos := func(until time.Time) {
		for len(undos) > 0 && !undos[0].due.After(until) {
			u := undos[0]
			undos = undos[1:]
			undoneAt := time.Now()
			err := u.undo.Do(ctx, env)
			history.Record(Applied{At: undoneAt, Op: u.op, Undo: u.undo.Name, Err: err})
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
			if !waitUntil(ctx, next) {
				return history
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
		checker.Check(ctx)
	}
	By("Undoing what the operations left in effect")
	runUndos(time.Now().Add(24 * time.Hour))
	return history
}

// waitUntil waits until t; false if ctx ends first.
func waitUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
