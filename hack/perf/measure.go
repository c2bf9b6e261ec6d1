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

// managerMetrics is what one read of a manager's /metrics holds.
type managerMetrics struct {
	// loops are cluster_autoscaler_function_duration_seconds by (cluster,
	// function).
	loops map[[2]string]histogram
	// cpuSeconds is process_cpu_seconds_total.
	cpuSeconds float64
	// requests are client-go's rest_client_requests_total, by API server
	// (host:port) and read (GET, watches included) or write (any other
	// method). The API servers' own apiserver_request_total has no label
	// that tells the manager's requests from the harness's.
	requests map[requestKind]float64
}

type requestKind struct {
	host  string
	write bool
}

// scrape reads a manager's metrics from the text exposition format.
// (Parsed by hand: importing prometheus/common, an indirect dependency,
// would change go.mod.)
func scrape(ctx context.Context, address string) (managerMetrics, error) {
	out := managerMetrics{loops: map[[2]string]histogram{}, requests: map[requestKind]float64{}}
	body, err := get(ctx, address, "/metrics")
	if err != nil {
		return out, err
	}
	defer body.Close()
	const loopMetric = "cluster_autoscaler_function_duration_seconds_"
	err = eachSample(body, func(name string, labels map[string]string, value float64) {
		switch {
		case name == "process_cpu_seconds_total":
			out.cpuSeconds = value
		case name == "rest_client_requests_total":
			out.requests[requestKind{host: labels["host"], write: labels["method"] != "GET"}] += value
		case strings.HasPrefix(name, loopMetric):
			key := [2]string{labels["cluster"], labels["function"]}
			h := out.loops[key]
			if h.buckets == nil {
				h.buckets = map[float64]uint64{}
			}
			switch strings.TrimPrefix(name, loopMetric) {
			case "sum":
				h.sum = value
			case "count":
				h.count = uint64(value)
			case "bucket":
				if le, err := strconv.ParseFloat(labels["le"], 64); err == nil {
					h.buckets[le] = uint64(value)
				}
			}
			out.loops[key] = h
		}
	})
	return out, err
}

// eachSample calls f with each sample of a text exposition.
func eachSample(r io.Reader, f func(name string, labels map[string]string, value float64)) error {
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 1<<20), 1<<22)
	for s.Scan() {
		if name, labels, value, ok := parseSample(s.Text()); ok {
			f(name, labels, value)
		}
	}
	return s.Err()
}

// parseSample splits a sample line, `name{label="value",...} value` or
// `name value`, of the text exposition format. Label values must hold no
// comma, as those the harness reads.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	var valueText string
	if before, rest, found := strings.Cut(line, "{"); found {
		var labelText string
		if labelText, valueText, found = strings.Cut(rest, "} "); !found {
			return "", nil, 0, false
		}
		name, labels = before, map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
	} else if name, valueText, found = strings.Cut(line, " "); !found {
		return "", nil, 0, false
	}
	fields := strings.Fields(valueText)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	value, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, value, err == nil
}

// sumHistograms adds up histograms of the same buckets, e.g. the loops of
// several clusters.
func sumHistograms(hs ...histogram) histogram {
	out := histogram{buckets: map[float64]uint64{}}
	for _, h := range hs {
		out.count += h.count
		out.sum += h.sum
		for le, n := range h.buckets {
			out.buckets[le] += n
		}
	}
	return out
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
func rssMiB(pid int) (float64, error) { return procStatusMiB(pid, "VmRSS") }

// privateMiB is RssAnon of a process in MiB: its resident memory less the
// pages of files it maps, e.g. its binary's, which every process of the
// same binary shares.
func privateMiB(pid int) (float64, error) { return procStatusMiB(pid, "RssAnon") }

// procStatusMiB is a field of /proc/PID/status given in kB, in MiB.
func procStatusMiB(pid int, field string) (float64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for pid %d", field, pid)
}

// cpuSeconds is the CPU time, user and system, a process has used:
// utime and stime of /proc/PID/stat, in ticks of USER_HZ (100 on Linux).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command, in parentheses, may hold spaces: fields start after it,
	// with the state (field 3); utime and stime are fields 14 and 15.
	_, rest, ok := strings.Cut(string(b), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("unexpected /proc/%d/stat: %q", pid, b)
		}
		ticks += n
	}
	return ticks / 100, nil
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
