package convert

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

// Why upstream flags map to no field of the ClusterAutoscaler, and what
// takes their place.
const (
	reasonWorkloadConnection = "the workload cluster is reached with the Cluster's kubeconfig Secret <cluster>-kubeconfig, or the Secret of spec.workloadKubeconfigSecretRef"
	reasonManagementCluster  = "the management cluster: the manager runs there and reaches it with its own ServiceAccount"
	reasonClientLimits       = "the manager's --workload-client-qps and --workload-client-burst (20, 30) limit its requests to each workload cluster"
	reasonClusterName        = "not used by the clusterapi provider: the Cluster is named by --node-group-auto-discovery=clusterapi:clusterName=..., or by convert's --cluster-name"
	reasonLogging            = "logging of the upstream process: the manager's logging is set by its own -v and --logging-format flags, and spec.logVerbosity sets the level of this Cluster's loop"
	reasonLeaderElection     = "leader election of the upstream process: the manager elects a leader with its own --leader-elect flags"
	reasonMetrics            = "the manager serves the metrics, under the upstream names with a cluster label and per node group, on its diagnostics endpoint (--diagnostics-address)"
	reasonProfiling          = "the manager's own --profiling flag"
	reasonStatus             = "the status is in the ClusterAutoscaler (kubectl capi-autoscaler status), not in a ConfigMap of the workload cluster"
	reasonHealth             = "the manager's /healthz and /readyz and the Ready condition watch the loops: a loop that does not finish within 2 minutes fails"
	reasonEvents             = "events are recorded by the manager, at most --workload-event-qps per workload cluster"
	reasonDebugging          = "kubectl capi-autoscaler explain shows what the last loop decided, and why"
	reasonOtherCloud         = "specific to another cloud provider: the clusterapi provider ignores it"
	reasonTuning             = "a performance knob of upstream's implementation; capi-autoscaler's engine has none (docs/performance.md)"
	reasonNoSetting          = "capi-autoscaler has no such setting"
	reasonEstimator          = "capi-autoscaler estimates by binpacking, upstream's default estimator"
	reasonGRPCExpander       = "capi-autoscaler has no grpc expander"
	reasonBalancingRatios    = "similar node groups are compared with fixed tolerances: allocatable and free resources within 5%"
	reasonBalancingLabel     = "node groups are compared by capacity and by all labels but zone, hostname and spec.balancingIgnoredLabels; comparing only chosen labels is not possible"
	reasonSchedulerConfig    = "scheduling is simulated with the default scheduler's filters; a scheduler configuration cannot be given"
	reasonDelayDeletion      = "capi-autoscaler does not wait for delay-deletion.cluster-autoscaler.kubernetes.io/ annotations (spec.scaleDown.nodeDeletionTimeout is another timeout: how long a node handed to Cluster API may stay)"
	reasonPodEvictionTime    = "refused evictions are retried for 2m, upstream's default; there is no field for it"
	reasonSystemPodTimeout   = "no such timeout: while spec.scaleDown.skipNodesWithSystemPods is true, kube-system pods without a PodDisruptionBudget keep their node"
	reasonDrainPriority      = "no priority-ordered drain: evicted pods get their own grace period, capped by spec.scaleDown.maxGracefulTerminationSeconds"
	reasonProvisioning       = "capi-autoscaler always answers the ProvisioningRequests of the workload cluster (check-capacity and best-effort-atomic-scale-up)"
	reasonCapacityBuffers    = "capi-autoscaler always keeps room for the CapacityBuffers of the workload cluster"
	reasonFrequentLoops      = "capi-autoscaler always starts a loop soon after a pod turns unschedulable; spec.minLoopInterval bounds how often"
	reasonNodeGroupCreation  = "node groups are never created: they are the annotated MachineDeployments, MachineSets and MachinePools"
	reasonParallelDrain      = "removed upstream: spec.scaleDown.maxDrainParallelism sets how many nodes drain at once"
	reasonScaleDownDelayType = "the scale-down delays apply to the whole cluster"
	reasonGPUThreshold       = "there is no GPU threshold: GPU nodes are measured by cpu and memory, against spec.scaleDown.utilizationThreshold"
	reasonUnreadyScaleDown   = "unready nodes are removed after spec.scaleDown.unreadyTime; there is no switch of its own"
	reasonFeatureGates       = "capi-autoscaler has no feature gates: what it has is always on"
	reasonDaemonSetEviction  = "capi-autoscaler never evicts DaemonSet pods: they go with their node"
)

