package convert

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

// convertTestdata reads a file of testdata/convert.
func convertTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "convert", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testdataInput reads an upstream configuration of testdata/convert: a
// command line (.args), Helm values (*-values.yaml) or a Deployment.
func testdataInput(t *testing.T, name string) convertInput {
	t.Helper()
	data := convertTestdata(t, name)
	var in convertInput
	var err error
	switch {
	case strings.HasSuffix(name, ".args"):
		in.source = name
		in.args, err = splitCommandLine(string(data))
	case strings.HasSuffix(name, "-values.yaml"):
		in, err = readHelmValues([][]byte{data}, []string{name})
	default:
		in, err = readDeployment(data, name, "")
	}
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// withPriorities gives in the priorities of the priority ConfigMap of
// testdata/convert.
func withPriorities(t *testing.T, in convertInput) convertInput {
	t.Helper()
	priorities, err := readPriorityConfigMap(convertTestdata(t, "priority-expander.yaml"), "priority-expander.yaml")
	if err != nil {
		t.Fatal(err)
	}
	in.priorities, in.prioritiesSource = priorities, "the ConfigMap priority-expander.yaml"
	return in
}

func metaDuration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// realConfigurations are upstream configurations as users run them: the
// chart's rendering for Cluster API, hand-written Deployments as the
// clusterapi provider's README and Cluster API's tests write them, and a
// tuned command line.
var realConfigurations = []struct {
	name string
	// input is the upstream configuration.
	input func(t *testing.T) convertInput
	opts  convertOptions
	// want is the ClusterAutoscaler.
	wantName, wantNamespace string
	wantSpec                caSpec
	// wantMapped and wantUnmapped are the flags as written.
	wantMapped, wantUnmapped []string
	wantDefaults             []differingDefault
	wantNodeGroups           []nodeGroupBounds
	// wantWarnings are parts of the warnings, one for each.
	wantWarnings []string
}{
	{
		name:     "the Helm chart's default rendering for cloudProvider clusterapi",
		input:    func(t *testing.T) convertInput { return testdataInput(t, "helm-clusterapi-values.yaml") },
		opts:     convertOptions{mode: autoscalingv1alpha1.DryRunMode},
		wantName: "prod", wantNamespace: "clusters",
		wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode, LogVerbosity: ptr.To[int32](4)},
		wantMapped: []string{
			"--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters",
			"--v=4",
		},
		wantUnmapped: []string{
			"--cloud-provider=clusterapi",
			"--logtostderr=true",
			"--stderrthreshold=info",
		},
		// Where it keeps its Lease and status: capi-autoscaler looks for
		// them there during a switch.
		wantWarnings: []string{"--namespace=<release namespace>: the namespace of the upstream chart's release, which its values do not tell: set spec.upstreamAutoscaler.namespace to it", defaultDelayDeletionWarning},
		wantDefaults: []differingDefault{
			{flag: "cores-total", field: "spec.resourceLimits.cores", upstream: "0:320000", ours: "none"},
			{flag: "memory-total", field: "spec.resourceLimits.memory", upstream: "0:6400000", ours: "none"},
			{flag: "cordon-node-before-terminating", field: "spec.scaleDown.cordonNodeBeforeTerminating", upstream: "true", ours: "false"},
		},
	},
	{
		name:     "a Deployment in the management cluster with the Cluster's kubeconfig Secret",
		input:    func(t *testing.T) convertInput { return testdataInput(t, "management-deployment.yaml") },
		opts:     convertOptions{mode: autoscalingv1alpha1.DryRunMode},
		wantName: "prod", wantNamespace: "clusters",
		wantSpec: caSpec{
			ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
			Expanders:                []autoscalingv1alpha1.Expander{autoscalingv1alpha1.LeastWasteExpander},
			BalanceSimilarNodeGroups: ptr.To(true),
			LogVerbosity:             ptr.To[int32](2),
		},
		wantMapped: []string{
			"--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters",
			"--expander=least-waste",
			"--balance-similar-node-groups",
			"--v=2",
		},
		wantUnmapped: []string{
			"--cloud-provider=clusterapi",
			"--kubeconfig=/mnt/kubeconfig/value",
			"--clusterapi-cloud-config-authoritative",
		},
		// Release 1.32 of the image: it cordoned no nodes either.
		wantDefaults: []differingDefault{
			{flag: "cores-total", field: "spec.resourceLimits.cores", upstream: "0:320000", ours: "none"},
			{flag: "memory-total", field: "spec.resourceLimits.memory", upstream: "0:6400000", ours: "none"},
		},
		wantWarnings: []string{defaultDelayDeletionWarning},
	},
	{
		name:     "a Deployment in the workload cluster with the management cluster's kubeconfig",
		input:    func(t *testing.T) convertInput { return testdataInput(t, "workload-deployment.yaml") },
		opts:     convertOptions{mode: autoscalingv1alpha1.DryRunMode},
		wantName: "prod", wantNamespace: "clusters",
		wantSpec: caSpec{
			ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
			ResourceLimits: &autoscalingv1alpha1.ResourceLimits{MaxNodesTotal: ptr.To[int32](6)},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				UnneededTime: metaDuration(time.Minute), DelayAfterAdd: metaDuration(time.Minute),
				DelayAfterDelete: metaDuration(time.Minute), DelayAfterFailure: metaDuration(time.Minute),
			},
		},
		wantMapped: []string{
			"--node-group-auto-discovery=clusterapi:namespace=clusters,clusterName=prod",
			"--scale-down-unneeded-time=1m",
			"--scale-down-delay-after-add=1m",
			"--scale-down-delay-after-delete=1m",
			"--scale-down-delay-after-failure=1m",
			"--max-nodes-total=6",
		},
		wantUnmapped: []string{
			"--cloud-provider=clusterapi",
			"--cloud-config=/management-cluster/kubeconfig",
		},
		wantDefaults: []differingDefault{
			{flag: "cores-total", field: "spec.resourceLimits.cores", upstream: "0:320000", ours: "none"},
			{flag: "memory-total", field: "spec.resourceLimits.memory", upstream: "0:6400000", ours: "none"},
			{flag: "cordon-node-before-terminating", field: "spec.scaleDown.cordonNodeBeforeTerminating", upstream: "true", ours: "false"},
			{flag: "v", field: "spec.logVerbosity", upstream: "0", ours: "1"},
		},
		wantWarnings: []string{defaultDelayDeletionWarning},
	},
	{
		name:     "a command line with many scale-down and limit flags, and the priority ConfigMap",
		input:    func(t *testing.T) convertInput { return withPriorities(t, testdataInput(t, "tuned.args")) },
		opts:     convertOptions{mode: autoscalingv1alpha1.ActiveMode, name: "prod-autoscaler"},
		wantName: "prod-autoscaler", wantNamespace: "clusters",
		wantSpec: caSpec{
			ClusterName: "prod", Mode: autoscalingv1alpha1.ActiveMode,
			ScanInterval: metaDuration(20 * time.Second),
			Expanders:    []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander, autoscalingv1alpha1.LeastWasteExpander},
			ExpanderPriorities: []autoscalingv1alpha1.ExpanderPriority{
				{Priority: 50, NodeGroupIDPatterns: []string{"MachineDeployment/clusters/prod-md-spot.*", "MachineDeployment/clusters/prod-md-arm.*"}},
				{Priority: 10, NodeGroupIDPatterns: []string{".*"}},
			},
			BalanceSimilarNodeGroups: ptr.To(true),
			BalancingIgnoredLabels:   []string{"topology.ebs.csi.aws.com/zone", "node.kubernetes.io/instance-type"},
			ResourceLimits: &autoscalingv1alpha1.ResourceLimits{
				MaxNodesTotal: ptr.To[int32](100),
				Cores:         &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](8), Max: ptr.To[int32](512)},
				Memory:        &autoscalingv1alpha1.ResourceRange{Min: ptr.To[int32](32), Max: ptr.To[int32](2048)},
				GPUs:          []autoscalingv1alpha1.GPULimit{{Type: "nvidia.com/gpu", Min: 0, Max: 16}},
			},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				Enabled:                           ptr.To(true),
				DelayAfterAdd:                     metaDuration(5 * time.Minute),
				DelayAfterDelete:                  metaDuration(30 * time.Second),
				DelayAfterFailure:                 metaDuration(2 * time.Minute),
				UnneededTime:                      metaDuration(5 * time.Minute),
				UnreadyTime:                       metaDuration(15 * time.Minute),
				UtilizationThreshold:              ptr.To("0.65"),
				MaxEmptyBulkDelete:                ptr.To[int32](20),
				MaxGracefulTerminationSeconds:     ptr.To[int32](300),
				SkipNodesWithLocalStorage:         ptr.To(false),
				SkipNodesWithSystemPods:           ptr.To(false),
				SkipNodesWithCustomControllerPods: ptr.To(false),
				IgnoreDaemonSetsUtilization:       ptr.To(true),
				MaxDrainParallelism:               ptr.To[int32](3),
				CordonNodeBeforeTerminating:       ptr.To(false),
			},
			MaxNodeProvisionTime: metaDuration(20 * time.Minute),
			MaxNodesPerScaleUp:   ptr.To[int32](50),
			NewPodScaleUpDelay:   metaDuration(10 * time.Second),
			PodPriorityThreshold: ptr.To[int32](-5),
			Backoff: &autoscalingv1alpha1.BackoffConfig{
				Initial: metaDuration(2 * time.Minute), Max: metaDuration(20 * time.Minute), ResetAfter: metaDuration(time.Hour),
			},
			ClusterHealth: &autoscalingv1alpha1.ClusterHealthConfig{
				OkTotalUnreadyCount: ptr.To[int32](5), MaxTotalUnreadyPercentage: ptr.To[int32](30),
			},
			StartupTaints: []autoscalingv1alpha1.TaintKey{"node.cilium.io/agent-not-ready"},
			StatusTaints:  []autoscalingv1alpha1.TaintKey{"example.com/maintenance"},
			LogVerbosity:  ptr.To[int32](3),
		},
		wantMapped: []string{
			"--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters",
			"--scan-interval=20s",
			"--expander=priority,least-waste",
			"--balance-similar-node-groups=true",
			"--balancing-ignore-label=topology.ebs.csi.aws.com/zone",
			"--balancing-ignore-label=node.kubernetes.io/instance-type",
			"--max-nodes-total=100",
			"--cores-total=8:512",
			"--memory-total=32:2048",
			"--gpu-total=nvidia.com/gpu:0:16",
			"--scale-down-enabled=true",
			"--scale-down-delay-after-add=5m",
			"--scale-down-delay-after-delete=30s",
			"--scale-down-delay-after-failure=2m",
			"--scale-down-unneeded-time=5m",
			"--scale-down-unready-time=15m",
			"--scale-down-utilization-threshold=0.65",
			"--max-scale-down-parallelism=20",
			"--max-graceful-termination-sec=300",
			"--skip-nodes-with-local-storage=false",
			"--skip-nodes-with-system-pods=false",
			"--skip-nodes-with-custom-controller-pods=false",
			"--ignore-daemonsets-utilization",
			"--max-drain-parallelism=3",
			"--cordon-node-before-terminating=false",
			"--max-node-provision-time=20m",
			"--max-nodes-per-scaleup=50",
			"--new-pod-scale-up-delay=10s",
			"--expendable-pods-priority-cutoff=-5",
			"--initial-node-group-backoff-duration=2m",
			"--max-node-group-backoff-duration=20m",
			"--node-group-backoff-reset-timeout=1h",
			"--ok-total-unready-count=5",
			"--max-total-unready-percentage=30",
			"--startup-taint=node.cilium.io/agent-not-ready",
			"--status-taint=example.com/maintenance",
			"--nodes=1:10:MachineDeployment/clusters/prod-md-0",
			"--v=3",
			"the priorities of the ConfigMap priority-expander.yaml",
		},
		wantUnmapped: []string{
			"--cloud-provider=clusterapi",
			"--kubeconfig=/etc/kubernetes/prod/value",
			"--scale-down-gpu-utilization-threshold=0.3",
			"--max-pod-eviction-time=5m",
			"--write-status-configmap=true",
			"--leader-elect=false",
		},
		wantNodeGroups: []nodeGroupBounds{{kind: "MachineDeployment", namespace: "clusters", name: "prod-md-0", min: 1, max: 10}},
		wantWarnings:   []string{defaultDelayDeletionWarning},
	},
	{
		name:     "Helm values with the Cluster's kubeconfig, extraArgs, node groups and expander priorities",
		input:    func(t *testing.T) convertInput { return testdataInput(t, "helm-kubeconfig-values.yaml") },
		opts:     convertOptions{mode: autoscalingv1alpha1.DryRunMode},
		wantName: "prod", wantNamespace: "clusters",
		wantSpec: caSpec{
			ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
			Expanders: []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriorityExpander, autoscalingv1alpha1.LeastWasteExpander},
			ExpanderPriorities: []autoscalingv1alpha1.ExpanderPriority{
				{Priority: 50, NodeGroupIDPatterns: []string{"MachineDeployment/clusters/prod-md-spot.*"}},
				{Priority: 10, NodeGroupIDPatterns: []string{".*"}},
			},
			BalanceSimilarNodeGroups: ptr.To(true),
			BalancingIgnoredLabels:   []string{"topology.ebs.csi.aws.com/zone", "node.kubernetes.io/instance-type"},
			ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{
				UnneededTime: metaDuration(5 * time.Minute), SkipNodesWithLocalStorage: ptr.To(false),
			},
			LogVerbosity: ptr.To[int32](2),
		},
		wantMapped: []string{
			"--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters",
			"--namespace=kube-system",
			"--nodes=1:10:prod-md-0",
			"--balance-similar-node-groups=true",
			"--balancing-ignore-label=topology.ebs.csi.aws.com/zone",
			"--balancing-ignore-label=node.kubernetes.io/instance-type",
			"--expander=priority,least-waste",
			"--scale-down-unneeded-time=5m",
			"--skip-nodes-with-local-storage=false",
			"--v=2",
			"the priorities of the Helm values' expanderPriorities",
		},
		wantUnmapped: []string{
			"--cloud-provider=clusterapi",
			"--kubeconfig=/etc/kubernetes/value",
			"--clusterapi-cloud-config-authoritative",
			"--stderrthreshold=info",
		},
		// Release 1.33 of the image tag: it cordoned no nodes either.
		wantDefaults: []differingDefault{
			{flag: "cores-total", field: "spec.resourceLimits.cores", upstream: "0:320000", ours: "none"},
			{flag: "memory-total", field: "spec.resourceLimits.memory", upstream: "0:6400000", ours: "none"},
		},
		wantNodeGroups: []nodeGroupBounds{{kind: "MachineDeployment", namespace: "clusters", name: "prod-md-0", min: 1, max: 10}},
		wantWarnings:   []string{"--max-nodes-total=1e+06: not an integer: Helm renders large numbers", defaultDelayDeletionWarning},
	},
}

