package autoscaler_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// expectMetrics compares what the fixture's registry serves on /metrics for
// the named metrics with expected, in the text exposition format.
func (f *fixture) expectMetrics(t *testing.T, expected string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(f.registry, strings.NewReader(expected), names...); err != nil {
		t.Fatal(err)
	}
}

const gpu corev1.ResourceName = "nvidia.com/gpu"

func TestResourceUsageAndLimitsAreExported(t *testing.T) {
	group := &fakeGroup{id: "MachineDeployment/default/md-gpu", max: 10, template: st.Node("template", "4", "16Gi", st.WithAllocatable(gpu, "1"))}
	// Cordoned, so that every pod needs a new node.
	nodes := append(group.addNodes(2, st.WithAllocatable(gpu, "1"), st.Unschedulable()), st.Node("control-plane", "2", "8Gi", st.Unschedulable()))
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("train", 3, "3", "1Gi")...)...)
	limited := autoscaler.DefaultConfig()
	limited.Limits = autoscaler.ResourceLimits{
		MinCores:  4,
		MaxCores:  12,
		MaxMemory: 64 << 30,
		GPUs:      map[corev1.ResourceName]autoscaler.Range{gpu: {Max: 2}},
	}
	f.apply(t, limited)
	names := []string{
		"cluster_autoscaler_cluster_cpu_current_cores", "cluster_autoscaler_cpu_limits_cores",
		"cluster_autoscaler_cluster_memory_current_bytes", "cluster_autoscaler_memory_limits_bytes",
		"cluster_autoscaler_cluster_gpu_current_count", "cluster_autoscaler_gpu_limits_count",
		"cluster_autoscaler_skipped_scale_events_count",
	}

	// 10 cores of 12: no 4-core node fits, and each loop counts the group
	// the cores kept from growing.
	f.runOnce(t)
	f.runOnce(t)
	g := NewWithT(t)
	g.Expect(group.increases).To(BeEmpty())
	f.expectMetrics(t, `
# HELP cluster_autoscaler_cluster_cpu_current_cores Number of cores of the cluster's nodes, the control plane's included, as resourceLimits.cores counts them.
# TYPE cluster_autoscaler_cluster_cpu_current_cores gauge
cluster_autoscaler_cluster_cpu_current_cores{cluster="default/workload"} 10
# HELP cluster_autoscaler_cpu_limits_cores The cluster's minimum and maximum number of cores (resourceLimits.cores), for those set.
# TYPE cluster_autoscaler_cpu_limits_cores gauge
cluster_autoscaler_cpu_limits_cores{cluster="default/workload",direction="maximum"} 12
cluster_autoscaler_cpu_limits_cores{cluster="default/workload",direction="minimum"} 4
# HELP cluster_autoscaler_cluster_memory_current_bytes Memory of the cluster's nodes in bytes, the control plane's included, as resourceLimits.memory counts it.
# TYPE cluster_autoscaler_cluster_memory_current_bytes gauge
cluster_autoscaler_cluster_memory_current_bytes{cluster="default/workload"} 4.294967296e+10
# HELP cluster_autoscaler_memory_limits_bytes The cluster's minimum and maximum memory in bytes (resourceLimits.memory), for those set.
# TYPE cluster_autoscaler_memory_limits_bytes gauge
cluster_autoscaler_memory_limits_bytes{cluster="default/workload",direction="maximum"} 6.8719476736e+10
# HELP cluster_autoscaler_cluster_gpu_current_count Number of GPUs of the cluster's nodes, by resource, for the GPU types of resourceLimits.gpus: an extended resource counts the nodes' capacity, a DRA driver the devices it publishes on them.
# TYPE cluster_autoscaler_cluster_gpu_current_count gauge
cluster_autoscaler_cluster_gpu_current_count{cluster="default/workload",gpu_resource_name="nvidia.com/gpu"} 2
# HELP cluster_autoscaler_gpu_limits_count The cluster's minimum and maximum number of GPUs of a resource (resourceLimits.gpus); a listed resource always has a maximum.
# TYPE cluster_autoscaler_gpu_limits_count gauge
cluster_autoscaler_gpu_limits_count{cluster="default/workload",direction="maximum",gpu_resource_name="nvidia.com/gpu"} 2
# HELP cluster_autoscaler_skipped_scale_events_count Number of times a node group was left out of a scale-up, or cut short, by a cluster-wide limit of resourceLimits while pods no node group helped waited, by limit.
# TYPE cluster_autoscaler_skipped_scale_events_count counter
cluster_autoscaler_skipped_scale_events_count{cluster="default/workload",direction="up",reason="CpuResourceLimit"} 2
cluster_autoscaler_skipped_scale_events_count{cluster="default/workload",direction="up",reason="GpuResourceLimit"} 0
cluster_autoscaler_skipped_scale_events_count{cluster="default/workload",direction="up",reason="MemoryResourceLimit"} 0
`, names...)

	// Without limits the group grows, and the series of the limits go.
	f.apply(t, autoscaler.DefaultConfig())
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{3}))
	f.expectMetrics(t, `
# HELP cluster_autoscaler_cluster_cpu_current_cores Number of cores of the cluster's nodes, the control plane's included, as resourceLimits.cores counts them.
# TYPE cluster_autoscaler_cluster_cpu_current_cores gauge
cluster_autoscaler_cluster_cpu_current_cores{cluster="default/workload"} 10
# HELP cluster_autoscaler_cluster_memory_current_bytes Memory of the cluster's nodes in bytes, the control plane's included, as resourceLimits.memory counts it.
# TYPE cluster_autoscaler_cluster_memory_current_bytes gauge
cluster_autoscaler_cluster_memory_current_bytes{cluster="default/workload"} 4.294967296e+10
`, names...)
}