// unmappedUnless is row, but for values that ask for what capi-autoscaler
// would do the opposite of: those are warnings (--strict fails on them).
func unmappedUnless(row flagMapping, differing string, differs func(c *conversion, value string) string) flagMapping {
	row.differs, row.differing = differs, differing
	return row
}

// neverRemovedUnreadyTime is the nearest capi-autoscaler has to never
// removing unready nodes: a year.
const neverRemovedUnreadyTime = 365 * 24 * time.Hour

// neverRemoveUnready: upstream leaves unready nodes alone; capi-autoscaler
// removes them after spec.scaleDown.unreadyTime, which is set to a year.
func neverRemoveUnready(c *conversion, value string) string {
	if enabled, err := strconv.ParseBool(value); err != nil || enabled {
		return ""
	}
	const field = "spec.scaleDown.unreadyTime"
	if by := c.setBy[field]; by != "" {
		return fmt.Sprintf("upstream never removes unready nodes; capi-autoscaler removes them after %s, which --%s sets", field, by)
	}
	scaleDown(&c.spec).UnreadyTime = &metav1.Duration{Duration: neverRemovedUnreadyTime}
	c.setBy[field] = "scale-down-unready-enabled"
	return fmt.Sprintf("upstream never removes unready nodes; capi-autoscaler removes them after %s, which is set to %s, the nearest it has", field, neverRemovedUnreadyTime)
}

// waitForDelayDeletion: upstream waits, up to the timeout, for the
// delay-deletion annotations of a node to go before deleting it; by
// default too (upstreamDelayDeletionTimeout).
func waitForDelayDeletion(_ *conversion, value string) string {
	if d, err := time.ParseDuration(value); err == nil && d <= 0 {
		return ""
	}
	return "upstream waits, up to " + value + ", for the delay-deletion.cluster-autoscaler.kubernetes.io/ annotations of a node to go before deleting it; " +
		"capi-autoscaler deletes the node once drained, without waiting: whatever those annotations hold the node for (a backup, a log shipper) is not waited for. " +
		"Have what sets them annotate the node with " + scaledown.ScaleDownDisabledAnnotation + "=true instead while it must stay, " +
		"or, if nothing sets them, convert with --node-deletion-delay-timeout=0s"
}

// upstreamDelayDeletionTimeout is upstream's default
// --node-deletion-delay-timeout: leaving the flag out still asks for the
// wait.
const upstreamDelayDeletionTimeout = "2m"

// keepMinReplicas: upstream keeps the pods of a controller with fewer
// replicas than this.
func keepMinReplicas(_ *conversion, value string) string {
	if n, err := strconv.Atoi(value); err == nil && n <= 0 {
		return ""
	}
	return "upstream keeps the nodes of pods whose ReplicaSet or ReplicationController has fewer replicas than this; capi-autoscaler evicts them whatever their count: give such workloads a PodDisruptionBudget (minAvailable), which it respects"
}

// scaleUpToMinSize: upstream raises node groups below their minimum size.
func scaleUpToMinSize(_ *conversion, value string) string {
	if enforced, err := strconv.ParseBool(value); err != nil || !enforced {
		return ""
	}
	return "upstream scales a node group below its minimum size up to it; capi-autoscaler scales up only for pending pods: set the replicas of such MachineDeployments to at least their minimum"
}

func unmapped(flag, reason string) flagMapping {
	return flagMapping{flag: flag, reason: reason}
}

// unmappedWithDefault is unmapped, for a flag whose upstream default
// matters: differs warns of it when the flag is not given
// (warnOfUpstreamDefaults).
func unmappedWithDefault(flag, reason, upstream string) flagMapping {
	return flagMapping{flag: flag, reason: reason, upstream: upstreamDefault{value: upstream}}
}

