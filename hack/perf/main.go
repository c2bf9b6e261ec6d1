// Command perf measures capi-autoscaler end to end on the local stack:
// scale-up decision latency (from the pods' PodScheduled=False to the
// MachineDeployment's raised replicas), loop duration and scale-down
// planning time from the manager's metrics, and the manager's memory, at
// growing cluster sizes; it writes a markdown table.
//
//	go build -o bin/manager . && go run ./hack/perf [--sizes=100,1000] [--batches=1,100,5000] [--trials=20] [--out=FILE]
//	go run ./hack/perf --clusters=20 --nodes-per-cluster=50   # one manager, 20 Clusters, each with its own API server
//
// The workload cluster is the management cluster (SelfHosted). Most nodes
// are kwok Nodes created directly ("static": in no node group, like a
// fixed pool); 20% (at most --pool-max) are Machines of the md-pool
// MachineDeployment, lightly used so that scale-down plans to remove them
// (it never does: unneededTime is 1h). Pods are bound to their nodes
// directly (kwok runs them). Pending batches select md-burst, which starts
// at zero and whose machines never provision: each trial ends when its
// replicas are raised, then the pods are deleted and the replicas reset.
//
// --groups adds that many MachineDeployments at zero (zones × sizes ×
// teams) that no pending pod selects, to measure the loops, the first
// scale-up and the requests to the management cluster with many node
// groups (groups.go).
//
// With --clusters, each Cluster's workload cluster is an API server of its
// own (localstack's StartAPIServer: etcd shared, no scheduler, controller
// manager nor kwok), holding --nodes-per-cluster static Nodes and their
// pods, which the harness makes Ready and Running itself; so each
// ClusterAutoscaler's cache holds its own cluster only.
//
//	go run ./hack/perf --clusters=100 --nodes-per-cluster=50 --churn=10m [--managers=2]
//
// --churn then creates and deletes pods in every workload cluster for the
// window, unschedulable ones and ones bound to the static nodes, and
// measures the managers over it (churn.go). --managers splits the Clusters
// between managers by --watch-filter, as Cluster API controllers scale out.
//
//	go run ./hack/perf --clusters=20 --nodes-per-cluster=5 --pods-per-node=10 --managers=3 --spread-clusters [--failovers=3]
//
// --spread-clusters has the managers share the Clusters by their Leases
// instead, unfiltered, and measures the share of each, the failover after
// killing one and the give-back once it is started again, checking each
// Cluster's invariant watcher (spread.go).
package main

