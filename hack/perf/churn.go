package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// churnOptions are the pod churn of the multi-cluster mode.
type churnOptions struct {
	// window is how long the managers are measured under churn.
	window time.Duration
	// rate is pods created per second in each workload cluster.
	rate float64
	// podLife is how long a churned pod lives.
	podLife time.Duration
	// unschedulableShare of the pods fit nowhere; the others are bound.
	unschedulableShare float64
}

const (
	// unfittableCPU is more than any node and any node group's template
	// offers (64 cores in md-burst): an unschedulable churned pod triggers
	// loops but no scale-up, so the clusters stay as they are and every
	// minute of the window costs the engines the same.
	unfittableCPU = "100"
	// churnOwner is the ConfigMap the churned pods name as their controller.
	churnOwner = "owner-churn"
)

// churnCounts tally the churn of all clusters.
type churnCounts struct {
	unschedulable, bound, deleted, failed atomic.Int64
}

type churnTally struct{ unschedulable, bound, deleted, failed int64 }

func (c *churnCounts) tally() churnTally {
	return churnTally{c.unschedulable.Load(), c.bound.Load(), c.deleted.Load(), c.failed.Load()}
}

// churn creates a pod in a workload cluster every 1/rate seconds and
// deletes each podLife later, until ctx ends. A share of them are
// unschedulable: unbound, too large for any node or node group, and marked
// PodScheduled=False (no scheduler runs here), so that each triggers the
// engine, as internal/controller watches pods turning unschedulable, and
// changes its status. The others are bound to the static nodes in turn and
// marked Running, as the kubelet would. Requests that fail are counted,
// not retried: a saturated API server shows as failures.
func (h *harness) churn(ctx context.Context, w *workloadCluster, owner metav1.OwnerReference, counts *churnCounts) {
	o, nodes := h.opts.churn, h.opts.nodesPerCluster
	type alivePod struct {
		name     string
		deleteAt time.Time
	}
	// Every pod lives as long: the oldest is the next to go.
	var alive []alivePod
	countFailure := func(err error) {
		if err != nil && ctx.Err() == nil {
			counts.failed.Add(1)
		}
	}
	ticker := time.NewTicker(time.Duration(float64(time.Second) / o.rate))
	defer ticker.Stop()
	for n := 0; ; n++ {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-ticker.C:
		}
		for len(alive) > 0 && !now.Before(alive[0].deleteAt) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: alive[0].name}}
			alive = alive[1:]
			if err := client.IgnoreNotFound(w.client.Delete(ctx, p, client.GracePeriodSeconds(0))); err != nil {
				countFailure(err)
				continue
			}
			counts.deleted.Add(1)
		}
		name := fmt.Sprintf("churn-%06d", n)
		// Spread the unschedulable pods evenly over the sequence.
		if int(float64(n+1)*o.unschedulableShare) > int(float64(n)*o.unschedulableShare) {
			p := pod(name, owner, map[string]string{roleLabel: "churn-unschedulable"}, "", unfittableCPU, "1Gi", nil)
			if err := createUnschedulablePod(ctx, w.client, p, nodes); err != nil {
				countFailure(err)
			} else {
				counts.unschedulable.Add(1)
			}
		} else {
			node := fmt.Sprintf("static-%05d", n%nodes)
			p := pod(name, owner, map[string]string{roleLabel: "churn-bound"}, node, "100m", "128Mi", nil)
			if err := createRunningPod(ctx, w.client, p); err != nil {
				countFailure(err)
			} else {
				counts.bound.Add(1)
			}
		}
		// Deleted in turn even when its creation failed half-way.
		alive = append(alive, alivePod{name: name, deleteAt: now.Add(o.podLife)})
	}
}

