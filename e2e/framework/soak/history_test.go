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

func TestPercentile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Second)
	}
	for p, want := range map[float64]time.Duration{50: 50 * time.Second, 99: 99 * time.Second, 100: 100 * time.Second, 1: time.Second} {
		if got := Percentile(sorted, p); got != want {
			t.Errorf("p%v = %s, want %s", p, got, want)
		}
	}
	if got := Percentile(sorted[:3], 50); got != 2*time.Second {
		t.Errorf("p50 of 1s, 2s, 3s = %s, want 2s", got)
	}
	if got := Percentile(nil, 99); got != 0 {
		t.Errorf("p99 of nothing = %s, want 0", got)
	}
}