import (
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

type options struct {
	repoRoot, workDir, manager, out string
	sizes, batches                  []int
	trials, largeTrials             int
	podsPerNode                     int
	poolFraction                    float64
	poolMax                         int
	idle                            time.Duration
	clusters, nodesPerCluster       int
	// groups are node groups at zero added to the single cluster.
	groups      int
	waitRunning bool
	// managers split the Clusters between them by --watch-filter, or
	// with spread, by the Clusters' Leases.
	managers int
	spread   bool
	// failovers is how many managers spread kills and starts again.
	failovers int
	churn     churnOptions
	// workloadAPIServer tunes every workload API server, e.g. to fit 100
	// of them in memory.
	workloadAPIServer localstack.APIServerOptions
	// workloadAPIServerMiB is what one workload API server is expected to
	// take, for the memory check made before anything starts.
	workloadAPIServerMiB int
	skipMemoryCheck      bool
}

func main() {
	var o options
	var sizes, batches string
	flag.StringVar(&o.repoRoot, "repo-root", ".", "Root of the repository")
	flag.StringVar(&o.workDir, "work-dir", "", "Empty directory for the stack (kept); a temporary one by default")
	flag.StringVar(&o.manager, "manager", "bin/manager", "Manager binary (go build -o bin/manager .)")
	flag.StringVar(&o.out, "out", "perf-results.md", "Markdown file the results are written to (also printed)")
	flag.StringVar(&sizes, "sizes", "100,1000", "Cluster sizes in nodes, ascending; the cluster grows from one to the next")
	flag.StringVar(&batches, "batches", "1,100,5000", "Pending pods per scale-up trial")
	flag.IntVar(&o.trials, "trials", 20, "Trials per batch size")
	flag.IntVar(&o.largeTrials, "large-trials", 5, "Trials for batches of 1,000 pods or more (the scheduler marks about 50 pods/s unschedulable)")
	flag.IntVar(&o.podsPerNode, "pods-per-node", 30, "Running pods per node")
	flag.Float64Var(&o.poolFraction, "pool-fraction", 0.2, "Fraction of the nodes that are Machines of md-pool, underutilized")
	flag.IntVar(&o.poolMax, "pool-max", 200, "At most this many md-pool Machines")
	flag.DurationVar(&o.idle, "idle", 60*time.Second, "Window over which idle loops are measured")
	flag.IntVar(&o.groups, "groups", 0, "Single-cluster mode: this many more MachineDeployments at zero (zones × sizes × teams), which no pending pod selects but every loop weighs")
	flag.IntVar(&o.clusters, "clusters", 0, "Multi-cluster mode: this many Clusters, each with its own API server and ClusterAutoscaler")
	flag.IntVar(&o.nodesPerCluster, "nodes-per-cluster", 50, "Multi-cluster mode: static nodes per Cluster")
	flag.BoolVar(&o.waitRunning, "wait-running", true, "Wait until kwok has marked every pod Running before measuring; false measures as soon as they are bound (kwok goes on in the background: about 50 pods/s at 5,000 nodes)")
	flag.IntVar(&o.managers, "managers", 1, "Multi-cluster mode: this many managers, each serving a disjoint block of the Clusters through its own --watch-filter value")
	flag.BoolVar(&o.spread, "spread-clusters", false, "Multi-cluster mode: the --managers run with --spread-clusters, unfiltered, and share the Clusters by their Leases; the harness measures the share of each, kills one (SIGKILL) and measures the failover, starts it again and measures the give-back, and checks that no Cluster was served by two at once (spread.go)")
	flag.IntVar(&o.failovers, "failovers", 3, "With --spread-clusters: how many times a manager is killed and started again")
	flag.DurationVar(&o.churn.window, "churn", 0, "Multi-cluster mode: after the idle window, churn pods in every workload cluster and measure the managers over this window (after a warm-up of one --churn-pod-life)")
	flag.Float64Var(&o.churn.rate, "churn-rate", 1, "Pods created per second in each workload cluster (as many are deleted once the churn is steady)")
	flag.DurationVar(&o.churn.podLife, "churn-pod-life", 30*time.Second, "How long a churned pod lives before the harness deletes it")
	flag.Float64Var(&o.churn.unschedulableShare, "churn-unschedulable", 0.5, "Share of the churned pods that fit no node and no node group (marked Unschedulable by the harness); the others are bound to the static nodes and marked Running")
	flag.Func("workload-apiserver-arg", "A flag added to every workload kube-apiserver's, e.g. --watch-cache-sizes=events#100 (repeatable; later flags win)", func(arg string) error {
		o.workloadAPIServer.ExtraArgs = append(o.workloadAPIServer.ExtraArgs, arg)
		return nil
	})
	flag.Func("workload-apiserver-env", "An environment variable of every workload kube-apiserver, e.g. GOMEMLIMIT=200MiB or GOGC=50 (repeatable)", func(kv string) error {
		if !strings.Contains(kv, "=") {
			return fmt.Errorf("not NAME=VALUE: %q", kv)
		}
		o.workloadAPIServer.Env = append(o.workloadAPIServer.Env, kv)
		return nil
	})
	flag.IntVar(&o.workloadAPIServerMiB, "workload-apiserver-mib", defaultWorkloadAPIServerMiB, "Private memory (RssAnon, MiB) one workload API server is expected to take, for the memory check before the run; the run reports what they took")
	flag.BoolVar(&o.skipMemoryCheck, "skip-memory-check", false, "Start even when the workload API servers are not expected to fit in the available memory")
	flag.Parse()
	var err error
	if o.sizes, err = ints(sizes); err == nil {
		o.batches, err = ints(batches)
	}
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "perf failed: %v\n", err)
		os.Exit(1)
	}
}

func (o options) validate() error {
	switch {
	case o.managers < 1:
		return errors.New("--managers must be at least 1")
	case o.spread && (o.clusters == 0 || o.managers < 2):
		return errors.New("--spread-clusters needs --clusters and --managers=2 or more")
	case o.managers > 1 && o.clusters < o.managers:
		return fmt.Errorf("--managers=%d needs at least as many --clusters", o.managers)
	case o.groups > 0 && o.clusters > 0:
		return errors.New("--groups is for the single-cluster mode (no --clusters)")
	case o.churn.window > 0 && o.clusters == 0:
		return errors.New("--churn needs the multi-cluster mode (--clusters)")
	case o.churn.window > 0 && (o.churn.rate <= 0 || o.churn.podLife <= 0):
		return errors.New("--churn-rate and --churn-pod-life must be positive")
	case o.churn.unschedulableShare < 0 || o.churn.unschedulableShare > 1:
		return errors.New("--churn-unschedulable is a share, between 0 and 1")
	}
	return nil
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("not a number: %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

type harness struct {
	opts     options
	workDir  string
	mgmt     client.WithWatch
	managers []*manager
	// managementHost is the host:port the managers reach the management
	// API server at: their requests there are counted under it.
	managementHost string
	// apiServer reaches the management API server as its admin, for its
	// metrics.
	apiServer *rest.Config
	// servedBy is the manager of each Cluster.
	servedBy map[string]*manager
	mu       sync.Mutex
	report   []string
}

// manager is one manager process the harness runs and measures.
type manager struct {
	name string
	// watchFilter is its --watch-filter value, and the
	// cluster.x-k8s.io/watch-filter label of its Clusters and
	// ClusterAutoscalers; empty: it serves all.
	watchFilter    string
	metricsAddress string
	// profilerAddress serves the manager's pprof profiles.
	profilerAddress string
	pid             int
	log             string
	clusters        []string
	process         *localstack.Process
}

// managerOf is the manager that serves cluster.
func (h *harness) managerOf(cluster string) *manager { return h.servedBy[cluster] }

func (h *harness) logf(format string, args ...any) {
	fmt.Printf("%s [load %s] %s\n", time.Now().Format("15:04:05"), loadavg(), fmt.Sprintf(format, args...))
}

// every runs f every d until the returned stop is called.
func (h *harness) every(ctx context.Context, d time.Duration, f func()) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				f()
			}
		}
	}()
	return func() { cancel(); <-done }
}

