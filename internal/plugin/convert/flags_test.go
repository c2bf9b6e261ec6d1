package convert

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilclock "k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/engineconfig"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
)

// crdSpecSchema is the schema of the ClusterAutoscaler's spec in the CRD.
func crdSpecSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "crd", "bases", "autoscaling.cluster.x-k8s.io_clusterautoscalers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
}

// crdDefault is the default of a property, as a flag would be written: a
// list is comma-separated; "" when it has none.
func crdDefault(t *testing.T, property apiextensionsv1.JSONSchemaProps) string {
	t.Helper()
	if property.Default == nil {
		return ""
	}
	var value any
	if err := json.Unmarshal(property.Default.Raw, &value); err != nil {
		t.Fatal(err)
	}
	switch v := value.(type) {
	case string:
		return v
	case float64:
		return formatDecimal(v)
	case bool:
		return strconv.FormatBool(v)
	case []any:
		items := make([]string, 0, len(v))
		for _, item := range v {
			items = append(items, item.(string))
		}
		return strings.Join(items, ",")
	}
	t.Fatalf("a default convert cannot compare: %s", property.Default.Raw)
	return ""
}

// Every field of the flag table is a field of the CRD, and our default in
// the table, the engine's, is the CRD's.
func TestFlagTableMatchesTheCRD(t *testing.T) {
	spec := crdSpecSchema(t)
	ours := autoscaler.DefaultConfig()
	for _, row := range flagTable {
		if !strings.HasPrefix(row.field, "spec.") || strings.Contains(row.field, ",") {
			continue
		}
		t.Run(row.flag, func(t *testing.T) {
			g := NewWithT(t)
			property := spec
			for _, name := range strings.Split(strings.TrimPrefix(row.field, "spec."), ".") {
				child, ok := property.Properties[name]
				g.Expect(ok).To(BeTrue(), "the CRD has no %s", row.field)
				property = child
			}
			if row.ours == nil {
				return
			}
			our, theirs := row.ours(ours), crdDefault(t, property)
			g.Expect(our == theirs || row.equal(our, theirs)).To(BeTrue(),
				"--%s: our default %q in the flag table is not the CRD's %q of %s", row.flag, our, theirs, row.field)
		})
	}
}

// convert checks what it writes with the manager's rules: a value the
// manager would refuse is left out, with the manager's reason.
func TestConvertChecksWithTheManagersRules(t *testing.T) {
	const discovery = "--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters"
	tests := []struct {
		flag    string
		refused caSpec
	}{
		{flag: "--scale-down-utilization-threshold=1.5", refused: caSpec{ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("1.5")}}},
		{flag: "--scale-down-utilization-threshold=0", refused: caSpec{ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{UtilizationThreshold: ptr.To("0")}}},
		{flag: "--max-node-provision-time=30s", refused: caSpec{MaxNodeProvisionTime: metaDuration(30 * time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			g := NewWithT(t)
			_, refusal := engineconfig.Settings(tt.refused, utilclock.RealClock{})
			g.Expect(refusal).To(HaveOccurred(), "the manager takes %s", tt.flag)

			// Without its default's warning (TestConvertBadInput).
			result, err := convert(convertInput{args: []string{"cluster-autoscaler", "--cloud-provider=clusterapi", discovery, "--node-deletion-delay-timeout=0s", tt.flag}},
				convertOptions{mode: autoscalingv1alpha1.DryRunMode})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(result.object.Spec).To(Equal(caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode}))
			g.Expect(result.report.warnings).To(ConsistOf(HavePrefix(tt.flag + ": " + refusal.Error() + ": left out")))
		})
	}
}

// Each upstream flag has one row: a field and a way to set it, or a reason.
func TestFlagTableRows(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range flagTable {
		t.Run(row.flag, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(seen[row.flag]).To(BeFalse(), "--%s has two rows", row.flag)
			seen[row.flag] = true
			switch {
			case row.identity:
				g.Expect(row.apply).To(BeNil())
			case row.apply != nil:
				g.Expect(row.field).NotTo(BeEmpty())
				g.Expect(row.reason).To(BeEmpty())
			default:
				g.Expect(row.field).To(BeEmpty())
				g.Expect(row.reason).NotTo(BeEmpty())
			}
			if row.ours != nil {
				g.Expect(row.equal).NotTo(BeNil())
			}
		})
	}
}

// Bad input is an error when there is nothing to convert, and otherwise a
// warning: the value is left out, and the output stays valid.
// defaultDelayDeletionWarning begins the warning of every conversion
// of a command line without --node-deletion-delay-timeout: upstream's
// default waits for the delay-deletion annotations, capi-autoscaler does
// not.
const defaultDelayDeletionWarning = "--node-deletion-delay-timeout is not given, and upstream's default is 2m"