func TestNodeGroupSeriesFollowTheGroups(t *testing.T) {
	kept := &fakeGroup{id: "MachineDeployment/default/md-kept", min: 1, max: 5, template: templateNode()}
	gone := &fakeGroup{id: "MachineDeployment/default/md-gone", max: 3, template: templateNode()}
	nodes := append(kept.addNodes(2), gone.addNodes(1)...)
	kept.target++ // a third node is on its way
	f := newFixture(t, []*fakeGroup{kept, gone}, objects(nodes)...)
	names := []string{
		"cluster_autoscaler_node_group_min_count", "cluster_autoscaler_node_group_max_count",
		"cluster_autoscaler_node_group_target_count", "cluster_autoscaler_node_group_nodes_count",
		"cluster_autoscaler_node_group_upcoming_count", "cluster_autoscaler_node_group_backoff_status",
		"cluster_autoscaler_node_group_replicas_overwritten_total",
	}

	f.runOnce(t)
	f.expectMetrics(t, `
# HELP cluster_autoscaler_node_group_min_count Minimum number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_min_count gauge
cluster_autoscaler_node_group_min_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone"} 0
cluster_autoscaler_node_group_min_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 1
# HELP cluster_autoscaler_node_group_max_count Maximum number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_max_count gauge
cluster_autoscaler_node_group_max_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone"} 3
cluster_autoscaler_node_group_max_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 5
# HELP cluster_autoscaler_node_group_target_count Target number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_target_count gauge
cluster_autoscaler_node_group_target_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone"} 1
cluster_autoscaler_node_group_target_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 3
# HELP cluster_autoscaler_node_group_nodes_count Number of registered nodes of the node group, by state: ready, unready, or notStarted (registered recently and not ready yet, or still carrying a startup taint).
# TYPE cluster_autoscaler_node_group_nodes_count gauge
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone",state="notStarted"} 0
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone",state="ready"} 1
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone",state="unready"} 0
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="notStarted"} 0
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="ready"} 2
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="unready"} 0
# HELP cluster_autoscaler_node_group_upcoming_count Number of nodes requested for the node group that have not started yet: its target size minus its started nodes.
# TYPE cluster_autoscaler_node_group_upcoming_count gauge
cluster_autoscaler_node_group_upcoming_count{cluster="default/workload",node_group="MachineDeployment/default/md-gone"} 0
cluster_autoscaler_node_group_upcoming_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 1
# HELP cluster_autoscaler_node_group_backoff_status Whether the node group is backing off: 1 yes, 0 no.
# TYPE cluster_autoscaler_node_group_backoff_status gauge
cluster_autoscaler_node_group_backoff_status{cluster="default/workload",node_group="MachineDeployment/default/md-gone",reason=""} 0
cluster_autoscaler_node_group_backoff_status{cluster="default/workload",node_group="MachineDeployment/default/md-kept",reason=""} 0
# HELP cluster_autoscaler_node_group_replicas_overwritten_total Number of times another writer changed a node group's target size after the autoscaler set it.
# TYPE cluster_autoscaler_node_group_replicas_overwritten_total counter
cluster_autoscaler_node_group_replicas_overwritten_total{cluster="default/workload",node_group="MachineDeployment/default/md-gone"} 0
cluster_autoscaler_node_group_replicas_overwritten_total{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 0
`, names...)

	// Another writer sets the replicas of the kept group back, and the
	// other group stops being a node group.
	f.provider.groups = []*fakeGroup{kept}
	f.provider.problems = []nodegroups.Problem{{ID: kept.id, Reason: nodegroups.ReasonReplicasOverwritten, Message: "replicas set to 3 by someone else", Kept: true}}
	f.runOnce(t)
	f.expectMetrics(t, `
# HELP cluster_autoscaler_node_group_min_count Minimum number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_min_count gauge
cluster_autoscaler_node_group_min_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 1
# HELP cluster_autoscaler_node_group_max_count Maximum number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_max_count gauge
cluster_autoscaler_node_group_max_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 5
# HELP cluster_autoscaler_node_group_target_count Target number of nodes in the node group.
# TYPE cluster_autoscaler_node_group_target_count gauge
cluster_autoscaler_node_group_target_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 3
# HELP cluster_autoscaler_node_group_nodes_count Number of registered nodes of the node group, by state: ready, unready, or notStarted (registered recently and not ready yet, or still carrying a startup taint).
# TYPE cluster_autoscaler_node_group_nodes_count gauge
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="notStarted"} 0
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="ready"} 2
cluster_autoscaler_node_group_nodes_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept",state="unready"} 0
# HELP cluster_autoscaler_node_group_upcoming_count Number of nodes requested for the node group that have not started yet: its target size minus its started nodes.
# TYPE cluster_autoscaler_node_group_upcoming_count gauge
cluster_autoscaler_node_group_upcoming_count{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 1
# HELP cluster_autoscaler_node_group_backoff_status Whether the node group is backing off: 1 yes, 0 no.
# TYPE cluster_autoscaler_node_group_backoff_status gauge
cluster_autoscaler_node_group_backoff_status{cluster="default/workload",node_group="MachineDeployment/default/md-kept",reason=""} 0
# HELP cluster_autoscaler_node_group_replicas_overwritten_total Number of times another writer changed a node group's target size after the autoscaler set it.
# TYPE cluster_autoscaler_node_group_replicas_overwritten_total counter
cluster_autoscaler_node_group_replicas_overwritten_total{cluster="default/workload",node_group="MachineDeployment/default/md-kept"} 1
`, names...)
}