func (h *harness) row(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	line := fmt.Sprintf(format, args...)
	h.report = append(h.report, line)
	fmt.Println(line)
}

func run(ctx context.Context, o options) (retErr error) {
	binary := o.manager
	if !filepath.IsAbs(binary) {
		binary = filepath.Join(o.repoRoot, binary)
	}
	binary, _ = filepath.Abs(binary)
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("no manager binary at %s (build it with go build -o bin/manager)", binary)
	}
	// Before anything starts: do the workload API servers fit?
	var memoryPlan string
	if o.clusters > 0 {
		var err error
		if memoryPlan, err = checkMemory(o); err != nil {
			return err
		}
	}
	workDir := o.workDir
	if workDir == "" {
		var err error
		if workDir, err = os.MkdirTemp("", "capi-autoscaler-perf-"); err != nil {
			return err
		}
	}
	logFile, err := os.Create(filepath.Join(os.TempDir(), fmt.Sprintf("capi-autoscaler-perf-%d.log", os.Getpid())))
	if err != nil {
		return err
	}
	defer logFile.Close()
	ctx = simcluster.SetLogger(ctx, logFile, 1)

	h := &harness{opts: o, workDir: workDir}
	h.logf("starting the local stack in %s", workDir)
	stack, err := localstack.Start(ctx, localstack.Options{Topology: localstack.SelfHosted, RepoRoot: o.repoRoot, WorkDir: filepath.Join(workDir, "stack")})
	if err != nil {
		return err
	}
	defer func() {
		h.logf("stopping the stack")
		retErr = errors.Join(retErr, stack.Stop())
		retErr = errors.Join(retErr, h.write())
	}()
	scheme, err := simcluster.NewScheme()
	if err != nil {
		return err
	}
	cfg := *stack.Management.Config
	cfg.QPS, cfg.Burst = 2000, 4000
	if h.mgmt, err = client.NewWithWatch(&cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if err := h.mgmt.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}

	managerCfg, err := clientcmd.BuildConfigFromFlags("", stack.Management.KubeconfigPath)
	if err != nil {
		return fmt.Errorf("the management kubeconfig: %w", err)
	}
	managementServer, err := url.Parse(managerCfg.Host)
	if err != nil {
		return fmt.Errorf("the management API server's address: %w", err)
	}
	h.managementHost = managementServer.Host
	h.apiServer = stack.Management.Config

	h.header(binary)
	if memoryPlan != "" {
		h.row("| memory plan | %s | | load %s |", memoryPlan, loadavg())
	}
	clusters := []string{"perf"}
	if o.clusters > 0 {
		clusters = nil
		for i := 0; i < o.clusters; i++ {
			clusters = append(clusters, fmt.Sprintf("perf-%02d", i))
		}
	}
	h.planManagers(clusters)
	// In multi-cluster mode, each Cluster's kubeconfig Secret is created
	// before the Cluster, pointing at its own API server: the simulated
	// control plane only writes one when it is missing.
	var workloads map[string]*workloadCluster
	if o.clusters > 0 {
		if workloads, err = h.startWorkloads(ctx, stack, clusters); err != nil {
			return err
		}
	}
	for _, c := range clusters {
		if err := h.createCluster(ctx, c, 100); err != nil {
			return err
		}
	}
	h.logf("%d Cluster(s) provisioned", len(clusters))
	if o.groups > 0 {
		started := time.Now()
		if err := h.createGroups(ctx, clusters[0], o.groups); err != nil {
			return err
		}
		h.row("| %d more node groups at zero, with their MachineSets | created in %s | zones × sizes × teams | load %s |", o.groups, time.Since(started).Round(time.Second), loadavg())
	}

	for _, m := range h.managers {
		if err := h.startManager(ctx, stack, binary, m); err != nil {
			return err
		}
	}
	h.row("| manager started, no ClusterAutoscaler | RSS %s | | load %s |", h.managersRSS(), loadavg())

	if o.spread {
		return h.spread(ctx, stack, binary, clusters, workloads)
	}
	if o.clusters > 0 {
		return h.multi(ctx, clusters, workloads)
	}
	for _, c := range clusters {
		if err := h.mgmt.Create(ctx, clusterAutoscaler(c, h.managerOf(c).watchFilter)); err != nil {
			return err
		}
	}
	for _, size := range o.sizes {
		if err := h.size(ctx, "perf", size); err != nil {
			return err
		}
	}
	return nil
}

