package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

// teamLabel tells the --groups node groups of a zone and size apart, as
// teams' or workloads' pools do.
const teamLabel = "perf.capi-autoscaler.io/team"

var (
	groupZones = []string{"zone-a", "zone-b", "zone-c"}
	// groupSizes are the cores of the groups' nodes, with 4 GiB per core.
	groupSizes = []int{4, 8, 16, 32, 64}
)

// createGroups adds n MachineDeployments at zero to the cluster, zones ×
// sizes × teams (group i: zone i%3, size i/3%5, team i/15), scaling from
// zero (their labels in the capacity annotation), whose machines never
// provision, as md-burst's: they are node groups the engine weighs in
// every loop and every scale-up, which no pending pod of the harness
// selects (they have no pool=burst).
func (h *harness) createGroups(ctx context.Context, cluster string, n int) error {
	h.logf("creating %d node groups at zero", n)
	started := time.Now()
	err := parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		zone, cores, team := groupZones[i%len(groupZones)], groupSizes[i/len(groupZones)%len(groupSizes)], i/(len(groupZones)*len(groupSizes))
		labels := map[string]string{corev1.LabelTopologyZone: zone, teamLabel: fmt.Sprintf("t%02d", team)}
		var capacityLabels []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			capacityLabels = append(capacityLabels, k+"="+labels[k])
		}
		g := simcluster.NodeGroup{
			Namespace: namespace, Name: fmt.Sprintf("%s-g%04d-%s-%dc", cluster, i, zone, cores), Cluster: cluster,
			MinSize: 0, MaxSize: 20, Replicas: ptr.To[int32](0),
			Annotations: map[string]string{"capacity.cluster-autoscaler.kubernetes.io/labels": strings.Join(capacityLabels, ",")},
			CPU:         fmt.Sprint(cores), Memory: fmt.Sprintf("%dGi", 4*cores), Pods: "110",
			NodeLabels: labels, Provisioning: infrav1.ProvisioningHang,
		}
		for _, obj := range []client.Object{g.MachineTemplate(), g.MachineDeployment()} {
			// Cluster API's webhooks answer within 4 s or fail the create,
			// which they do now and then on a loaded machine: try again.
			err := retry.OnError(transientBackoff, isTransient, func() error { return h.mgmt.Create(ctx, obj) })
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Cluster API gives each a MachineSet; the engine lists both.
	return wait.PollUntilContextTimeout(ctx, 5*time.Second, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		sets := &clusterv1.MachineSetList{}
		if err := h.mgmt.List(ctx, sets, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: cluster}); err != nil {
			return pollAgain(err)
		}
		h.logf("  %d MachineSets (%s)", len(sets.Items), time.Since(started).Round(time.Second))
		// md-pool and md-burst have theirs too.
		return len(sets.Items) >= n+2, nil
	})
}

// transientBackoff spaces the attempts of a create that failed with a
// transient error: about half a minute in all.
var transientBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Jitter: 0.1, Steps: 5}

// isTransient tells the errors of an API server or webhook too busy to
// answer in time.
func isTransient(err error) bool {
	return apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err)
}

// apiRequests are the management API server's apiserver_request_total for
// Cluster API's and the simulated provider's kinds, by "VERB
// resource[/subresource]": every client's, the manager's and Cluster
// API's controllers' alike (none other runs while the harness is idle).
func (h *harness) apiRequests(ctx context.Context) (map[string]float64, error) {
	httpClient, err := rest.HTTPClientFor(h.apiServer)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(h.apiServer.Host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	err = eachSample(resp.Body, func(name string, labels map[string]string, value float64) {
		if name != "apiserver_request_total" || !strings.HasSuffix(labels["group"], "cluster.x-k8s.io") {
			return
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += value
	})
	return out, err
}

// requestRates says the requests per minute between two reads of
// apiRequests, the most first.
func requestRates(before, after map[string]float64, window time.Duration) string {
	type rate struct {
		key       string
		perMinute float64
	}
	var rates []rate
	for key, n := range after {
		if d := n - before[key]; d > 0 {
			rates = append(rates, rate{key: key, perMinute: d / window.Minutes()})
		}
	}
	slices.SortFunc(rates, func(a, b rate) int {
		if a.perMinute != b.perMinute {
			if a.perMinute > b.perMinute {
				return -1
			}
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	if len(rates) == 0 {
		return "none"
	}
	var parts []string
	for _, r := range rates {
		parts = append(parts, fmt.Sprintf("%s %.1f", r.key, r.perMinute))
	}
	return strings.Join(parts, ", ")
}

// managerRequests says the manager's requests per minute to the API server
// at host between two reads of its metrics, reads (watches included) and
// writes.
func managerRequests(before, after managerMetrics, host string, window time.Duration) string {
	rate := func(write bool) float64 {
		k := requestKind{host: host, write: write}
		return (after.requests[k] - before.requests[k]) / window.Minutes()
	}
	return fmt.Sprintf("%.1f reads/min, %.1f writes/min", rate(false), rate(true))
}