func TestConvertRealConfigurations(t *testing.T) {
	for _, tt := range realConfigurations {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			result, err := convert(tt.input(t), tt.opts)
			g.Expect(err).NotTo(HaveOccurred())

			g.Expect(result.object.Name).To(Equal(tt.wantName))
			g.Expect(result.object.Namespace).To(Equal(tt.wantNamespace))
			g.Expect(result.object.Spec).To(Equal(tt.wantSpec))
			g.Expect(mappedFlagNames(result.report)).To(Equal(tt.wantMapped))
			g.Expect(unmappedFlagNames(result.report)).To(Equal(tt.wantUnmapped))
			g.Expect(withoutNotes(result.report.defaults)).To(Equal(tt.wantDefaults))
			g.Expect(result.report.nodeGroups).To(Equal(tt.wantNodeGroups))
			g.Expect(result.report.warnings).To(HaveLen(len(tt.wantWarnings)), "warnings: %q", result.report.warnings)
			for i, want := range tt.wantWarnings {
				g.Expect(result.report.warnings[i]).To(ContainSubstring(want))
			}
		})
	}
}

// withoutNotes are the differing defaults without the flag table's notes.
func withoutNotes(defaults []differingDefault) []differingDefault {
	var out []differingDefault
	for _, d := range defaults {
		d.note = ""
		out = append(out, d)
	}
	return out
}