// planManagers names the managers and splits the Clusters between them in
// contiguous, disjoint blocks: with several, each gets a --watch-filter
// value, which its Clusters and ClusterAutoscalers carry as their
// cluster.x-k8s.io/watch-filter label.
func (h *harness) planManagers(clusters []string) {
	n := h.opts.managers
	h.servedBy = map[string]*manager{}
	for i := 0; i < n; i++ {
		m := &manager{name: simcluster.ManagerProcess}
		if h.opts.spread {
			m.name += fmt.Sprintf("-%d", i)
			h.managers = append(h.managers, m)
			continue
		}
		if n > 1 {
			m.watchFilter = fmt.Sprintf("shard-%d", i)
			m.name += "-" + m.watchFilter
		}
		h.managers = append(h.managers, m)
	}
	if h.opts.spread {
		// Served by whichever holds the Cluster's Lease.
		h.servedBy = nil
		return
	}
	for i, c := range clusters {
		m := h.managers[i*n/len(clusters)]
		m.clusters = append(m.clusters, c)
		h.servedBy[c] = m
	}
}

// startManager starts m and waits until it serves its metrics. In the
// multi-cluster mode every manager runs with leader election, as its
// Deployment would, on a Lease of its own.
func (h *harness) startManager(ctx context.Context, stack *localstack.Stack, binary string, m *manager) error {
	var err error
	if m.metricsAddress, err = simcluster.FreeLocalAddress(); err != nil {
		return err
	}
	if m.profilerAddress, err = simcluster.FreeLocalAddress(); err != nil {
		return err
	}
	args := []string{"--profiler-address=" + m.profilerAddress}
	if m.watchFilter != "" {
		args = append(args, "--watch-filter="+m.watchFilter)
	}
	switch {
	case h.opts.spread:
		args = append(args, "--spread-clusters", "--leader-election-id="+spreadGroup, "--leader-election-namespace="+namespace)
	case h.opts.clusters > 0:
		args = append(args, "--leader-elect", "--leader-election-id="+m.name, "--leader-election-namespace="+namespace)
	}
	process, err := simcluster.StartNamedManager(ctx, stack, m.name, binary, m.metricsAddress, args...)
	if err != nil {
		return fmt.Errorf("starting manager %s: %w", m.name, err)
	}
	m.process, m.log, m.pid = process, process.LogPath(), process.Pid()
	// Wait for the manager to serve its metrics before reading its memory.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := goMemory(ctx, m.metricsAddress)
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("manager %s serves no metrics (log %s): %w", m.name, m.log, err)
	}
	return nil
}

// managersRSS is the RSS of the manager, or of each manager and their sum.
func (h *harness) managersRSS() string {
	var parts []string
	total := 0.0
	for _, m := range h.managers {
		rss, _ := rssMiB(m.pid)
		total += rss
		parts = append(parts, fmt.Sprintf("%.0f", rss))
	}
	if len(parts) == 1 {
		return fmt.Sprintf("%.0f MiB", total)
	}
	return fmt.Sprintf("%.0f MiB (%s)", total, strings.Join(parts, " + "))
}

func (h *harness) header(managerBinary string) {
	host, _ := os.Hostname()
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		mem = strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(b), "\n", 2)[0], "MemTotal:"))
	}
	cpus := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strconv.Itoa(strings.Count(string(b), "processor\t:"))
	}
	h.row("Run %s on %s: %s CPUs, %s memory, load at start %s. Command: `go run ./hack/perf %s`. Manager: %s (%s).",
		time.Now().Format(time.RFC3339), host, cpus, mem, loadavg(), strings.Join(os.Args[1:], " "), managerBinary, revision(managerBinary))
	h.row("")
	h.row("| measurement | result | detail | load (1/5/15 min) |")
	h.row("| --- | --- | --- | --- |")
}

// revision is the commit a Go binary was built from, as `go build` stamps
// it in a git checkout, so that runs of older managers say which.
func revision(binary string) string {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return "no build information: " + err.Error()
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	commit, ok := settings["vcs.revision"]
	if !ok {
		return "no commit stamped"
	}
	if settings["vcs.modified"] == "true" {
		return "commit " + commit[:min(12, len(commit))] + " with local changes"
	}
	return "commit " + commit[:min(12, len(commit))]
}

func (h *harness) write() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return os.WriteFile(h.opts.out, []byte(strings.Join(h.report, "\n")+"\n"), 0o644)
}

// waitLoops waits until the cluster's engine has run n more loops.
func (h *harness) waitLoops(ctx context.Context, cluster string, n uint64) error {
	key := [2]string{namespace + "/" + cluster, "main"}
	var start uint64
	first := true
	return wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := scrape(ctx, h.managerOf(cluster).metricsAddress)
		if err != nil {
			return pollAgain(err)
		}
		if first {
			start, first = m.loops[key].count, false
		}
		return m.loops[key].count >= start+n, nil
	})
}

