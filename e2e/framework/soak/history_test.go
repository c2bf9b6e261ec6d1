package soak

import (
	"errors"
	"testing"
	"time"
)

func TestHistoryBeforeAndCounts(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &History{Seed: 3}
	for i, kind := range []Kind{ScaleWorkload, Faults, ScaleWorkload, DeleteNode} {
		h.Record(Applied{At: start.Add(time.Duration(i) * time.Second), Op: Operation{Seq: i + 1, Kind: kind}})
	}
	h.Record(Applied{At: start.Add(4 * time.Second), Op: Operation{Seq: 2, Kind: Faults}, Undo: "faults stopped", Err: errors.New("gone")})

	before := h.Before(start.Add(2*time.Second), 2)
	if len(before) != 2 || before[0].Op.Seq != 2 || before[1].Op.Seq != 3 {
		t.Fatalf("the last 2 entries started by 2s are #2 and #3, got %v", before)
	}
	counts := h.Counts()
	if counts[ScaleWorkload] != 2 || counts[Faults] != 1 || counts[DeleteNode] != 1 {
		t.Fatalf("counts without undos: %v", counts)
	}
	if failed, skipped := h.Failed(); failed != 1 || skipped != 0 {
		t.Fatalf("failed %d, skipped %d; want 1, 0", failed, skipped)
	}
}

// TestHistoryCrashes checks that what an armed crash did later counts
// neither as an operation nor as an undo, and that only its kills count as
// crashes.
func TestHistoryCrashes(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	crash := Operation{Seq: 1, Kind: CrashAtWrite, Point: CrashAfterScale, Nth: 1}
	h := &History{Seed: 3}
	h.Record(Applied{At: start, Op: crash, Result: Result{Target: "armed"}})
	h.Record(Applied{At: start.Add(time.Second), Op: crash, Fired: crashFired, Result: Result{Target: "manager m killed"}})
	h.Record(Applied{At: start.Add(time.Second), Op: crash, Fired: restartFired, Result: Result{Target: "manager m started again as n"}})
	h.Record(Applied{At: start.Add(2 * time.Second), Op: crash, Fired: crashFired, Result: Result{Skipped: "no manager says it holds the Lease"}})
	if counts := h.Counts(); counts[CrashAtWrite] != 1 {
		t.Errorf("counts %v, want CrashAtWrite once", counts)
	}
	if crashes := h.Crashes(); crashes != 1 {
		t.Errorf("%d crashes, want 1: a crash that found no holder killed nothing", crashes)
	}
	if got, want := h.Entries()[1].String(), "00:00:01.000 #1 crash → manager m killed: ok"; got != want {
		t.Errorf("the kill shows as %q, want %q", got, want)
	}
}