// churnWindow churns pods in every workload cluster, waits one pod life
// for creations and deletions to balance, then measures the managers over
// the window: CPU, RSS, the requests each sends to the management and to
// each workload API server, loop durations and status writes.
func (h *harness) churnWindow(ctx context.Context, clusters []string, workloads map[string]*workloadCluster) error {
	o := h.opts.churn
	h.logf("=== churn: %.2f pods/s in each of %d clusters (%.0f%% unschedulable), each living %s; warm-up %s, window %s",
		o.rate, len(clusters), 100*o.unschedulableShare, o.podLife, o.podLife, o.window)
	owners := map[string]metav1.OwnerReference{}
	for _, c := range clusters {
		owner, err := createOwner(ctx, workloads[c].client, churnOwner)
		if err != nil {
			return fmt.Errorf("creating the churn's owner in %s: %w", c, err)
		}
		owners[c] = owner
	}
	counts := &churnCounts{}
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churning sync.WaitGroup
	stopChurning := func() { stopChurn(); churning.Wait() }
	defer stopChurning()
	for _, c := range clusters {
		churning.Add(1)
		go func() {
			defer churning.Done()
			h.churn(churnCtx, workloads[c], owners[c], counts)
		}()
	}
	stopProgress := h.every(ctx, time.Minute, func() {
		t := counts.tally()
		h.logf("  churn so far: %d unschedulable and %d bound pods created, %d deleted, %d failed requests", t.unschedulable, t.bound, t.deleted, t.failed)
	})
	defer stopProgress()
	if err := sleep(ctx, o.podLife); err != nil {
		return err
	}

	statusWrites, err := h.countStatusWrites(ctx)
	if err != nil {
		return err
	}
	before, err := h.scrapeManagers(ctx)
	if err != nil {
		return err
	}
	workloadCPUBefore, harnessCPUBefore := workloadCPUSeconds(workloads, clusters), h.ownCPUSeconds()
	tallyBefore, started := counts.tally(), time.Now()
	rss := map[*manager]*rssRange{}
	for _, m := range h.managers {
		rss[m] = newRSSRange(m.pid)
	}
	stopSampling := h.every(ctx, 2*time.Second, func() {
		for _, r := range rss {
			r.sample()
		}
	})
	err = sleep(ctx, o.window)
	stopSampling()
	if err != nil {
		return err
	}
	after, err := h.scrapeManagers(ctx)
	if err != nil {
		return err
	}
	seconds := time.Since(started).Seconds()
	workloadCPU := (workloadCPUSeconds(workloads, clusters) - workloadCPUBefore) / seconds
	harnessCPU := (h.ownCPUSeconds() - harnessCPUBefore) / seconds
	tallyAfter := counts.tally()
	writes := statusWrites.stop()
	for _, r := range rss {
		r.sample()
	}
	stopChurning()

	load := loadavg()
	perSecond := func(n int64) float64 { return float64(n) / seconds }
	created := tallyAfter.unschedulable + tallyAfter.bound - tallyBefore.unschedulable - tallyBefore.bound
	h.row("| churn over %s (after %s of warm-up): %d Clusters × %.2f pods/s, %.0f%% unschedulable, each deleted after %s | created %.1f/s, deleted %.1f/s in all | %d unschedulable, %d bound created; %d failed requests | load %s |",
		o.window, o.podLife, len(clusters), o.rate, 100*o.unschedulableShare, o.podLife,
		perSecond(created), perSecond(tallyAfter.deleted-tallyBefore.deleted),
		tallyAfter.unschedulable-tallyBefore.unschedulable, tallyAfter.bound-tallyBefore.bound, tallyAfter.failed-tallyBefore.failed, load)
	h.row("| workload API servers at the end of the churn | %s | CPU over the window %.2f s/s in all (the harness churning: %.2f s/s); %s; MemAvailable %s | load %s |",
		workloadRSS(workloads, clusters), workloadCPU, harnessCPU, h.workloadTuning(), memAvailableText(), load)

	// One row per manager, and their sum.
	h.row("")
	h.row("Under churn, per manager (requests: the manager's rest_client_requests_total by API server; reads are GETs, watches included; status writes: ClusterAutoscaler changes seen by a watch):")
	h.row("")
	h.row("| manager | Clusters | CPU (s/s) | RSS start / peak / end | loops: mean (p99, count) | management API server: reads/s, writes/s | workload API servers in all: reads/s, writes/s (busiest one) | status writes/s per ClusterAutoscaler (busiest) |")
	h.row("| --- | --- | --- | --- | --- | --- | --- | --- |")
	total := usage{}
	for _, m := range h.managers {
		u := h.usage(m, m.clusters, before[m], after[m], workloads, writes, seconds)
		u.rss = *rss[m]
		h.row("%s", u.row(m.name))
		total.add(u)
	}
	if len(h.managers) > 1 {
		h.row("%s", total.row("all (sums; RSS: sum of each one's)"))
	}

	// One row per workload cluster.
	h.row("")
	h.row("| Cluster | manager | requests to its API server: reads/s, writes/s | status writes/s | loops: mean (p99, count) |")
	h.row("| --- | --- | --- | --- | --- |")
	for _, c := range clusters {
		m := h.managerOf(c)
		host := workloads[c].host
		reads := (after[m].requests[requestKind{host: host}] - before[m].requests[requestKind{host: host}]) / seconds
		writesPerSecond := (after[m].requests[requestKind{host: host, write: true}] - before[m].requests[requestKind{host: host, write: true}]) / seconds
		h.row("| %s | %s | %.2f, %.2f | %.3f | %s |", c, m.name, reads, writesPerSecond, float64(writes[c])/seconds,
			diff(h.loops(before, []string{c}), h.loops(after, []string{c})))
	}
	return nil
}