// size grows the cluster to size nodes and measures.
func (h *harness) size(ctx context.Context, cluster string, size int) error {
	o := h.opts
	pool := min(int(float64(size)*o.poolFraction+0.5), o.poolMax)
	static := size - pool
	h.logf("=== %d nodes: %d static, %d in md-pool, %d pods per node", size, static, pool, o.podsPerNode)
	started := time.Now()
	if err := h.populate(ctx, cluster, static, pool, o.podsPerNode, "static-"); err != nil {
		return err
	}
	h.row("| %d nodes (%d static + %d md-pool), %d pods: populated | %s | | load %s |", size, static, pool, size*o.podsPerNode, time.Since(started).Round(time.Second), loadavg())
	if err := h.waitLoops(ctx, cluster, 2); err != nil {
		return fmt.Errorf("the engine runs no loops: %w", err)
	}
	// Idle loops.
	key := func(f string) [2]string { return [2]string{namespace + "/" + cluster, f} }
	m := h.managerOf(cluster)
	before, err := scrape(ctx, m.metricsAddress)
	if err != nil {
		return err
	}
	requestsBefore, err := h.apiRequests(ctx)
	if err != nil {
		return err
	}
	// The idle window is a CPU profile of the manager.
	cpuProfile := filepath.Join(h.workDir, fmt.Sprintf("cpu-%d-nodes.pb.gz", size))
	if err := saveProfile(ctx, m.profilerAddress, fmt.Sprintf("profile?seconds=%d", int(o.idle.Seconds())), cpuProfile); err != nil {
		return fmt.Errorf("profiling the idle manager: %w", err)
	}
	after, err := scrape(ctx, m.metricsAddress)
	if err != nil {
		return err
	}
	requestsAfter, err := h.apiRequests(ctx)
	if err != nil {
		return err
	}
	load := loadavg()
	rss, _ := rssMiB(m.pid)
	memory, err := goMemory(ctx, m.metricsAddress)
	if err != nil {
		memory = err.Error()
	}
	heapProfile := filepath.Join(h.workDir, fmt.Sprintf("heap-%d-nodes.pb.gz", size))
	if err := saveProfile(ctx, m.profilerAddress, "heap", heapProfile); err != nil {
		return fmt.Errorf("profiling the manager's heap: %w", err)
	}
	h.row("| %d nodes: loop, nothing to change | %s | over %s; refresh %s | load %s |", size, diff(before.loops[key("main")], after.loops[key("main")]), o.idle, diff(before.loops[key("refresh")], after.loops[key("refresh")]), load)
	h.row("| %d nodes: scale-down planning (%d underutilized) | %s | unneeded nodes in status: %s | load %s |", size, pool,
		diff(before.loops[key("scaleDown")], after.loops[key("scaleDown")]), h.gauge(ctx, "cluster_autoscaler_unneeded_nodes_count", cluster), load)
	h.row("| %d nodes: requests to the management API server, idle | manager: %s | Cluster API kinds, all clients, per minute: %s | load %s |", size,
		managerRequests(before, after, h.managementHost, o.idle), requestRates(requestsBefore, requestsAfter, o.idle), load)
	h.row("| %d nodes, %d pods: manager RSS | %.0f MiB | %s; profiles %s, %s | load %s |", size, size*o.podsPerNode, rss, memory, filepath.Base(heapProfile), filepath.Base(cpuProfile), load)

	for _, batch := range o.batches {
		trials := o.trials
		if batch >= 1000 {
			trials = o.largeTrials
		}
		if err := h.trials(ctx, cluster, size, batch, trials); err != nil {
			return err
		}
	}
	return nil
}

// gauge is the value of a metric of the cluster, as text.
func (h *harness) gauge(ctx context.Context, name, cluster string) string {
	body, err := get(ctx, h.managerOf(cluster).metricsAddress, "/metrics")
	if err != nil {
		return "?"
	}
	defer body.Close()
	text, _ := io.ReadAll(body)
	for _, line := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, `cluster="`+namespace+"/"+cluster+`"`) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return "?"
}

type trialResult struct {
	// fromTransition is from the earliest lastTransitionTime (whole
	// seconds, truncated) to the replicas change seen by the watch;
	// fromObserved from the first Unschedulable pod the harness's watch saw.
	fromTransition, fromObserved time.Duration
	// logLag is from the manager's "Scaled up node group" log line to the
	// harness seeing the change (negative: the log came first).
	logLag   time.Duration
	haveLog  bool
	replicas int32
}