func TestBackoffIsLabelledWithItsCause(t *testing.T) {
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	group.target++
	group.instances = append(group.instances, nodegroups.Instance{
		ID: "fake://failed", State: nodegroups.InstanceCreating, Removable: true,
		Error: &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "quota exceeded in zone a at 12:03:07"},
	})
	f := newFixture(t, []*fakeGroup{group}, objects(nodes)...)

	status := f.runOnce(t)

	// The status says why for users; the label has the cause only, so that
	// a message with times or counts makes no new series.
	NewWithT(t).Expect(groupRow(status, group.id).BackoffReason).To(ContainSubstring("quota exceeded in zone a"))
	f.expectMetrics(t, `
# HELP cluster_autoscaler_node_group_backoff_status Whether the node group is backing off: 1 yes, 0 no.
# TYPE cluster_autoscaler_node_group_backoff_status gauge
cluster_autoscaler_node_group_backoff_status{cluster="default/workload",node_group="MachineDeployment/default/md-0",reason="InfrastructureProvisioningFailed"} 1
`, "cluster_autoscaler_node_group_backoff_status")
}

func TestPodsNoGroupCanHelpAreCounted(t *testing.T) {
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1, st.Unschedulable())
	// One pod fits a new node; two are larger than any node of the group.
	pods := append(st.Replicas("web", 1, "3", "1Gi"), st.Replicas("huge", 2, "8", "1Gi")...)
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, pods...)...)

	f.runOnce(t)

	NewWithT(t).Expect(group.increases).To(Equal([]int{1}))
	f.expectMetrics(t, `
# HELP cluster_autoscaler_unschedulable_pods_count Number of unschedulable pods in the cluster.
# TYPE cluster_autoscaler_unschedulable_pods_count gauge
cluster_autoscaler_unschedulable_pods_count{cluster="default/workload",type="unschedulable"} 3
# HELP cluster_autoscaler_no_scale_up_pods_count Number of unschedulable pods that no node group can help: they triggered no scale-up in the last loop that planned one.
# TYPE cluster_autoscaler_no_scale_up_pods_count gauge
cluster_autoscaler_no_scale_up_pods_count{cluster="default/workload"} 2
`, "cluster_autoscaler_unschedulable_pods_count", "cluster_autoscaler_no_scale_up_pods_count")
}