func mappedFlagNames(r convertReport) []string {
	var names []string
	for _, m := range r.mapped {
		names = append(names, m.flag)
	}
	return names
}

func unmappedFlagNames(r convertReport) []string {
	var names []string
	for _, u := range r.unmapped {
		names = append(names, u.flag)
	}
	return names
}

// The chart renders the container's command line from the values as its
// templates/deployment.yaml does.
func TestReadHelmValuesRendersTheChartsCommandLine(t *testing.T) {
	tests := []struct {
		values, args string
		wantDefaults map[string]bool
	}{
		{
			values:       "helm-clusterapi-values.yaml",
			args:         "helm-clusterapi.args",
			wantDefaults: map[string]bool{"cloud-provider": false, "logtostderr": true, "stderrthreshold": true, "v": true},
		},
		{
			values:       "helm-kubeconfig-values.yaml",
			args:         "helm-kubeconfig.args",
			wantDefaults: map[string]bool{"cloud-provider": false, "stderrthreshold": true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.values, func(t *testing.T) {
			g := NewWithT(t)
			in := testdataInput(t, tt.values)
			g.Expect(in.args).To(Equal(strings.Split(strings.TrimSpace(string(convertTestdata(t, tt.args))), "\n")))
			g.Expect(in.chartDefaults).To(Equal(tt.wantDefaults))
		})
	}
}

// Helm merges values over the chart's defaults: maps key by key, a null
// removes a default, and later files win.
func TestReadHelmValuesMergesAsHelm(t *testing.T) {
	g := NewWithT(t)
	first := []byte("cloudProvider: clusterapi\nautoDiscovery: {clusterName: prod}\nextraArgs: {v: 6, scan-interval: 30s}\n")
	second := []byte("extraArgs: {v: null, stderrthreshold: null, ignore-daemonsets-utilization: null}\n")
	in, err := readHelmValues([][]byte{first, second}, []string{"a.yaml", "b.yaml"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.args).To(Equal([]string{
		"./cluster-autoscaler", "--cloud-provider=clusterapi", "--namespace=<release namespace>",
		"--node-group-auto-discovery=clusterapi:clusterName=prod",
		"--ignore-daemonsets-utilization", "--logtostderr=true", "--scan-interval=30s",
	}))
}

// The output decodes strictly into a ClusterAutoscaler, and the API server
// accepts it: the CRD's schema and rules hold.
func TestConvertOutputIsAValidClusterAutoscaler(t *testing.T) {
	ctx := context.Background()
	for _, tt := range realConfigurations {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			result, err := convert(tt.input(t), tt.opts)
			g.Expect(err).NotTo(HaveOccurred())
			data, err := marshalManifest(&result.object)
			g.Expect(err).NotTo(HaveOccurred())

			var decoded autoscalingv1alpha1.ClusterAutoscaler
			g.Expect(yaml.UnmarshalStrict(data, &decoded)).To(Succeed())
			g.Expect(decoded.Spec).To(Equal(tt.wantSpec))
			g.Expect(string(data)).NotTo(ContainSubstring("\nstatus:"))
			g.Expect(string(data)).NotTo(ContainSubstring("creationTimestamp"))

			namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: decoded.Namespace}}
			g.Expect(client.IgnoreAlreadyExists(plugintest.API.Client.Create(ctx, namespace))).To(Succeed())
			g.Expect(plugintest.API.Client.Create(ctx, &decoded, client.DryRunAll)).To(Succeed())
		})
	}
}
