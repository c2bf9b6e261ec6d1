package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/soak"
	"github.com/capi-autoscaler/capi-autoscaler/internal/controller"
)

// spreadGroup is the --leader-election-id of the managers that spread the
// Clusters: the label of their membership Leases.
const spreadGroup = "perf-replicas"

// spreadTimeout bounds each phase of the spread measurement.
const spreadTimeout = 5 * time.Minute

// spread measures --spread-clusters: how the Clusters spread over the
// managers, how long the Clusters of a killed (SIGKILL) manager take to be
// served again, how long the share takes to settle once it is started
// again, and, by each Cluster's invariant watcher (soak.Managers, reading
// the managers' logs), that no Cluster had engines in two managers at once.
func (h *harness) spread(ctx context.Context, stack *localstack.Stack, binary string, clusters []string, workloads map[string]*workloadCluster) error {
	o := h.opts
	for _, c := range clusters {
		if err := h.populateWorkload(ctx, workloads[c], o.nodesPerCluster, o.podsPerNode); err != nil {
			return fmt.Errorf("populating the workload cluster of %s: %w", c, err)
		}
	}
	watchers := map[string]*soak.Managers{}
	for _, c := range clusters {
		watchers[c] = &soak.Managers{ClusterAutoscaler: types.NamespacedName{Namespace: namespace, Name: c}, Cluster: c}
		for _, m := range h.managers {
			watchers[c].Add(m.process)
		}
	}
	share := (len(clusters) + len(h.managers) - 1) / len(h.managers)

	created := time.Now()
	for _, c := range clusters {
		if err := h.mgmt.Create(ctx, clusterAutoscaler(c, "")); err != nil {
			return err
		}
	}
	served, err := h.waitServed(ctx, clusters, h.managers, share, nil)
	if err != nil {
		return fmt.Errorf("spreading %d Clusters over %d managers: %w", len(clusters), len(h.managers), err)
	}
	h.row("| %d Clusters over %d managers (--spread-clusters): every engine looping | %s after the ClusterAutoscalers were created | Clusters per manager %s (share %d) | load %s |",
		len(clusters), len(h.managers), time.Since(created).Round(100*time.Millisecond), h.shares(served), share, loadavg())

	// The share settled: a Lease duration more, and it has not moved.
	if err := sleep(ctx, controller.DefaultClusterLeaseTimings.LeaseDuration); err != nil {
		return err
	}
	steady, err := h.looping(ctx, h.managers)
	if err != nil {
		return err
	}
	h.row("| the same, %s later | | Clusters per manager %s | load %s |", controller.DefaultClusterLeaseTimings.LeaseDuration, h.shares(steady), loadavg())

	var allTaken, allLooping []time.Duration
	for round := 1; round <= o.failovers; round++ {
		taken, looping, err := h.failover(ctx, stack, binary, round, clusters, share, steady, watchers)
		if err != nil {
			return err
		}
		allTaken, allLooping = append(allTaken, taken...), append(allLooping, looping...)
		if steady, err = h.looping(ctx, h.managers); err != nil {
			return err
		}
	}
	slices.Sort(allTaken)
	slices.Sort(allLooping)
	h.row("| %d failovers, %d Clusters taken over in all | Leases taken: min %s, median %s, max %s; engines looping: min %s, median %s, max %s after the kill | | load %s |",
		o.failovers, len(allTaken), roundDuration(percentile(allTaken, 0)), roundDuration(percentile(allTaken, 50)), roundDuration(percentile(allTaken, 100)),
		roundDuration(percentile(allLooping, 0)), roundDuration(percentile(allLooping, 50)), roundDuration(percentile(allLooping, 100)), loadavg())

	// Late lines of the logs: a Lease duration more.
	if err := sleep(ctx, controller.DefaultClusterLeaseTimings.LeaseDuration); err != nil {
		return err
	}
	var violations []string
	for _, c := range clusters {
		found, err := watchers[c].Violations(time.Now())
		if err != nil {
			return err
		}
		violations = append(violations, found...)
	}
	h.row("| invariant watcher (each Cluster's engines in the managers' logs) | %d violations over %d Clusters | no Cluster served by two managers at once, no engine without its Lease, no panic | load %s |",
		len(violations), len(clusters), loadavg())
	if len(violations) > 0 {
		return errors.New(strings.Join(violations, "\n"))
	}
	return nil
}

// looping are the Clusters whose engines loop in each manager: those
// whose loop durations its metrics have.
func (h *harness) looping(ctx context.Context, managers []*manager) (map[*manager][]string, error) {
	served := map[*manager][]string{}
	for _, m := range managers {
		metrics, err := scrape(ctx, m.metricsAddress)
		if err != nil {
			return nil, fmt.Errorf("reading the metrics of manager %s: %w", m.name, err)
		}
		for key, loops := range metrics.loops {
			if key[1] == "main" && loops.count > 0 {
				served[m] = append(served[m], strings.TrimPrefix(key[0], namespace+"/"))
			}
		}
		slices.Sort(served[m])
	}
	return served, nil
}

