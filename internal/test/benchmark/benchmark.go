// Package benchmark holds what the project's benchmarks report besides
// wall time: the CPU time of the process and the live heap. On a machine
// that other processes share, CPU time, garbage collection included, is the
// steadier measure of a decision's cost.
package benchmark

import (
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
