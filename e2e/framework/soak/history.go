package soak

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Applied is one operation as it was applied, or the undoing of one.
type Applied struct {
	// At is when it started.
	At time.Time
	Op Operation
	// Undo names what was undone, when the entry is an undo of Op.
	Undo string
	// Fired names what an operation armed did later, on its own, when the
	// entry is that: a CrashAtWrite's crash, or the restart after it.
	Fired  string
	Result Result
	Err    error
}

func (e Applied) String() string {
	what := fmt.Sprintf("#%d %s", e.Op.Seq, e.Op.Name())
	switch {
	case e.Undo != "":
		what = fmt.Sprintf("#%d undo: %s", e.Op.Seq, e.Undo)
	case e.Fired != "":
		what = fmt.Sprintf("#%d %s", e.Op.Seq, e.Fired)
	}
	outcome := "ok"
	switch {
	case e.Err != nil:
		outcome = "error: " + e.Err.Error()
	case e.Result.Skipped != "":
		outcome = "skipped: " + e.Result.Skipped
	}
	target := ""
	if e.Result.Target != "" {
		target = " → " + e.Result.Target
	}
	return fmt.Sprintf("%s %s%s: %s", e.At.Format("15:04:05.000"), what, target, outcome)
}

// History is what a soak applied, in order.
type History struct {
	Seed    uint64
	mu      sync.Mutex
	entries []Applied
}

// Record adds an entry.
func (h *History) Record(e Applied) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.entries = append(h.entries, e)
}

// Entries are the entries so far.
func (h *History) Entries() []Applied {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Applied(nil), h.entries...)
}

// Before are the last n entries started by t.
func (h *History) Before(t time.Time, n int) []Applied {
	var before []Applied
	for _, e := range h.Entries() {
		if !e.At.After(t) {
			before = append(before, e)
		}
	}
	return before[max(0, len(before)-n):]
}

// Counts are the operations applied by kind, undos and what they did
// later left out.
func (h *History) Counts() map[Kind]int {
	counts := map[Kind]int{}
	for _, e := range h.Entries() {
		if e.Undo == "" && e.Fired == "" {
			counts[e.Op.Kind]++
		}
	}
	return counts
}

// Failed counts the operations that failed (races with the cluster, API
// errors) or found nothing to act on.
func (h *History) Failed() (failed, skipped int) {
	for _, e := range h.Entries() {
		switch {
		case e.Err != nil:
			failed++
		case e.Result.Skipped != "":
			skipped++
		}
	}
	return failed, skipped
}

// Crashes counts the managers armed crashes killed.
func (h *History) Crashes() int {
	crashes := 0
	for _, e := range h.Entries() {
		if e.Fired == crashFired && e.Err == nil && e.Result.Skipped == "" {
			crashes++
		}
	}
	return crashes
}

// Format shows entries one a line, for a report.
func Format(entries []Applied) string {
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		lines = append(lines, "  "+e.String())
	}
	return strings.Join(lines, "\n")
}