// waitServed waits until every Cluster's engine loops in exactly one of the
// managers, none serving more than share; seen is told of each Cluster
// served, every 250ms.
func (h *harness) waitServed(ctx context.Context, clusters []string, managers []*manager, share int, seen func(cluster string)) (map[*manager][]string, error) {
	var served map[*manager][]string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, spreadTimeout, true, func(ctx context.Context) (bool, error) {
		var err error
		if served, err = h.looping(ctx, managers); err != nil {
			return pollAgain(err)
		}
		by := map[string]int{}
		for _, cs := range served {
			for _, c := range cs {
				by[c]++
				if seen != nil {
					seen(c)
				}
			}
		}
		for _, c := range clusters {
			if by[c] != 1 {
				return false, nil
			}
		}
		for _, cs := range served {
			if len(cs) > share {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w; last seen %s", err, h.shares(served))
	}
	return served, nil
}

// shares says how many Clusters each manager serves.
func (h *harness) shares(served map[*manager][]string) string {
	var parts []string
	for _, m := range h.managers {
		parts = append(parts, fmt.Sprintf("%s %d", m.name, len(served[m])))
	}
	return strings.Join(parts, ", ")
}

// failover kills (SIGKILL) the manager that serves the most Clusters,
// waits until the others serve its Clusters, starts it again and waits
// until the share settles, and returns how long after the kill each of
// its Clusters' Leases was taken and its engine looped in another.
func (h *harness) failover(ctx context.Context, stack *localstack.Stack, binary string, round int, clusters []string, share int, steady map[*manager][]string, watchers map[string]*soak.Managers) (leaseTaken, looping []time.Duration, _ error) {
	// Kill the manager that serves the most Clusters.
	victim := h.managers[0]
	for _, m := range h.managers {
		if len(steady[m]) > len(steady[victim]) {
			victim = m
		}
	}
	orphans := steady[victim]
	survivors := slices.DeleteFunc(slices.Clone(h.managers), func(m *manager) bool { return m == victim })
	killed := time.Now()
	if err := victim.process.Kill(); err != nil {
		return nil, nil, err
	}
	for _, w := range watchers {
		w.Ended(victim.process, killed, true)
	}
	firstServed := map[string]time.Duration{}
	liveShare := (len(clusters) + len(survivors) - 1) / len(survivors)
	served, err := h.waitServed(ctx, clusters, survivors, liveShare, func(c string) {
		if _, seen := firstServed[c]; !seen {
			firstServed[c] = time.Since(killed)
		}
	})
	if err != nil {
		return nil, nil, fmt.Errorf("taking over the Clusters of %s: %w", victim.name, err)
	}
	for _, c := range orphans {
		lease := &coordinationv1.Lease{}
		if err := h.mgmt.Get(ctx, client.ObjectKey{Namespace: namespace, Name: controller.ClusterLeaseName(c)}, lease); err != nil {
			return nil, nil, err
		}
		if lease.Spec.AcquireTime != nil {
			leaseTaken = append(leaseTaken, lease.Spec.AcquireTime.Sub(killed))
		}
		looping = append(looping, firstServed[c])
	}
	slices.Sort(leaseTaken)
	slices.Sort(looping)
	h.row("| failover %d: %s killed (SIGKILL), serving %d Clusters: its Clusters' Leases taken by the others | min %s, median %s, max %s after the kill | Lease duration %s, retry period %s | load %s |",
		round, victim.name, len(orphans), roundDuration(percentile(leaseTaken, 0)), roundDuration(percentile(leaseTaken, 50)), roundDuration(percentile(leaseTaken, 100)),
		controller.DefaultClusterLeaseTimings.LeaseDuration, controller.DefaultClusterLeaseTimings.RetryPeriod, loadavg())
	h.row("| the same: their engines looping in the others | min %s, median %s, max %s after the kill | Clusters per manager %s (share %d; polled every 250ms) | load %s |",
		roundDuration(percentile(looping, 0)), roundDuration(percentile(looping, 50)), roundDuration(percentile(looping, 100)), h.shares(served), liveShare, loadavg())

	// Start it again: the others give back what is above their share.
	base, _, _ := strings.Cut(victim.name, "-restart")
	restarted := &manager{name: fmt.Sprintf("%s-restart%d", base, round)}
	if err := h.startManager(ctx, stack, binary, restarted); err != nil {
		return nil, nil, err
	}
	for _, w := range watchers {
		w.Add(restarted.process)
	}
	rejoined := time.Now()
	survivors = append(survivors, restarted)
	h.managers = survivors
	served, err = h.waitServed(ctx, clusters, h.managers, share, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("giving Clusters back to %s: %w", restarted.name, err)
	}
	h.row("| failover %d: %s started again as %s: the others give back what is above their share, it takes it | every engine looping %s after its start | Clusters per manager %s (share %d) | load %s |",
		round, victim.name, restarted.name, time.Since(rejoined).Round(100*time.Millisecond), h.shares(served), share, loadavg())

	return leaseTaken, looping, nil
}
