package compare

import (
	"syscall"
	"testing"
	"time"
)

// cpuTimer measures the CPU time of the process, garbage collection
// included: the cost of a decision even when other processes share the
// machine.
type cpuTimer struct{ start time.Duration }

func startCPU(b *testing.B) cpuTimer { return cpuTimer{start: processCPUTime(b)} }

func (c cpuTimer) report(b *testing.B) {
	b.ReportMetric(float64((processCPUTime(b)-c.start).Milliseconds())/float64(b.N), "cpu-ms/op")
}

func processCPUTime(b *testing.B) time.Duration {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		b.Fatal(err)
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano())
}