// usage is what one manager (or all) cost over the churn window.
type usage struct {
	cpu                    float64
	rss                    rssRange
	loopsBefore            histogram
	loopsAfter             histogram
	managementReads        float64
	managementWrites       float64
	workloadReads          float64
	workloadWrites         float64
	busiestWorkload        [2]float64 // reads/s, writes/s of the busiest workload API server
	statusWrites           float64    // per second, all ClusterAutoscalers
	busiestStatusWrites    float64
	clusterAutoscalerCount int
}

func (h *harness) usage(m *manager, clusters []string, before, after managerMetrics, workloads map[string]*workloadCluster, statusWrites map[string]int, seconds float64) usage {
	rate := func(k requestKind) float64 { return (after.requests[k] - before.requests[k]) / seconds }
	u := usage{
		cpu:                    (after.cpuSeconds - before.cpuSeconds) / seconds,
		loopsBefore:            h.loops(map[*manager]managerMetrics{m: before}, clusters),
		loopsAfter:             h.loops(map[*manager]managerMetrics{m: after}, clusters),
		managementReads:        rate(requestKind{host: h.managementHost}),
		managementWrites:       rate(requestKind{host: h.managementHost, write: true}),
		clusterAutoscalerCount: len(clusters),
	}
	for _, c := range clusters {
		host := workloads[c].host
		reads, writes := rate(requestKind{host: host}), rate(requestKind{host: host, write: true})
		u.workloadReads += reads
		u.workloadWrites += writes
		if reads+writes > u.busiestWorkload[0]+u.busiestWorkload[1] {
			u.busiestWorkload = [2]float64{reads, writes}
		}
		status := float64(statusWrites[c]) / seconds
		u.statusWrites += status
		u.busiestStatusWrites = max(u.busiestStatusWrites, status)
	}
	return u
}

func (u *usage) add(o usage) {
	u.cpu += o.cpu
	u.rss.start += o.rss.start
	u.rss.peak += o.rss.peak
	u.rss.end += o.rss.end
	u.loopsAfter = sumHistograms(u.loopsAfter, o.loopsAfter)
	u.loopsBefore = sumHistograms(u.loopsBefore, o.loopsBefore)
	u.managementReads += o.managementReads
	u.managementWrites += o.managementWrites
	u.workloadReads += o.workloadReads
	u.workloadWrites += o.workloadWrites
	if o.busiestWorkload[0]+o.busiestWorkload[1] > u.busiestWorkload[0]+u.busiestWorkload[1] {
		u.busiestWorkload = o.busiestWorkload
	}
	u.statusWrites += o.statusWrites
	u.busiestStatusWrites = max(u.busiestStatusWrites, o.busiestStatusWrites)
	u.clusterAutoscalerCount += o.clusterAutoscalerCount
}

func (u usage) row(name string) string {
	perClusterAutoscaler := 0.0
	if u.clusterAutoscalerCount > 0 {
		perClusterAutoscaler = u.statusWrites / float64(u.clusterAutoscalerCount)
	}
	return fmt.Sprintf("| %s | %d | %.3f | %.0f / %.0f / %.0f MiB | %s | %.2f, %.2f | %.2f, %.2f (%.2f, %.2f) | %.3f (%.3f) |",
		name, u.clusterAutoscalerCount, u.cpu, u.rss.start, u.rss.peak, u.rss.end, diff(u.loopsBefore, u.loopsAfter),
		u.managementReads, u.managementWrites, u.workloadReads, u.workloadWrites, u.busiestWorkload[0], u.busiestWorkload[1],
		perClusterAutoscaler, u.busiestStatusWrites)
}

// rssRange is a process's RSS at the start and end of a window and its
// peak in samples taken over it.
type rssRange struct {
	pid              int
	start, peak, end float64
}

func newRSSRange(pid int) *rssRange {
	rss, _ := rssMiB(pid)
	return &rssRange{pid: pid, start: rss, peak: rss, end: rss}
}

func (r *rssRange) sample() {
	if rss, err := rssMiB(r.pid); err == nil {
		r.end, r.peak = rss, max(r.peak, rss)
	}
}

// statusWriteCounter counts the changes a watch sees to each
// ClusterAutoscaler. During the churn only the managers write them, and
// only their status.
type statusWriteCounter struct {
	mu     sync.Mutex
	counts map[string]int
	cancel context.CancelFunc
	done   chan struct{}
}

