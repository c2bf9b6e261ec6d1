package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// histogram is one cumulative histogram scraped from /metrics.
type histogram struct {
	count   uint64
	sum     float64
	buckets map[float64]uint64 // upper bound -> cumulative count
}

// scrape reads cluster_autoscaler_function_duration_seconds for every
// (cluster, function) from the text exposition format. (Parsed by hand:
// importing prometheus/common, an indirect dependency, would change go.mod.)
func scrape(ctx context.Context, address string) (map[[2]string]histogram, error) {
	body, err := get(ctx, address, "/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	const name = "cluster_autoscaler_function_duration_seconds_"
	out := map[[2]string]histogram{}
	s := bufio.NewScanner(body)
	s.Buffer(make([]byte, 1<<20), 1<<22)
	for s.Scan() {
		line, ok := strings.CutPrefix(s.Text(), name)
		if !ok {
			continue
		}
		suffix, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labelText, valueText, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		value, err := strconv.ParseFloat(strings.Fields(valueText)[0], 64)
		if err != nil {
			continue
		}
		key := [2]string{labels["cluster"], labels["function"]}
		h := out[key]
		if h.buckets == nil {
			h.buckets = map[float64]uint64{}
		}
		switch suffix {
		case "sum":
			h.sum = value
		case "count":
			h.count = uint64(value)
		case "bucket":
			le, err := strconv.ParseFloat(labels["le"], 64)
			if err == nil {
				h.buckets[le] = uint64(value)
			}
		}
		out[key] = h
	}
	return out, s.Err()
}

// window is what a histogram gained between two scrapes.
type window struct {
	count uint64
	mean  time.Duration
	// p99 is the upper bound of the bucket holding the 99th percentile.
	p99 float64
}

func diff(before, after histogram) window {
	w := window{count: after.count - before.count}
	if w.count == 0 {
		return w
	}
	w.mean = time.Duration((after.sum - before.sum) / float64(w.count) * float64(time.Second))
	bounds := make([]float64, 0, len(after.buckets))
	for b := range after.buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	target := uint64(math.Ceil(0.99 * float64(w.count)))
	w.p99 = math.Inf(1)
	for _, b := range bounds {
		if after.buckets[b]-before.buckets[b] >= target {
			w.p99 = b
			break
		}
	}
	return w
}

func (w window) String() string {
	if w.count == 0 {
		return "no loops"
	}
	p99 := "+Inf"
	if !math.IsInf(w.p99, 1) {
		p99 = "≤ " + formatSeconds(w.p99)
	}
	return fmt.Sprintf("%s (p99 %s, %d loops)", roundDuration(w.mean), p99, w.count)
}

func formatSeconds(s float64) string {
	if s < 1 {
		return strconv.FormatFloat(s*1000, 'f', -1, 64) + " ms"
	}
	return strconv.FormatFloat(s, 'f', -1, 64) + " s"
}

func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	default:
		return d.Round(100 * time.Microsecond)
	}
}

// rssMiB is VmRSS of a process in MiB.
func rssMiB(pid int) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// scaledUpLogTimes are the times of the manager's "Scaled up node group"
// log lines for group after since. klog's header has no year.
func scaledUpLogTimes(logPath, group string, since time.Time) []time.Time {
	f, err := os.Open(logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []time.Time
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<24)
	for s.Scan() {
		line := s.Text()
		if !strings.Contains(line, `"Scaled up node group"`) || !strings.Contains(line, group) || len(line) < 21 {
			continue
		}
		// I0102 15:04:05.000000
		t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
		if err != nil {
			continue
		}
		t = t.AddDate(since.Year(), 0, 0)
		if t.After(since) {
			out = append(out, t)
		}
	}
	return out
}

// goMemory describes the manager's Go memory from its metrics: the heap
// in use and the heap size at which the next collection starts (the RSS
// follows the latter).
func goMemory(ctx context.Context, address string) (string, error) {
	body, err := get(ctx, address, "/metrics")
	if err != nil {
		return "", err
	}
	defer body.Close()
	values := map[string]float64{}
	s := bufio.NewScanner(body)
	s.Buffer(make([]byte, 1<<20), 1<<22)
	for s.Scan() {
		for _, name := range []string{"go_memstats_heap_inuse_bytes", "go_memstats_next_gc_bytes"} {
			if rest, ok := strings.CutPrefix(s.Text(), name+" "); ok {
				if bytes, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
					values[name] = bytes / (1 << 20)
				}
			}
		}
	}
	if len(values) != 2 {
		return "", fmt.Errorf("no Go memory statistics in the metrics of %s", address)
	}
	return fmt.Sprintf("Go heap in use %.0f MiB, next GC at %.0f MiB", values["go_memstats_heap_inuse_bytes"], values["go_memstats_next_gc_bytes"]), nil
}

// saveProfile writes one of the pprof profiles the manager serves on its
// --profiler-address, e.g. "heap" or "profile?seconds=60", to path, for
// `go tool pprof`.
func saveProfile(ctx context.Context, address, profile, path string) error {
	body, err := get(ctx, address, "/debug/pprof/"+profile)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// get reads path from the manager's plain HTTP endpoint at address (its
// metrics or its profiler).
func get(ctx context.Context, address, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+address+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp.Body, nil
}