func (h *harness) trials(ctx context.Context, cluster string, size, batch, trials int) error {
	h.logf("--- %d nodes: %d trials of %d pending pods", size, trials, batch)
	key := [2]string{namespace + "/" + cluster, "main"}
	upKey := [2]string{namespace + "/" + cluster, "scaleUp"}
	m := h.managerOf(cluster)
	before, err := scrape(ctx, m.metricsAddress)
	if err != nil {
		return err
	}
	requestsBefore, err := h.apiRequests(ctx)
	if err != nil {
		return err
	}
	started := time.Now()
	// A CPU profile of the manager over the first minute of the trials
	// tells where a scale-up's CPU goes.
	profiled := make(chan error, 1)
	cpuProfile := filepath.Join(h.workDir, fmt.Sprintf("cpu-%d-nodes-batch-%d-trials.pb.gz", size, batch))
	go func() { profiled <- saveProfile(ctx, m.profilerAddress, "profile?seconds=60", cpuProfile) }()
	var results []trialResult
	peakRSS := 0.0
	for t := 0; t < trials; t++ {
		r, err := h.trial(ctx, cluster, fmt.Sprintf("s%d-b%d-t%d", size, batch, t), batch)
		if err != nil {
			h.logf("trial %d failed: %v", t, err)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			continue
		}
		if rss, err := rssMiB(m.pid); err == nil && rss > peakRSS {
			peakRSS = rss
		}
		h.logf("trial %d: %s from lastTransitionTime, %s from first Unschedulable seen, replicas %d, log %s before (found %v)",
			t, r.fromTransition.Round(time.Millisecond), r.fromObserved.Round(time.Millisecond), r.replicas, (-r.logLag).Round(time.Millisecond), r.haveLog)
		results = append(results, r)
	}
	after, err := scrape(ctx, m.metricsAddress)
	if err != nil {
		return err
	}
	requestsAfter, err := h.apiRequests(ctx)
	if err != nil {
		return err
	}
	window := time.Since(started)
	load := loadavg()
	if err := <-profiled; err != nil {
		return fmt.Errorf("profiling the manager during the trials: %w", err)
	}
	h.row("| %d nodes, batch %d: requests to the management API server during the trials | manager: %s | Cluster API kinds, all clients (the harness resets md-burst's replicas after each trial), per minute over %s: %s | load %s |", size, batch,
		managerRequests(before, after, h.managementHost, window), window.Round(time.Second), requestRates(requestsBefore, requestsAfter, window), load)
	if len(results) == 0 {
		h.row("| %d nodes, batch %d: scale-up latency | all trials failed | | load %s |", size, batch, load)
		return nil
	}
	var tr, ob, lg []time.Duration
	logs := 0
	for _, r := range results {
		tr, ob = append(tr, r.fromTransition), append(ob, r.fromObserved)
		if r.haveLog {
			lg = append(lg, r.logLag)
			logs++
		}
	}
	slices.Sort(tr)
	slices.Sort(ob)
	slices.Sort(lg)
	h.row("| %d nodes, batch %d: scale-up latency (%d trials) | p50 %s, p99 %s | from first Unschedulable seen by a watch: p50 %s, p99 %s; manager's scale-up log line precedes the watch by p50 %s (%d/%d found); first raise to %d | load %s |",
		size, batch, len(results),
		tr[len(tr)/2].Round(time.Millisecond), percentile(tr, 99).Round(time.Millisecond),
		ob[len(ob)/2].Round(time.Millisecond), percentile(ob, 99).Round(time.Millisecond),
		func() time.Duration {
			if len(lg) == 0 {
				return 0
			}
			return lg[len(lg)/2].Round(time.Millisecond)
		}(), logs, len(results), results[len(results)-1].replicas, load)
	// The CPU the manager used tells its own cost from its waits for a
	// core or for the API servers, which a loaded machine makes long.
	loops := diff(before.loops[key], after.loops[key])
	cpu := after.cpuSeconds - before.cpuSeconds
	h.row("| %d nodes, batch %d: loops during the trials | %s | scaleUp step %s; manager CPU %.2f s (%s per loop); peak RSS %.0f MiB | load %s |", size, batch,
		loops, diff(before.loops[upKey], after.loops[upKey]), cpu, perLoop(cpu, loops.count), peakRSS, load)
	return nil
}