func unmappedBool(flag, reason string) flagMapping {
	return flagMapping{flag: flag, reason: reason, boolean: true}
}

// unmappedFlags are the upstream flags that map to no field.
func unmappedFlags() []flagMapping {
	return []flagMapping{
		unmapped("kubernetes", reasonWorkloadConnection),
		unmapped("cloud-config", reasonManagementCluster),
		unmappedBool("clusterapi-cloud-config-authoritative", reasonManagementCluster),
		unmapped("kube-api-content-type", reasonClientLimits),
		unmapped("kube-client-burst", reasonClientLimits),
		unmapped("kube-client-qps", reasonClientLimits),
		unmapped("user-agent", reasonNoSetting),
		unmapped("cluster-name", reasonClusterName),

		unmapped("address", reasonMetrics),
		unmappedBool("emit-per-nodegroup-metrics", reasonMetrics),
		unmappedBool("profiling", reasonProfiling),
		unmappedBool("leader-elect", reasonLeaderElection),
		unmapped("leader-elect-lease-duration", reasonLeaderElection),
		unmapped("leader-elect-renew-deadline", reasonLeaderElection),
		unmapped("leader-elect-retry-period", reasonLeaderElection),
		unmapped("leader-elect-resource-lock", reasonLeaderElection),
		unmappedBool("write-status-configmap", reasonStatus),
		unmapped("max-inactivity", reasonHealth),
		unmapped("max-failing-time", reasonHealth),
		unmappedBool("record-duplicated-events", reasonEvents),
		unmappedBool("debugging-snapshot-enabled", reasonDebugging),
		unmapped("feature-gates", reasonFeatureGates),

		unmappedBool("logtostderr", reasonLogging),
		unmappedBool("alsologtostderr", reasonLogging),
		unmapped("stderrthreshold", reasonLogging),
		unmapped("log-dir", reasonLogging),
		unmapped("log-file", reasonLogging),
		unmapped("log-file-max-size", reasonLogging),
		unmappedBool("skip-headers", reasonLogging),
		unmappedBool("skip-log-headers", reasonLogging),
		unmappedBool("add-dir-header", reasonLogging),
		unmappedBool("one-output", reasonLogging),
		unmapped("log-backtrace-at", reasonLogging),
		unmapped("vmodule", reasonLogging),
		unmapped("logging-format", reasonLogging),
		unmapped("log-flush-frequency", reasonLogging),
		unmapped("log-json-info-buffer-size", reasonLogging),
		unmappedBool("log-json-split-stream", reasonLogging),
		unmapped("log-text-info-buffer-size", reasonLogging),
		unmappedBool("log-text-split-stream", reasonLogging),

		unmapped("estimator", reasonEstimator),
		unmapped("grpc-expander-cert", reasonGRPCExpander),
		unmapped("grpc-expander-url", reasonGRPCExpander),
		unmapped("balancing-label", reasonBalancingLabel),
		unmapped("memory-difference-ratio", reasonBalancingRatios),
		unmapped("max-free-difference-ratio", reasonBalancingRatios),
		unmapped("max-allocatable-difference-ratio", reasonBalancingRatios),
		unmapped("scheduler-config-file", reasonSchedulerConfig),

		unmapped("scale-down-gpu-utilization-threshold", reasonGPUThreshold),
		unmappedUnless(unmappedBool("scale-down-unready-enabled", reasonUnreadyScaleDown), "false", neverRemoveUnready),
		unmappedBool("scale-down-delay-type-local", reasonScaleDownDelayType),
		unmapped("scale-down-non-empty-candidates-count", reasonTuning),
		unmapped("scale-down-candidates-pool-ratio", reasonTuning),
		unmapped("scale-down-candidates-pool-min-count", reasonTuning),
		unmapped("scale-down-simulation-timeout", reasonTuning),
		unmapped("unremovable-node-recheck-timeout", reasonTuning),
		unmapped("node-info-cache-expire-time", reasonTuning),
		unmapped("max-binpacking-time", reasonTuning),
		unmapped("max-nodegroup-binpacking-duration", reasonTuning),
		unmapped("cluster-snapshot-parallelism", reasonTuning),
		unmapped("pod-injection-limit", reasonTuning),
		unmapped("node-deletion-batcher-interval", reasonTuning),
		unmapped("node-deletion-candidate-ttl", reasonTuning),
		unmappedUnless(unmappedWithDefault("node-deletion-delay-timeout", reasonDelayDeletion, upstreamDelayDeletionTimeout), upstreamDelayDeletionTimeout, waitForDelayDeletion),
		unmapped("node-delete-delay-after-taint", reasonNoSetting),
		unmappedBool("dynamic-node-delete-delay-after-taint-enabled", reasonNoSetting),
		unmapped("max-bulk-soft-taint-count", reasonNoSetting),
		unmapped("max-bulk-soft-taint-time", reasonNoSetting),
		unmapped("max-pod-eviction-time", reasonPodEvictionTime),
		unmapped("blocking-system-pod-distruption-timeout", reasonSystemPodTimeout),
		unmapped("drain-priority-config", reasonDrainPriority),
		unmappedBool("daemonset-eviction-for-empty-nodes", reasonNoSetting),
		unmappedBool("daemonset-eviction-for-occupied-nodes", reasonDaemonSetEviction),
		unmappedUnless(unmapped("min-replica-count", reasonNoSetting), "2", keepMinReplicas),
		unmappedBool("ignore-mirror-pods-utilization", reasonNoSetting),
		unmappedBool("parallel-drain", reasonParallelDrain),
		unmappedBool("force-delete-unregistered-nodes", reasonNoSetting),
		unmappedBool("force-delete-failed-nodes", reasonNoSetting),

		unmappedBool("scale-up-from-zero", reasonNoSetting),
		unmappedBool("parallel-scale-up", reasonNoSetting),
		unmappedUnless(unmappedBool("enforce-node-group-min-size", reasonNoSetting), "true", scaleUpToMinSize),
		unmappedBool("force-ds", reasonNoSetting),
		unmapped("bypassed-scheduler-names", reasonNoSetting),
		unmappedBool("enable-proactive-scaleup", reasonNoSetting),
		unmappedBool("enable-dynamic-resource-allocation", reasonNoSetting),
		unmappedBool("node-group-remove-persistent-error-backoff-early", reasonNoSetting),
		unmappedBool("frequent-loops-enabled", reasonFrequentLoops),
		unmappedBool("async-node-groups", reasonNodeGroupCreation),
		unmappedBool("node-autoprovisioning-enabled", reasonNodeGroupCreation),
		unmapped("max-autoprovisioned-node-group-count", reasonNodeGroupCreation),

		unmappedBool("enable-provisioning-requests", reasonProvisioning),
		unmapped("provisioning-request-initial-backoff-time", reasonProvisioning),
		unmapped("provisioning-request-max-backoff-time", reasonProvisioning),
		unmapped("provisioning-request-max-backoff-cache-size", reasonProvisioning),
		unmappedBool("check-capacity-batch-processing", reasonProvisioning),
		unmapped("check-capacity-provisioning-request-max-batch-size", reasonProvisioning),
		unmapped("check-capacity-provisioning-request-batch-timebox", reasonProvisioning),
		unmapped("check-capacity-processor-instance", reasonProvisioning),
		unmappedBool("capacity-buffer-controller-enabled", reasonCapacityBuffers),
		unmappedBool("capacity-buffer-pod-injection-enabled", reasonCapacityBuffers),

		unmappedBool("aws-use-static-instance-list", reasonOtherCloud),
		unmapped("gce-concurrent-refreshes", reasonOtherCloud),
		unmapped("gce-mig-instances-min-refresh-wait-time", reasonOtherCloud),
		unmappedBool("bulk-mig-instances-listing-enabled", reasonOtherCloud),
		unmappedBool("gce-expander-ephemeral-storage-support", reasonOtherCloud),
		unmappedBool("regional", reasonOtherCloud),
	}
}