func TestConvertBadInput(t *testing.T) {
	const discovery = "--node-group-auto-discovery=clusterapi:clusterName=prod,namespace=clusters"
	tests := []struct {
		name         string
		args         []string
		in           convertInput
		opts         convertOptions
		wantErr      string
		wantSpec     caSpec
		wantUnmapped []string
		wantWarnings []string
	}{
		{
			name:    "another cloud provider",
			args:    []string{"--cloud-provider=aws", "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled"},
			wantErr: "--cloud-provider=aws: convert converts configurations of upstream's clusterapi provider only",
		},
		{
			name:    "the chart's default cloud provider",
			args:    []string{"--cloud-provider=aws"},
			in:      convertInput{chartDefaults: map[string]bool{"cloud-provider": true}},
			wantErr: "the chart's default cloudProvider; the values need cloudProvider: clusterapi",
		},
		{
			name:    "no Cluster",
			args:    []string{"--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:namespace=clusters", "--cluster-name=prod"},
			wantErr: `which Cluster to autoscale? --node-group-auto-discovery=clusterapi:namespace=clusters names no clusterName (upstream then autoscales every Cluster it matches); upstream's --cluster-name is "prod": pass --cluster-name`,
		},
		{
			name:    "a Cluster name that is no name, as a Helm template",
			args:    []string{"--cloud-provider=clusterapi", "--node-group-auto-discovery=clusterapi:clusterName={{ .Values.cluster }}"},
			wantErr: `the Cluster name "{{ .Values.cluster }}" is not the name of a Cluster`,
		},
		{
			name:    "a bad --name",
			args:    []string{"--cloud-provider=clusterapi", discovery},
			opts:    convertOptions{name: "Prod_Autoscaler"},
			wantErr: `--name "Prod_Autoscaler" is not a name of an object`,
		},
		{
			name:         "--cluster-name that is not the discovery's",
			args:         []string{"--cloud-provider=clusterapi", discovery},
			opts:         convertOptions{clusterName: "staging"},
			wantSpec:     caSpec{ClusterName: "staging", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--cluster-name staging is not the Cluster prod of " + discovery + ": the ClusterAutoscaler is for staging", defaultDelayDeletionWarning},
		},
		{
			name: "malformed values and values the CRD refuses",
			args: []string{"--cloud-provider=clusterapi", discovery,
				"--scan-interval=ten", "--scale-down-utilization-threshold=1.5", "--cores-total=8", "--memory-total=64:32",
				"--gpu-total=nvidia.com/gpu:4", "--v=12", "--max-total-unready-percentage=45.5", "--startup-taint=bad key!",
				"--nodes=1:x:md-0", "--max-node-provision-time=30s", "--max-drain-parallelism=0", "--scale-down-enabled=maybe",
				"--expander", "--max-nodes-total=-1"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{
				"--scan-interval=ten: not a duration such as 30s or 10m: left out, spec.scanInterval keeps our default 10s",
				"--scale-down-utilization-threshold=1.5: scale-down utilization threshold must be strictly between 0 and 1, got 1.5: left out, spec.scaleDown.utilizationThreshold keeps our default 0.5",
				"--cores-total=8: not min:max: left out, spec.resourceLimits.cores stays unset",
				"--memory-total=64:32: min is above max: left out",
				"--gpu-total=nvidia.com/gpu:4: not gpu-type:min:max: left out",
				"--v=12: spec.logVerbosity must be between 0 and 10: left out, spec.logVerbosity keeps our default 1",
				"--max-total-unready-percentage=45.5: spec.clusterHealth.maxTotalUnreadyPercentage is a whole number from 0 to 100",
				"--startup-taint=bad key!: not a taint key",
				`--nodes=1:x:md-0: max "x": not an integer: left out`,
				"--max-node-provision-time=30s: max node provision time must be at least 1m0s, got 30s",
				"--max-drain-parallelism=0: spec.scaleDown.maxDrainParallelism must be between 1 and 1000",
				"--scale-down-enabled=maybe: not true or false",
				"--expander has no value: left out",
				"--max-nodes-total=-1: spec.resourceLimits.maxNodesTotal must be between 0 and 2147483647",
				defaultDelayDeletionWarning,
			},
		},
		{
			name:         "a threshold that is no number, which the manager's range check lets through",
			args:         []string{"--cloud-provider=clusterapi", discovery, "--scale-down-utilization-threshold=NaN"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--scale-down-utilization-threshold=NaN: not a number: left out", defaultDelayDeletionWarning},
		},
		{
			name: "a GPU type that is no extended resource is read as a DRA driver",
			args: []string{"--cloud-provider=clusterapi", discovery, "--gpu-total=nvidia-tesla-t4:0:4"},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
				ResourceLimits: &autoscalingv1alpha1.ResourceLimits{GPUs: []autoscalingv1alpha1.GPULimit{{Type: "nvidia-tesla-t4", Max: 4}}}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--gpu-total=nvidia-tesla-t4:0:4: upstream counts GPUs by the cloud's GPU type (and only on GKE); " +
				"capi-autoscaler counts them by extended resource name such as nvidia.com/gpu, or, for a type without a slash, as the devices of the DRA driver of that name such as gpu.nvidia.com: check the type", defaultDelayDeletionWarning},
		},
		{
			name:     "unknown flags, flags given twice and no cloud provider",
			args:     []string{discovery, "--scale-down-enabled=false", "--frobnicate=3", "--scale-down-enabled=true"},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode, ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{Enabled: ptr.To(true)}},
			wantWarnings: []string{
				"no --cloud-provider: upstream's default is gce; converted as a configuration of the clusterapi provider",
				"--scale-down-enabled=false is given again later: upstream takes the last",
				"--frobnicate=3: not an upstream cluster-autoscaler flag that convert knows: left out",
				defaultDelayDeletionWarning,
			},
		},
		{
			name:         "no --node-deletion-delay-timeout: upstream's default waits for the delay-deletion annotations",
			args:         []string{"--cloud-provider=clusterapi", discovery},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--node-deletion-delay-timeout is not given, and upstream's default is 2m: upstream waits, up to 2m, for the delay-deletion.cluster-autoscaler.kubernetes.io/ annotations " +
				"of a node to go before deleting it; capi-autoscaler deletes the node once drained, without waiting: whatever those annotations hold the node for (a backup, a log shipper) is not waited for. " +
				"Have what sets them annotate the node with cluster-autoscaler.kubernetes.io/scale-down-disabled=true instead while it must stay, " +
				"or, if nothing sets them, convert with --node-deletion-delay-timeout=0s"},
		},
		{
			name: "flags whose conversion would do the opposite of what they ask",
			args: []string{"--cloud-provider=clusterapi", discovery, "--scale-down-unready-enabled=false", "--min-replica-count=2",
				"--enforce-node-group-min-size", "--node-deletion-delay-timeout=5m", "--daemonset-eviction-for-occupied-nodes=false"},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
				ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{UnreadyTime: metaDuration(365 * 24 * time.Hour)}},
			wantUnmapped: []string{"--cloud-provider=clusterapi", "--daemonset-eviction-for-occupied-nodes=false"},
			wantWarnings: []string{
				"--scale-down-unready-enabled=false: upstream never removes unready nodes; capi-autoscaler removes them after spec.scaleDown.unreadyTime, which is set to 8760h0m0s, the nearest it has",
				"--min-replica-count=2: upstream keeps the nodes of pods whose ReplicaSet or ReplicationController has fewer replicas than this; capi-autoscaler evicts them whatever their count",
				"--enforce-node-group-min-size: upstream scales a node group below its minimum size up to it; capi-autoscaler scales up only for pending pods",
				"--node-deletion-delay-timeout=5m: upstream waits, up to 5m, for the delay-deletion.cluster-autoscaler.kubernetes.io/ annotations of a node to go",
			},
		},
		{
			name: "the same flags at values capi-autoscaler does as asked",
			args: []string{"--cloud-provider=clusterapi", discovery, "--scale-down-unready-enabled=true", "--min-replica-count=0",
				"--enforce-node-group-min-size=false", "--node-deletion-delay-timeout=0s"},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi", "--scale-down-unready-enabled=true", "--min-replica-count=0",
				"--enforce-node-group-min-size=false", "--node-deletion-delay-timeout=0s"},
		},
		{
			name:         "an unready time given before unready removal is turned off",
			args:         []string{"--cloud-provider=clusterapi", discovery, "--scale-down-unready-time=2h", "--scale-down-unready-enabled=false"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode, ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{UnreadyTime: metaDuration(2 * time.Hour)}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--scale-down-unready-enabled=false: upstream never removes unready nodes; capi-autoscaler removes them after spec.scaleDown.unreadyTime, which --scale-down-unready-time sets", defaultDelayDeletionWarning},
		},
		{
			name:         "two flags of one field",
			args:         []string{"--cloud-provider=clusterapi", discovery, "--max-scale-down-parallelism=20", "--max-empty-bulk-delete=5"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode, ScaleDown: &autoscalingv1alpha1.ScaleDownConfig{MaxEmptyBulkDelete: ptr.To[int32](5)}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"--max-scale-down-parallelism and --max-empty-bulk-delete both set spec.scaleDown.maxEmptyBulkDelete: the later one, --max-empty-bulk-delete, holds", defaultDelayDeletionWarning},
		},
		{
			name: "expanders capi-autoscaler lacks, and priority without priorities",
			args: []string{"--cloud-provider=clusterapi", discovery, "--expander=price,grpc,least-nodes,priority,random,random"},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
				Expanders: []autoscalingv1alpha1.Expander{autoscalingv1alpha1.PriceExpander, autoscalingv1alpha1.RandomExpander}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{
				"upstream's clusterapi provider has no prices, so upstream cannot run the price expander; here a node costs its group's capacity.cluster-autoscaler.kubernetes.io/price annotation",
				"grpc is left out: the grpc expander asks an external server",
				"least-nodes is left out: capi-autoscaler has no least-nodes expander",
				"names random twice: it is kept once",
				"the priority expander is left out: upstream reads its priorities from the ConfigMap cluster-autoscaler-priority-expander",
				defaultDelayDeletionWarning,
			},
		},
		{
			name:         "no expander left",
			args:         []string{"--cloud-provider=clusterapi", discovery, "--expander=grpc"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"grpc is left out", "--expander=grpc: no expander capi-autoscaler has: left out, spec.expanders keeps our default least-waste", defaultDelayDeletionWarning},
		},
		{
			name:         "an initial backoff above the maximum",
			args:         []string{"--cloud-provider=clusterapi", discovery, "--initial-node-group-backoff-duration=40m", "--max-node-group-backoff-duration=20m"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode, Backoff: &autoscalingv1alpha1.BackoffConfig{Max: metaDuration(20 * time.Minute)}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{"the initial backoff 40m0s exceeds the maximum 20m0s, which spec.backoff does not allow: spec.backoff.initial is left out", defaultDelayDeletionWarning},
		},
		{
			name: "a narrower kubeconfig Secret of the Cluster's namespace",
			args: []string{"--cloud-provider=clusterapi", discovery, "--kubeconfig=/kubeconfig/kubeconfig"},
			in: convertInput{secretOf: func(string) (secretFile, bool) {
				return secretFile{namespace: "clusters", name: "prod-autoscaler", key: "kubeconfig"}, true
			}},
			wantSpec: caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode,
				WorkloadKubeconfigSecretRef: &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "prod-autoscaler", Key: "kubeconfig"}},
			wantUnmapped: []string{"--cloud-provider=clusterapi"},
			wantWarnings: []string{defaultDelayDeletionWarning},
		},
		{
			name: "a kubeconfig Secret of another namespace",
			args: []string{"--cloud-provider=clusterapi", discovery, "--kubeconfig=/kubeconfig/value"},
			in: convertInput{secretOf: func(string) (secretFile, bool) {
				return secretFile{namespace: "kube-system", name: "prod-kubeconfig", key: "value"}, true
			}},
			opts:         convertOptions{namespace: "other"},
			wantSpec:     caSpec{ClusterName: "prod", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi", "--kubeconfig=/kubeconfig/value"},
			wantWarnings: []string{"-n other is not the namespace clusters of the discovery", defaultDelayDeletionWarning},
		},
		{
			name: "two Clusters, discovery labels, and --cluster-name choosing the second",
			args: []string{"--cloud-provider=clusterapi", discovery,
				"--node-group-auto-discovery=clusterapi:clusterName=staging,namespace=clusters,owner=jim", "--node-group-auto-discovery=aws:x"},
			opts:         convertOptions{clusterName: "staging"},
			wantSpec:     caSpec{ClusterName: "staging", Mode: autoscalingv1alpha1.DryRunMode},
			wantUnmapped: []string{"--cloud-provider=clusterapi", discovery},
			wantWarnings: []string{
				"--node-group-auto-discovery=aws:x: not a discovery of the clusterapi provider: left out",
				"upstream autoscales only the node groups labelled owner=jim",
				defaultDelayDeletionWarning,
			},
		},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			in := tt.in
			in.args = append([]string{"cluster-autoscaler"}, tt.args...)
			opts := tt.opts
			opts.mode = autoscalingv1alpha1.DryRunMode
			result, err := convert(in, opts)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(result.object.Spec).To(Equal(tt.wantSpec))
			g.Expect(unmappedFlagNames(result.report)).To(Equal(tt.wantUnmapped))
			g.Expect(result.report.warnings).To(HaveLen(len(tt.wantWarnings)), "warnings: %q", result.report.warnings)
			for i, want := range tt.wantWarnings {
				g.Expect(result.report.warnings[i]).To(ContainSubstring(want))
			}

			namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: result.object.Namespace}}
			g.Expect(client.IgnoreAlreadyExists(plugintest.API.Client.Create(ctx, namespace))).To(Succeed())
			g.Expect(plugintest.API.Client.Create(ctx, result.object.DeepCopy(), client.DryRunAll)).To(Succeed())
		})
	}
}