// trial creates batch pending pods for md-burst, waits until its replicas
// are raised, then deletes the pods and resets the replicas.
func (h *harness) trial(ctx context.Context, cluster, id string, batch int) (r trialResult, retErr error) {
	mdName := cluster + "-" + burstMD
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	md := &clusterv1.MachineDeployment{}
	if err := h.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mdName}, md); err != nil {
		return r, err
	}
	if ptr.Deref(md.Spec.Replicas, 0) != 0 {
		return r, fmt.Errorf("%s has %d replicas before the trial", mdName, *md.Spec.Replicas)
	}
	defer func() {
		if retErr != nil && ctx.Err() == nil {
			if err := h.reset(ctx, mdName, id); err != nil {
				h.logf("reset after a failed trial failed: %v", err)
			}
		}
	}()

	// Watch the MachineDeployment and the batch's pods from now on.
	mdWatch, err := h.mgmt.Watch(ctx, &clusterv1.MachineDeploymentList{}, client.InNamespace(namespace), client.MatchingFields{"metadata.name": mdName})
	if err != nil {
		return r, err
	}
	defer mdWatch.Stop()
	podWatch, err := h.mgmt.Watch(ctx, &corev1.PodList{}, client.InNamespace(namespace), client.MatchingLabels{batchLabel: id})
	if err != nil {
		return r, err
	}
	defer podWatch.Stop()
	firstSeen := make(chan time.Time, 1)
	go func() {
		for ev := range podWatch.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && isUnschedulable(p) {
				select {
				case firstSeen <- time.Now():
				default:
				}
				return
			}
		}
	}()

	owner, err := h.owner(ctx, "owner-"+id)
	if err != nil {
		return r, err
	}
	start := time.Now()
	createCtx, stopCreating := context.WithCancel(ctx)
	createDone := make(chan error, 1)
	go func() {
		createDone <- parallel(createCtx, batch, 32, func(ctx context.Context, i int) error {
			p := pod(fmt.Sprintf("%s-%d", id, i), owner, map[string]string{batchLabel: id}, "", "200m", "256Mi", map[string]string{poolLabel: "burst"})
			return h.mgmt.Create(ctx, p)
		})
	}()

	// Wait for the raise.
	var raisedAt time.Time
	for raisedAt.IsZero() {
		select {
		case <-ctx.Done():
			stopCreating()
			return r, fmt.Errorf("no scale-up: %w", ctx.Err())
		case ev, ok := <-mdWatch.ResultChan():
			if !ok {
				stopCreating()
				return r, errors.New("MachineDeployment watch closed")
			}
			if md, ok := ev.Object.(*clusterv1.MachineDeployment); ok && ptr.Deref(md.Spec.Replicas, 0) > 0 {
				raisedAt, r.replicas = time.Now(), *md.Spec.Replicas
			}
		}
	}
	select {
	case t := <-firstSeen:
		r.fromObserved = raisedAt.Sub(t)
	default:
		r.fromObserved = -1
	}
	// Let the creation finish (a 5,000-pod batch takes a while) so that
	// all pods are deleted.
	createErr := <-createDone
	stopCreating()

	// Earliest lastTransitionTime of PodScheduled=False.
	pods := &corev1.PodList{}
	if err := h.mgmt.List(ctx, pods, client.InNamespace(namespace), client.MatchingLabels{batchLabel: id}); err != nil {
		return r, err
	}
	var earliest time.Time
	for i := range pods.Items {
		if c := podScheduledFalse(&pods.Items[i]); c != nil && (earliest.IsZero() || c.LastTransitionTime.Time.Before(earliest)) {
			earliest = c.LastTransitionTime.Time
		}
	}
	if !earliest.IsZero() {
		r.fromTransition = raisedAt.Sub(earliest)
	}
	if logTimes := scaledUpLogTimes(h.managerOf(cluster).log, mdName, start.Add(-time.Second)); len(logTimes) > 0 {
		r.haveLog, r.logLag = true, raisedAt.Sub(logTimes[0])
	}

	if err := h.reset(ctx, mdName, id); err != nil {
		return r, err
	}
	if earliest.IsZero() && createErr != nil {
		return r, fmt.Errorf("no pod was marked unschedulable: creating the batch: %w", createErr)
	}
	if earliest.IsZero() {
		return r, errors.New("no pod was marked unschedulable")
	}
	// Let the engine see the reset before the next trial.
	time.Sleep(2 * time.Second)
	return r, nil
}

// reset deletes a batch's pods and sets md-burst back to 0 replicas, and
// waits until no Machine, no pod of the batch is left.
func (h *harness) reset(ctx context.Context, mdName, id string) error {
	// A deletecollection of 5,000 pods can time out on a loaded API
	// server: then the pods are deleted one by one.
	if err := h.mgmt.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(namespace), client.MatchingLabels{batchLabel: id}, client.GracePeriodSeconds(0)); err != nil {
		h.logf("deleting the batch at once failed (%v); deleting pod by pod", err)
		left := &metav1.PartialObjectMetadataList{}
		left.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := h.mgmt.List(ctx, left, client.InNamespace(namespace), client.MatchingLabels{batchLabel: id}); err != nil {
			return err
		}
		if err := parallel(ctx, len(left.Items), 32, func(ctx context.Context, i int) error {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: left.Items[i].Name}}
			return client.IgnoreNotFound(h.mgmt.Delete(ctx, p, client.GracePeriodSeconds(0)))
		}); err != nil {
			return err
		}
	}
	if err := h.setReplicas(ctx, mdName, 0); err != nil {
		return err
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		machines := &clusterv1.MachineList{}
		if err := h.mgmt.List(ctx, machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.MachineDeploymentNameLabel: mdName}); err != nil {
			return pollAgain(err)
		}
		left := &metav1.PartialObjectMetadataList{}
		left.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
		if err := h.mgmt.List(ctx, left, client.InNamespace(namespace), client.MatchingLabels{batchLabel: id}); err != nil {
			return pollAgain(err)
		}
		md := &clusterv1.MachineDeployment{}
		if err := h.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: mdName}, md); err != nil {
			return pollAgain(err)
		}
		return len(machines.Items) == 0 && len(left.Items) == 0 && ptr.Deref(md.Spec.Replicas, 0) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	return nil
}

func podScheduledFalse(p *corev1.Pod) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c
		}
	}
	return nil
}

func isUnschedulable(p *corev1.Pod) bool { return p.Spec.NodeName == "" && podScheduledFalse(p) != nil }

