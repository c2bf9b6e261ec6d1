// Package benchmark holds what the project's benchmarks report besides
// wall time: the CPU time of the process and the live heap. On a machine
// that other processes share, CPU time, garbage collection included, is the
// steadier measure of a decision's cost.
package benchmark

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
)

// CPUTimer measures the CPU time the process spends, user and system.
type CPUTimer struct {
	b     *testing.B
	start time.Duration
}

// StartCPU starts measuring.
func StartCPU(b *testing.B) CPUTimer {
	return CPUTimer{b: b, start: processCPUTime(b)}
}

// Report reports the CPU time since StartCPU per operation, as cpu-ms/op.
func (c CPUTimer) Report() {
	c.b.ReportMetric(float64((processCPUTime(c.b)-c.start).Milliseconds())/float64(c.b.N), "cpu-ms/op")
}

// CPUMeter adds up the CPU time of the process over the sections it is
// running, such as one operation of a benchmark whose setup is not
// measured; it reports what it counted per operation.
type CPUMeter struct {
	b       *testing.B
	started time.Duration
	counted time.Duration
	stopped bool
}

// NewCPUMeter returns a stopped meter.
func NewCPUMeter(b *testing.B) *CPUMeter { return &CPUMeter{b: b, stopped: true} }

// Start starts a section.
func (m *CPUMeter) Start() {
	m.started, m.stopped = processCPUTime(m.b), false
}

// Stop ends the section.
func (m *CPUMeter) Stop() {
	if !m.stopped {
		m.counted += processCPUTime(m.b) - m.started
		m.stopped = true
	}
}

// Report reports the CPU time counted per operation, as cpu-ms/op.
func (m *CPUMeter) Report() {
	m.Stop()
	m.b.ReportMetric(float64(m.counted.Milliseconds())/float64(m.b.N), "cpu-ms/op")
}

func processCPUTime(b *testing.B) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		b.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}

// HeapAfterGC returns the memory statistics after a garbage collection:
// HeapAlloc is then the live heap.
func HeapAfterGC() runtime.MemStats {
	runtime.GC()
	var stats runtime.MemStats
	runtime.ReadMemStats(&stats)
	return stats
}

// DefaultGroups is the number of node groups of the engine benchmarks'
// clusters unless a size says otherwise.
const DefaultGroups = 20

// ClusterSize is one cluster of the engine benchmarks: Nodes spread evenly
// over Groups node groups.
type ClusterSize struct{ Nodes, Groups int }

// Name names the size by its nodes and pods, and by its groups when they
// are not DefaultGroups, so that numbers from before the groups dimension
// compare.
func (s ClusterSize) Name(podsPerNode int) string {
	name := fmt.Sprintf("nodes=%d/pods=%d", s.Nodes, s.Nodes*podsPerNode)
	if s.Groups != DefaultGroups {
		name += fmt.Sprintf("/groups=%d", s.Groups)
	}
	return name
}

// PlanSizes are the clusters the planning benchmarks of scale-up and
// scale-down run on.
var PlanSizes = []ClusterSize{
	{Nodes: 1000, Groups: DefaultGroups},
	{Nodes: 1000, Groups: 100},
	{Nodes: 1000, Groups: 500},
	{Nodes: 5000, Groups: DefaultGroups},
	{Nodes: 10000, Groups: DefaultGroups},
}

// SnapshotHeap is the heap a snapshot holds, measured as it was built.
type SnapshotHeap struct{ live, inUse uint64 }

// NewSnapshot builds the snapshot of in and measures the heap it holds:
// the live heap after building it minus before, both after a garbage
// collection (the input objects are not counted), and the heap in use
// with the input and the snapshot (HeapInuse).
func NewSnapshot(in snapshot.Input) (*snapshot.Snapshot, SnapshotHeap) {
	before := HeapAfterGC()
	snap := snapshot.New(in)
	after := HeapAfterGC()
	runtime.KeepAlive(in)
	return snap, SnapshotHeap{live: after.HeapAlloc - before.HeapAlloc, inUse: after.HeapInuse}
}

// Report reports the heap as snapshot-MiB and heap-inuse-MiB. Call it
// after the benchmark's loop, which resets what was reported before.
func (h SnapshotHeap) Report(b *testing.B) {
	b.ReportMetric(float64(h.live)/(1<<20), "snapshot-MiB")
	b.ReportMetric(float64(h.inUse)/(1<<20), "heap-inuse-MiB")
}