func TestCountersStartAtZeroAndForgetRemovesTheClusterSeries(t *testing.T) {
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	f := newFixture(t, []*fakeGroup{group}, objects(group.addNodes(1))...)

	// Before any loop: a first panic, scale-up or failed loop must show as
	// an increase, which a series that first appears at 1 does not.
	f.expectMetrics(t, `
# HELP cluster_autoscaler_engine_panics_total Number of times the autoscaling loop of the cluster panicked and its engine stopped.
# TYPE cluster_autoscaler_engine_panics_total counter
cluster_autoscaler_engine_panics_total{cluster="default/workload"} 0
# HELP cluster_autoscaler_errors_total Number of errors in the autoscaler loop.
# TYPE cluster_autoscaler_errors_total counter
cluster_autoscaler_errors_total{cluster="default/workload",type="loop"} 0
# HELP cluster_autoscaler_scaled_up_nodes_total Number of nodes added by the autoscaler; with mode="DryRun", those it would have added.
# TYPE cluster_autoscaler_scaled_up_nodes_total counter
cluster_autoscaler_scaled_up_nodes_total{cluster="default/workload",mode="Active"} 0
cluster_autoscaler_scaled_up_nodes_total{cluster="default/workload",mode="DryRun"} 0
`, "cluster_autoscaler_engine_panics_total", "cluster_autoscaler_errors_total", "cluster_autoscaler_scaled_up_nodes_total")

	f.runOnce(t)
	f.metrics.Forget("default/workload")

	families, err := f.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, family := range families {
		if len(family.GetMetric()) > 0 {
			t.Errorf("%s has series after Forget: %v", family.GetName(), family.GetMetric())
		}
	}
}

// A group that refuses to grow for now (a removal pending, say) is not
// failing: it does not back off, and grows in the next loop that plans it.
func TestARefusedIncreaseIsNoFailure(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode(),
		increaseErr: &nodegroups.RefusedError{Reason: "the removal of Machine(s) b is pending"}}
	nodes := group.addNodes(1, st.Unschedulable())
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, st.Replicas("web", 1, "3", "1Gi")...)...)

	status := f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(groupRow(status, group.id).BackoffUntil).To(BeZero(), "no backoff")
	g.Expect(f.groupRecorder.reasons(group.id)).NotTo(ContainElement(autoscaler.EventFailedToScaleUpGroup))

	group.increaseErr = nil
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{1}))
}