func (h *harness) countStatusWrites(ctx context.Context) (*statusWriteCounter, error) {
	list := &autoscalingv1alpha1.ClusterAutoscalerList{}
	if err := h.mgmt.List(ctx, list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the ClusterAutoscalers: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &statusWriteCounter{counts: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	resourceVersion := list.ResourceVersion
	go func() {
		defer close(c.done)
		// A watch ends now and then: the next starts where it stopped.
		for ctx.Err() == nil {
			w, err := h.mgmt.Watch(ctx, &autoscalingv1alpha1.ClusterAutoscalerList{}, client.InNamespace(namespace),
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion}})
			if err != nil {
				_ = sleep(ctx, time.Second)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if ctx.Err() != nil {
						break
					}
					// Most likely expired: writes between here and a new list are lost.
					h.logf("the watch of ClusterAutoscalers failed (%v): some status writes are not counted", ev.Object)
					if err := h.mgmt.List(ctx, list, client.InNamespace(namespace)); err == nil {
						resourceVersion = list.ResourceVersion
					}
					break
				}
				ca, ok := ev.Object.(*autoscalingv1alpha1.ClusterAutoscaler)
				if !ok {
					continue
				}
				resourceVersion = ca.ResourceVersion
				if ev.Type == watch.Modified {
					c.mu.Lock()
					c.counts[ca.Name]++
					c.mu.Unlock()
				}
			}
			w.Stop()
		}
	}()
	return c, nil
}

// stop ends the count and returns the writes by ClusterAutoscaler (named
// as its Cluster).
func (c *statusWriteCounter) stop() map[string]int {
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts
}

// workloadRSS sums up the memory of the workload API servers. Their
// private memory is what each one more costs: the pages of the binary
// they map count in the RSS of each but are in memory once.
func workloadRSS(workloads map[string]*workloadCluster, clusters []string) string {
	rss, private, largest := 0.0, 0.0, 0.0
	for _, c := range clusters {
		pid := workloads[c].APIServerPid()
		r, _ := rssMiB(pid)
		p, _ := privateMiB(pid)
		rss += r
		private += p
		largest = max(largest, p)
	}
	n := float64(len(clusters))
	return fmt.Sprintf("private (RssAnon) %.0f MiB in all, %.0f MiB each on average, %.0f MiB the largest; RSS %.0f MiB each on average", private, private/n, largest, rss/n)
}

// ownCPUSeconds is the CPU time the harness has used.
func (h *harness) ownCPUSeconds() float64 {
	seconds, _ := cpuSeconds(os.Getpid())
	return seconds
}

// workloadCPUSeconds is the CPU time the workload API servers have used
// in all.
func workloadCPUSeconds(workloads map[string]*workloadCluster, clusters []string) float64 {
	total := 0.0
	for _, c := range clusters {
		seconds, _ := cpuSeconds(workloads[c].APIServerPid())
		total += seconds
	}
	return total
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Estimates for the memory check, from the smoke runs of
// docs/performance.md.
const (
	// defaultWorkloadAPIServerMiB is the private memory of a workload API
	// server with the default flags, holding 50 nodes and 1,500 pods.
	defaultWorkloadAPIServerMiB = 290
	// stackMiB: etcd, the management cluster's kube-apiserver, scheduler,
	// controller manager and kwok, Cluster API, the harness, and the
	// kube-apiserver binary's pages, which its processes share (about
	// 960 MiB measured, with a margin).
	stackMiB = 1200
	// perPodKiB: every pod is held by etcd and by the manager's cache
	// (its API server's watch cache is in defaultWorkloadAPIServerMiB).
	perPodKiB = 12
	// managerMiB is a manager with no cluster.
	managerMiB = 50
)

// checkMemory says, before anything starts, whether the workload API
// servers and the rest of the stack are expected to fit in the memory
// available, and fails when they are not (unless told to try anyway).
func checkMemory(o options) (string, error) {
	available, err := memAvailableMiB()
	if err != nil {
		return "", err
	}
	pods := o.clusters * o.nodesPerCluster * o.podsPerNode
	apiServers := o.clusters * o.workloadAPIServerMiB
	rest := stackMiB + o.managers*managerMiB + pods*perPodKiB/1024
	plan := fmt.Sprintf("%d workload API servers × %d MiB private + about %d MiB for the rest (the management stack, %d manager(s), %d pods in etcd and caches) = %.1f GiB needed; %.1f GiB available",
		o.clusters, o.workloadAPIServerMiB, rest, o.managers, pods, float64(apiServers+rest)/1024, float64(available)/1024)
	if apiServers+rest <= available {
		return plan, nil
	}
	if o.skipMemoryCheck {
		return plan + " (not expected to fit: --skip-memory-check)", nil
	}
	return "", fmt.Errorf("%s: not expected to fit. Cut the API servers' memory (--workload-apiserver-env=GOMEMLIMIT=..., --workload-apiserver-arg=...; a small run reports what each then takes: pass it as --workload-apiserver-mib), use fewer --clusters, or --skip-memory-check to try anyway", plan)
}

// memAvailableMiB is the kernel's estimate of the memory available to new
// processes without swapping.
func memAvailableMiB() (int, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}

func memAvailableText() string {
	mib, err := memAvailableMiB()
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.1f GiB", float64(mib)/1024)
}
