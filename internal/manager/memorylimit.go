package manager

import (
	"fmt"
	"strconv"
)

// defaultGCPercent is the garbage collector's target when GOGC is not set.
// The manager's heap is mostly its caches of the workload clusters, which
// live long, while its loops allocate little: Go's default of 100 lets the
// heap, and so the RSS, reach twice what is live for little saved GC work.
const defaultGCPercent = 50

const (
	// memoryLimitEnv holds the container's memory limit in bytes; the
	// manifest sets it from the downward API (limits.memory).
	memoryLimitEnv = "MEMORY_LIMIT"

	// defaultGoMemoryLimitPercent leaves a tenth of the container's limit
	// outside the Go heap's target: the pages of the binary (about 43 MiB)
	// and the runtime's own memory count toward the limit but not toward
	// GOMEMLIMIT, so a soft limit equal to the container's would let the
	// process reach it before the collector works hard.
	defaultGoMemoryLimitPercent = 90
)

// goMemoryLimit is the Go runtime's soft memory limit to set, in bytes:
// percent of the container's memory limit, read with lookupEnv. It is 0,
// to set none, when GOMEMLIMIT is set (the runtime applied it already),
// the container's limit is unknown, or percent is 0.
func goMemoryLimit(percent int, lookupEnv func(string) (string, bool)) (int64, error) {
	if percent < 0 || percent > 100 {
		return 0, fmt.Errorf("--go-memory-limit-percent must be between 0 and 100, not %d", percent)
	}
	if _, set := lookupEnv("GOMEMLIMIT"); set || percent == 0 {
		return 0, nil
	}
	value, set := lookupEnv(memoryLimitEnv)
	if !set || value == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q is not the container's memory limit in bytes, as the downward API's limits.memory gives it", memoryLimitEnv, value)
	}
	return limit / 100 * int64(percent), nil
}
