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