// multi measures the managers serving many Clusters, each with its own
// workload API server, idle and then, with --churn, under pod churn.
func (h *harness) multi(ctx context.Context, clusters []string, workloads map[string]*workloadCluster) error {
	o := h.opts
	pods := o.nodesPerCluster * o.podsPerNode
	started := time.Now()
	for _, c := range clusters {
		if err := h.populateWorkload(ctx, workloads[c], o.nodesPerCluster, o.podsPerNode); err != nil {
			return fmt.Errorf("populating the workload cluster of %s: %w", c, err)
		}
	}
	h.row("| %d Clusters, each on its own API server: %d static nodes and %d pods each populated | %s | | load %s |", len(clusters), o.nodesPerCluster, pods, time.Since(started).Round(time.Second), loadavg())
	h.row("| workload API servers, populated | %s | %s; MemAvailable %s | load %s |", workloadRSS(workloads, clusters), h.workloadTuning(), memAvailableText(), loadavg())
	h.row("| before any ClusterAutoscaler | RSS %s | | load %s |", h.managersRSS(), loadavg())
	for i, c := range clusters {
		if err := h.mgmt.Create(ctx, clusterAutoscaler(c, h.managerOf(c).watchFilter)); err != nil {
			return err
		}
		if i == 0 || i+1 == len(clusters) || (i+1)%5 == 0 {
			if err := h.waitLoops(ctx, c, 1); err != nil {
				return err
			}
			h.row("| %d ClusterAutoscaler(s) | RSS %s | each cache holds only its own cluster's %d nodes and %d pods | load %s |", i+1, h.managersRSS(), o.nodesPerCluster, pods, loadavg())
		}
	}
	for _, c := range clusters {
		if err := h.waitLoops(ctx, c, 1); err != nil {
			return err
		}
	}
	before, err := h.scrapeManagers(ctx)
	if err != nil {
		return err
	}
	workloadCPUBefore := workloadCPUSeconds(workloads, clusters)
	time.Sleep(o.idle)
	after, err := h.scrapeManagers(ctx)
	if err != nil {
		return err
	}
	workloadCPU := (workloadCPUSeconds(workloads, clusters) - workloadCPUBefore) / o.idle.Seconds()
	if err := h.checkDisjoint(after); err != nil {
		return err
	}
	idle := diff(h.loops(before, clusters), h.loops(after, clusters))
	var memory []string
	var profiles []string
	for _, m := range h.managers {
		stats, err := goMemory(ctx, m.metricsAddress)
		if err != nil {
			stats = err.Error()
		}
		memory = append(memory, stats)
		profile := filepath.Join(h.workDir, fmt.Sprintf("heap-%d-clusters-%s.pb.gz", len(clusters), m.name))
		if err := saveProfile(ctx, m.profilerAddress, "heap", profile); err != nil {
			return fmt.Errorf("profiling the heap of manager %s: %w", m.name, err)
		}
		profiles = append(profiles, filepath.Base(profile))
	}
	h.row("| %d Clusters: idle loops (all engines) | %s | over %s; the workload API servers used %.2f CPU s/s in all | load %s |", len(clusters), idle, o.idle, workloadCPU, loadavg())
	h.row("| %d Clusters: manager RSS after %s | %s | %s; profiles %s | load %s |", len(clusters), o.idle, h.managersRSS(), strings.Join(memory, "; "), strings.Join(profiles, ", "), loadavg())
	if o.churn.window > 0 {
		return h.churnWindow(ctx, clusters, workloads)
	}
	return nil
}

// scrapeManagers reads the metrics of every manager.
func (h *harness) scrapeManagers(ctx context.Context) (map[*manager]managerMetrics, error) {
	out := map[*manager]managerMetrics{}
	for _, m := range h.managers {
		metrics, err := scrape(ctx, m.metricsAddress)
		if err != nil {
			return nil, fmt.Errorf("reading the metrics of manager %s: %w", m.name, err)
		}
		out[m] = metrics
	}
	return out, nil
}

// checkDisjoint fails when a manager runs the engine of a Cluster that is
// not its own: its --watch-filter let another manager's objects through.
func (h *harness) checkDisjoint(metrics map[*manager]managerMetrics) error {
	for m, mm := range metrics {
		for key := range mm.loops {
			cluster := strings.TrimPrefix(key[0], namespace+"/")
			owner := h.managerOf(cluster)
			if key[1] != "main" || owner == m {
				continue
			}
			if owner == nil {
				return fmt.Errorf("manager %s runs the engine of %s, which the harness did not create", m.name, cluster)
			}
			return fmt.Errorf("manager %s runs the engine of %s, which is %s's", m.name, cluster, owner.name)
		}
	}
	return nil
}

// loops sums the loop durations of clusters, each read from the metrics
// of its manager.
func (h *harness) loops(metrics map[*manager]managerMetrics, clusters []string) histogram {
	var hs []histogram
	for _, c := range clusters {
		hs = append(hs, metrics[h.managerOf(c)].loops[[2]string{namespace + "/" + c, "main"}])
	}
	return sumHistograms(hs...)
}

// pollAgain keeps a poll going after a read error: the API server of a
// loaded local stack times out now and then, and the poll's own timeout
// bounds how long that may last.
func pollAgain(error) (bool, error) {
	return false, nil
}

// perLoop is seconds shared over n loops.
func perLoop(seconds float64, n uint64) time.Duration {
	if n == 0 {
		return 0
	}
	return time.Duration(seconds / float64(n) * float64(time.Second)).Round(time.Millisecond)
}
