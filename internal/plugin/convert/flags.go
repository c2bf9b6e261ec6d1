package convert

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// caSpec is the spec a conversion writes.
type caSpec = autoscalingv1alpha1.ClusterAutoscalerSpec

// flagMapping is one flag of the upstream cluster-autoscaler: the field of
// the ClusterAutoscaler it maps to, or why it maps to none.
type flagMapping struct {
	// flag is the upstream flag's name.
	flag string
	// field is the field the flag maps to, as a path of the
	// ClusterAutoscaler; empty when it maps to none.
	field string
	// apply parses an upstream value and sets the field. It returns the
	// field's value, as the report shows it, or why the value cannot be
	// converted: then the field stays unset.
	apply func(c *conversion, value string) (string, error)
	// upstream is the upstream default, as the flag is written. A flag
	// that maps to no field has one only when differs warns of it
	// (warnOfUpstreamDefaults).
	upstream upstreamDefault
	// ours is our default, as the flag would be written; empty for none.
	// The engine owns it (autoscaler.DefaultConfig); a test holds it to the
	// CRD's default of field.
	ours func(autoscaler.Config) string
	// equal says whether two values, as the flag is written, mean the same.
	equal func(a, b string) bool
	// boolean flags take no value: --flag alone means true.
	boolean bool
	// multi flags may be given several times, each adding a value.
	multi bool
	// note says how our field differs in meaning, for the report.
	note string
	// reason says why a flag maps to no field, and what takes its place.
	reason string
	// differs, for a flag that maps to no field, says how capi-autoscaler
	// would do the opposite of what the value asks, and what it converts
	// to instead, the nearest it has, which it may set; "" when the value
	// asks for nothing capi-autoscaler does not do.
	differs func(c *conversion, value string) string
	// differing is a value differs warns of, for the docs.
	differing string
	// identity flags name the Cluster: they are read before all others.
	identity bool
}

// upstreamDefault is an upstream default, which changed in some releases.
type upstreamDefault struct {
	value string
	// since is the minor release that set value; before it was earlier.
	since   int
	earlier string
}

// at is the default of release 1.minor.
func (d upstreamDefault) at(minor int) string {
	if d.since != 0 && minor < d.since {
		return d.earlier
	}
	return d.value
}

// flagTable has every upstream flag that convert knows: those that map to
// a field first, then those that do not (unmapped.go).
var flagTable = append(mappedFlags(), unmappedFlags()...)

// mappedFlags are the upstream flags with a field of the ClusterAutoscaler.
func mappedFlags() []flagMapping {
	return []flagMapping{
		{flag: "cloud-provider", identity: true, upstream: upstreamDefault{value: "gce"},
			reason: "capi-autoscaler autoscales Cluster API clusters only"},
		{flag: "node-group-auto-discovery", field: "spec.clusterName, metadata.namespace", identity: true, multi: true},
		{flag: "nodes", field: "the node group's min and max size annotations", multi: true, apply: applyNodes},
		{flag: "kubeconfig", field: "spec.workloadKubeconfigSecretRef", apply: applyKubeconfig},
		upstreamLocationFlag("namespace", "namespace", validation.IsDNS1123Label, "kube-system",
			func(l *autoscalingv1alpha1.UpstreamAutoscalerLocation) *string { return &l.Namespace }),
		upstreamLocationFlag("leader-elect-resource-namespace", "leaseNamespace", validation.IsDNS1123Label, "the --namespace",
			func(l *autoscalingv1alpha1.UpstreamAutoscalerLocation) *string { return &l.LeaseNamespace }),
		upstreamLocationFlag("leader-elect-resource-name", "leaseName", validation.IsDNS1123Subdomain, "cluster-autoscaler",
			func(l *autoscalingv1alpha1.UpstreamAutoscalerLocation) *string { return &l.LeaseName }),
		upstreamLocationFlag("status-config-map-name", "statusConfigMapName", validation.IsDNS1123Subdomain, "cluster-autoscaler-status",
			func(l *autoscalingv1alpha1.UpstreamAutoscalerLocation) *string { return &l.StatusConfigMapName }),

		durationFlag("scan-interval", "spec.scanInterval", scanInterval, "10s",
			func(c autoscaler.Config) time.Duration { return c.ScanInterval }, autoscalingv1alpha1.MinScanInterval),
		{flag: "expander", field: "spec.expanders", apply: applyExpanders,
			upstream: upstreamDefault{value: "least-waste", since: 33, earlier: "random"},
			ours:     func(c autoscaler.Config) string { return strings.Join(c.Expanders, ",") },
			equal:    sameString},
		boolFlag("balance-similar-node-groups", "spec.balanceSimilarNodeGroups",
			func(s *caSpec) **bool { return &s.BalanceSimilarNodeGroups }, "false",
			func(c autoscaler.Config) bool { return c.BalanceSimilarNodeGroups }),
		{flag: "balancing-ignore-label", field: "spec.balancingIgnoredLabels", multi: true, apply: applyBalancingIgnoredLabel,
			ours: none, equal: sameString},
		{flag: "max-nodes-total", field: "spec.resourceLimits.maxNodesTotal", apply: applyMaxNodesTotal,
			upstream: upstreamDefault{value: "0"}, ours: none, equal: sameNodeLimit},
		{flag: "cores-total", field: "spec.resourceLimits.cores", apply: applyRange(cores, ""),
			upstream: upstreamDefault{value: "0:320000"}, ours: none, equal: sameString,
			note: "upstream's default is no limit in practice"},
		{flag: "memory-total", field: "spec.resourceLimits.memory", apply: applyRange(memory, " GiB"),
			upstream: upstreamDefault{value: "0:6400000"}, ours: none, equal: sameString,
			note: "in GiB, as upstream; upstream's default is no limit in practice"},
		{flag: "gpu-total", field: "spec.resourceLimits.gpus", multi: true, apply: applyGPUTotal},

		boolFlag("scale-down-enabled", "spec.scaleDown.enabled",
			func(s *caSpec) **bool { return &scaleDown(s).Enabled }, "true",
			func(c autoscaler.Config) bool { return c.ScaleDown.Enabled }),
		durationFlag("scale-down-delay-after-add", "spec.scaleDown.delayAfterAdd",
			func(s *caSpec) **metav1.Duration { return &scaleDown(s).DelayAfterAdd }, "10m",
			func(c autoscaler.Config) time.Duration { return c.ScaleDown.DelayAfterAdd }, 0),
		durationFlag("scale-down-delay-after-delete", "spec.scaleDown.delayAfterDelete",
			func(s *caSpec) **metav1.Duration { return &scaleDown(s).DelayAfterDelete }, "0s",
			func(c autoscaler.Config) time.Duration { return c.ScaleDown.DelayAfterDelete }, 0),
		durationFlag("scale-down-delay-after-failure", "spec.scaleDown.delayAfterFailure",
			func(s *caSpec) **metav1.Duration { return &scaleDown(s).DelayAfterFailure }, "3m",
			func(c autoscaler.Config) time.Duration { return c.ScaleDown.DelayAfterFailure }, 0),
		durationFlag("scale-down-unneeded-time", "spec.scaleDown.unneededTime",
			func(s *caSpec) **metav1.Duration { return &scaleDown(s).UnneededTime }, "10m",
			func(c autoscaler.Config) time.Duration { return c.ScaleDown.UnneededTime }, 0),
		durationFlag("scale-down-unready-time", "spec.scaleDown.unreadyTime",
			func(s *caSpec) **metav1.Duration { return &scaleDown(s).UnreadyTime }, "20m",
			func(c autoscaler.Config) time.Duration { return c.ScaleDown.UnreadyTime }, 0),
		{flag: "scale-down-utilization-threshold", field: "spec.scaleDown.utilizationThreshold", apply: applyUtilizationThreshold,
			upstream: upstreamDefault{value: "0.5"},
			ours:     func(c autoscaler.Config) string { return formatDecimal(c.ScaleDown.UtilizationThreshold) },
			equal:    sameNumber},
		int32Flag("max-empty-bulk-delete", "spec.scaleDown.maxEmptyBulkDelete",
			func(s *caSpec) **int32 { return &scaleDown(s).MaxEmptyBulkDelete }, "10",
			func(c autoscaler.Config) int { return c.ScaleDown.MaxEmptyBulkDelete }, 1, math.MaxInt32).
			withNote("deprecated upstream for --max-scale-down-parallelism"),
		int32Flag("max-scale-down-parallelism", "spec.scaleDown.maxEmptyBulkDelete",
			func(s *caSpec) **int32 { return &scaleDown(s).MaxEmptyBulkDelete }, "10",
			func(c autoscaler.Config) int { return c.ScaleDown.MaxEmptyBulkDelete }, 1, math.MaxInt32).
			withNote("upstream counts empty and drained nodes removed at once; maxEmptyBulkDelete counts empty nodes, maxDrainParallelism drained ones"),
		int32Flag("max-graceful-termination-sec", "spec.scaleDown.maxGracefulTerminationSeconds",
			func(s *caSpec) **int32 { return &scaleDown(s).MaxGracefulTerminationSeconds }, "600",
			func(c autoscaler.Config) int { return int(c.ScaleDown.MaxGracefulTermination / time.Second) }, 0, math.MaxInt32),
		boolFlag("ignore-daemonsets-utilization", "spec.scaleDown.ignoreDaemonSetsUtilization",
			func(s *caSpec) **bool { return &scaleDown(s).IgnoreDaemonSetsUtilization }, "false",
			func(c autoscaler.Config) bool { return c.ScaleDown.IgnoreDaemonSetsUtilization }),
		boolFlag("skip-nodes-with-local-storage", "spec.scaleDown.skipNodesWithLocalStorage",
			func(s *caSpec) **bool { return &scaleDown(s).SkipNodesWithLocalStorage }, "true",
			func(c autoscaler.Config) bool { return c.ScaleDown.SkipNodesWithLocalStorage }),
		boolFlag("skip-nodes-with-system-pods", "spec.scaleDown.skipNodesWithSystemPods",
			func(s *caSpec) **bool { return &scaleDown(s).SkipNodesWithSystemPods }, "true",
			func(c autoscaler.Config) bool { return c.ScaleDown.SkipNodesWithSystemPods }),
		boolFlag("skip-nodes-with-custom-controller-pods", "spec.scaleDown.skipNodesWithCustomControllerPods",
			func(s *caSpec) **bool { return &scaleDown(s).SkipNodesWithCustomControllerPods }, "true",
			func(c autoscaler.Config) bool { return c.ScaleDown.SkipNodesWithCustomControllerPods }),
		int32Flag("max-drain-parallelism", "spec.scaleDown.maxDrainParallelism",
			func(s *caSpec) **int32 { return &scaleDown(s).MaxDrainParallelism }, "1",
			func(c autoscaler.Config) int { return c.ScaleDown.MaxParallelDrains }, 1, autoscalingv1alpha1.MaxDrainParallelism),
		boolFlag("cordon-node-before-terminating", "spec.scaleDown.cordonNodeBeforeTerminating",
			func(s *caSpec) **bool { return &scaleDown(s).CordonNodeBeforeTerminating }, "true",
			func(c autoscaler.Config) bool { return c.ScaleDown.CordonNodeBeforeTerminating }).
			changedIn(34, "false").withNote("upstream cordons by default since 1.34, kubernetes/autoscaler#8183"),

		durationFlag("max-node-provision-time", "spec.maxNodeProvisionTime",
			func(s *caSpec) **metav1.Duration { return &s.MaxNodeProvisionTime }, "15m",
			func(c autoscaler.Config) time.Duration { return c.MaxNodeProvisionTime }, 0),
		int32Flag("max-nodes-per-scaleup", "spec.maxNodesPerScaleUp",
			func(s *caSpec) **int32 { return &s.MaxNodesPerScaleUp }, "1000",
			func(c autoscaler.Config) int { return c.MaxNodesPerScaleUp }, 1, math.MaxInt32),
		durationFlag("new-pod-scale-up-delay", "spec.newPodScaleUpDelay",
			func(s *caSpec) **metav1.Duration { return &s.NewPodScaleUpDelay }, "0s",
			func(c autoscaler.Config) time.Duration { return c.NewPodScaleUpDelay }, 0),
		int32Flag("expendable-pods-priority-cutoff", "spec.podPriorityThreshold",
			func(s *caSpec) **int32 { return &s.PodPriorityThreshold }, "-10",
			func(c autoscaler.Config) int { return int(c.PodPriorityThreshold) }, math.MinInt32, math.MaxInt32),

		durationFlag("initial-node-group-backoff-duration", "spec.backoff.initial",
			func(s *caSpec) **metav1.Duration { return &backoff(s).Initial }, "5m",
			func(c autoscaler.Config) time.Duration { return c.Backoff.Initial }, 0),
		durationFlag("max-node-group-backoff-duration", "spec.backoff.max",
			func(s *caSpec) **metav1.Duration { return &backoff(s).Max }, "30m",
			func(c autoscaler.Config) time.Duration { return c.Backoff.Max }, 0),
		durationFlag("node-group-backoff-reset-timeout", "spec.backoff.resetAfter",
			func(s *caSpec) **metav1.Duration { return &backoff(s).ResetAfter }, "3h",
			func(c autoscaler.Config) time.Duration { return c.Backoff.ResetAfter }, 0),
		int32Flag("ok-total-unready-count", "spec.clusterHealth.okTotalUnreadyCount",
			func(s *caSpec) **int32 { return &clusterHealth(s).OkTotalUnreadyCount }, "3",
			func(c autoscaler.Config) int { return c.Health.OkTotalUnreadyCount }, 0, math.MaxInt32),
		{flag: "max-total-unready-percentage", field: "spec.clusterHealth.maxTotalUnreadyPercentage", apply: applyUnreadyPercentage,
			upstream: upstreamDefault{value: "45"},
			ours:     func(c autoscaler.Config) string { return formatDecimal(c.Health.MaxTotalUnreadyPercentage) },
			equal:    sameNumber},

		taintFlag("startup-taint", "spec.startupTaints", func(s *caSpec) *[]autoscalingv1alpha1.TaintKey { return &s.StartupTaints }),
		taintFlag("ignore-taint", "spec.startupTaints", func(s *caSpec) *[]autoscalingv1alpha1.TaintKey { return &s.StartupTaints }).
			withNote("deprecated upstream for --startup-taint"),
		taintFlag("status-taint", "spec.statusTaints", func(s *caSpec) *[]autoscalingv1alpha1.TaintKey { return &s.StatusTaints }),

		int32Flag("v", "spec.logVerbosity", func(s *caSpec) **int32 { return &s.LogVerbosity }, "0",
			func(autoscaler.Config) int { return autoscalingv1alpha1.DefaultLogVerbosity }, 0, autoscalingv1alpha1.MaxLogVerbosity).
			withNote("the log level of this Cluster's loop; the manager's own is its -v"),
	}
}

func (m flagMapping) withNote(note string) flagMapping {
	m.note = note
	return m
}

// changedIn says that the upstream default was earlier before 1.minor.
func (m flagMapping) changedIn(minor int, earlier string) flagMapping {
	m.upstream.since, m.upstream.earlier = minor, earlier
	return m
}

// durationFlag maps a duration flag to a metav1.Duration field of at least
// atLeast, the CRD's minimum.
func durationFlag(flag, field string, at func(*caSpec) **metav1.Duration, upstream string,
	ours func(autoscaler.Config) time.Duration, atLeast time.Duration) flagMapping {
	return flagMapping{
		flag: flag, field: field, upstream: upstreamDefault{value: upstream},
		apply: func(c *conversion, value string) (string, error) {
			d, err := time.ParseDuration(value)
			if err != nil {
				return "", fmt.Errorf("not a duration such as 30s or 10m")
			}
			if d < atLeast {
				return "", fmt.Errorf("%s must be at least %s", field, atLeast)
			}
			*at(&c.spec) = &metav1.Duration{Duration: d}
			return d.String(), nil
		},
		ours:  func(c autoscaler.Config) string { return cli.ShortDuration(ours(c)) },
		equal: sameDuration,
	}
}

// upstreamLocationFlag maps a flag that says where upstream keeps its Lease
// or its status ConfigMap to the field of spec.upstreamAutoscaler that
// tells capi-autoscaler where to look for them during a switch.
func upstreamLocationFlag(flag, field string, valid func(string) []string, upstream string, at func(*autoscalingv1alpha1.UpstreamAutoscalerLocation) *string) flagMapping {
	return flagMapping{
		flag: flag, field: "spec.upstreamAutoscaler." + field, upstream: upstreamDefault{value: upstream},
		note: "where capi-autoscaler looks for the upstream autoscaler, and does not scale while it runs",
		apply: func(c *conversion, value string) (string, error) {
			if value == releaseNamespace {
				return "", fmt.Errorf("the namespace of the upstream chart's release, which its values do not tell: set spec.%s to it", "upstreamAutoscaler."+field)
			}
			if problems := valid(value); len(problems) > 0 {
				return "", fmt.Errorf("not a name: %s", strings.Join(problems, "; "))
			}
			if value == upstream {
				// Where capi-autoscaler looks already.
				return value, nil
			}
			if c.spec.UpstreamAutoscaler == nil {
				c.spec.UpstreamAutoscaler = &autoscalingv1alpha1.UpstreamAutoscalerLocation{}
			}
			*at(c.spec.UpstreamAutoscaler) = value
			return value, nil
		},
	}
}

// boolFlag maps a boolean flag.
func boolFlag(flag, field string, at func(*caSpec) **bool, upstream string, ours func(autoscaler.Config) bool) flagMapping {
	return flagMapping{
		flag: flag, field: field, boolean: true, upstream: upstreamDefault{value: upstream},
		apply: func(c *conversion, value string) (string, error) {
			b, err := strconv.ParseBool(value)
			if err != nil {
				return "", fmt.Errorf("not true or false")
			}
			*at(&c.spec) = ptr.To(b)
			return strconv.FormatBool(b), nil
		},
		ours:  func(c autoscaler.Config) string { return strconv.FormatBool(ours(c)) },
		equal: sameBool,
	}
}

// int32Flag maps an integer flag to an int32 field within [least, most].
func int32Flag(flag, field string, at func(*caSpec) **int32, upstream string,
	ours func(autoscaler.Config) int, least, most int64) flagMapping {
	return flagMapping{
		flag: flag, field: field, upstream: upstreamDefault{value: upstream},
		apply: func(c *conversion, value string) (string, error) {
			n, err := parseInt32(value, least, most, field)
			if err != nil {
				return "", err
			}
			*at(&c.spec) = ptr.To(n)
			return strconv.Itoa(int(n)), nil
		},
		ours:  func(c autoscaler.Config) string { return strconv.Itoa(ours(c)) },
		equal: sameNumber,
	}
}

// taintFlag maps a repeatable flag of taint keys.
func taintFlag(flag, field string, at func(*caSpec) *[]autoscalingv1alpha1.TaintKey) flagMapping {
	return flagMapping{
		flag: flag, field: field, multi: true, ours: none, equal: sameString,
		apply: func(c *conversion, value string) (string, error) {
			if problems := validation.IsQualifiedName(value); len(problems) > 0 {
				return "", fmt.Errorf("not a taint key: %s", strings.Join(problems, "; "))
			}
			keys := at(&c.spec)
			key := autoscalingv1alpha1.TaintKey(value)
			if slices.Contains(*keys, key) {
				return value + " (given before)", nil
			}
			if len(*keys) == autoscalingv1alpha1.MaxTaintKeys {
				return "", fmt.Errorf("%s takes at most %d keys", field, autoscalingv1alpha1.MaxTaintKeys)
			}
			*keys = append(*keys, key)
			return value, nil
		},
	}
}

// parseInt32 reads an integer as upstream's flags do, within [least, most].
func parseInt32(value string, least, most int64, field string) (int32, error) {
	n, err := strconv.ParseInt(value, 0, 64)
	if err != nil && strings.Contains(value, "e+") {
		return 0, fmt.Errorf("not an integer: Helm renders large numbers of values files so; quote the value")
	}
	if err != nil {
		return 0, fmt.Errorf("not an integer")
	}
	if n < least || n > most {
		return 0, fmt.Errorf("%s must be between %d and %d", field, least, most)
	}
	return int32(n), nil
}

func scaleDown(s *caSpec) *autoscalingv1alpha1.ScaleDownConfig {
	if s.ScaleDown == nil {
		s.ScaleDown = &autoscalingv1alpha1.ScaleDownConfig{}
	}
	return s.ScaleDown
}

func backoff(s *caSpec) *autoscalingv1alpha1.BackoffConfig {
	if s.Backoff == nil {
		s.Backoff = &autoscalingv1alpha1.BackoffConfig{}
	}
	return s.Backoff
}

func clusterHealth(s *caSpec) *autoscalingv1alpha1.ClusterHealthConfig {
	if s.ClusterHealth == nil {
		s.ClusterHealth = &autoscalingv1alpha1.ClusterHealthConfig{}
	}
	return s.ClusterHealth
}

func limits(s *caSpec) *autoscalingv1alpha1.ResourceLimits {
	if s.ResourceLimits == nil {
		s.ResourceLimits = &autoscalingv1alpha1.ResourceLimits{}
	}
	return s.ResourceLimits
}

func cores(s *caSpec) **autoscalingv1alpha1.ResourceRange  { return &limits(s).Cores }
func memory(s *caSpec) **autoscalingv1alpha1.ResourceRange { return &limits(s).Memory }

func scanInterval(s *caSpec) **metav1.Duration { return &s.ScanInterval }

// none is the default of a field that is unset by default.
func none(autoscaler.Config) string { return "" }

func sameString(a, b string) bool { return a == b }

func sameDuration(a, b string) bool {
	da, errA := time.ParseDuration(a)
	db, errB := time.ParseDuration(b)
	return errA == nil && errB == nil && da == db
}

func sameBool(a, b string) bool {
	ba, errA := strconv.ParseBool(a)
	bb, errB := strconv.ParseBool(b)
	return errA == nil && errB == nil && ba == bb
}

// sameNodeLimit: upstream's 0 is no limit, as an unset field.
func sameNodeLimit(a, b string) bool {
	noLimit := func(s string) bool { return s == "" || s == "0" }
	return a == b || (noLimit(a) && noLimit(b))
}

func sameNumber(a, b string) bool {
	fa, errA := strconv.ParseFloat(a, 64)
	fb, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && fa == fb
}

// formatDecimal writes f as the CRD's decimal strings are written: 0.5, 45.
func formatDecimal(f float64) string {
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// expanders are the upstream expanders that capi-autoscaler has.
var expanders = []autoscalingv1alpha1.Expander{
	autoscalingv1alpha1.RandomExpander, autoscalingv1alpha1.MostPodsExpander,
	autoscalingv1alpha1.LeastWasteExpander, autoscalingv1alpha1.PriorityExpander,
	autoscalingv1alpha1.PriceExpander,
}

// missingExpanders say why upstream expanders have no equal here.
var missingExpanders = map[string]string{
	"grpc":        "the grpc expander asks an external server, which capi-autoscaler does not",
	"least-nodes": "capi-autoscaler has no least-nodes expander",
}

// applyExpanders reads upstream's comma-separated chain of expanders.
// Expanders capi-autoscaler lacks are left out, with a warning.
func applyExpanders(c *conversion, value string) (string, error) {
	var chain []autoscalingv1alpha1.Expander
	for _, name := range strings.Split(value, ",") {
		name = strings.TrimSpace(name)
		expander := autoscalingv1alpha1.Expander(name)
		switch {
		case slices.Contains(chain, expander):
			c.warnf("--expander=%s names %s twice: it is kept once", value, name)
		case slices.Contains(expanders, expander):
			chain = append(chain, expander)
			if expander == autoscalingv1alpha1.PriceExpander {
				c.warnf("--expander=%s: upstream's clusterapi provider has no prices, so upstream cannot run the price expander; "+
					"here a node costs its group's %s annotation, else spec.instanceTypePrices by its instance type, "+
					"else a default proportional to its capacity (docs/cost.md)", value, template.PriceAnnotation)
			}
		case missingExpanders[name] != "":
			c.warnf("--expander=%s: %s is left out: %s", value, name, missingExpanders[name])
		default:
			c.warnf("--expander=%s: %q is no upstream expander and is left out", value, name)
		}
	}
	if len(chain) == 0 {
		return "", fmt.Errorf("no expander capi-autoscaler has")
	}
	c.spec.Expanders = chain
	return joinExpanders(chain), nil
}

func joinExpanders(chain []autoscalingv1alpha1.Expander) string {
	names := make([]string, 0, len(chain))
	for _, e := range chain {
		names = append(names, string(e))
	}
	return strings.Join(names, ",")
}

// applyBalancingIgnoredLabel adds a label to balancingIgnoredLabels.
func applyBalancingIgnoredLabel(c *conversion, value string) (string, error) {
	switch {
	case value == "":
		return "", fmt.Errorf("an empty label")
	case len(value) > autoscalingv1alpha1.MaxLabelKeyLength:
		return "", fmt.Errorf("longer than the %d characters of a label key", autoscalingv1alpha1.MaxLabelKeyLength)
	case slices.Contains(c.spec.BalancingIgnoredLabels, value):
		return value + " (given before)", nil
	case len(c.spec.BalancingIgnoredLabels) == autoscalingv1alpha1.MaxBalancingIgnoredLabels:
		return "", fmt.Errorf("spec.balancingIgnoredLabels takes at most %d labels", autoscalingv1alpha1.MaxBalancingIgnoredLabels)
	}
	c.spec.BalancingIgnoredLabels = append(c.spec.BalancingIgnoredLabels, value)
	return value, nil
}

// applyMaxNodesTotal: upstream's 0 is no limit, as an unset field.
func applyMaxNodesTotal(c *conversion, value string) (string, error) {
	n, err := parseInt32(value, 0, math.MaxInt32, "spec.resourceLimits.maxNodesTotal")
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "no limit, as when unset", nil
	}
	limits(&c.spec).MaxNodesTotal = ptr.To(n)
	return strconv.Itoa(int(n)), nil
}

// applyRange reads upstream's min:max of cores or memory. A minimum of 0
// is no minimum, as an unset one.
func applyRange(at func(*caSpec) **autoscalingv1alpha1.ResourceRange, unit string) func(*conversion, string) (string, error) {
	return func(c *conversion, value string) (string, error) {
		least, most, err := parseMinMax(value)
		if err != nil {
			return "", err
		}
		r := &autoscalingv1alpha1.ResourceRange{Max: ptr.To(most)}
		shown := fmt.Sprintf("max %d%s", most, unit)
		if least > 0 {
			r.Min = ptr.To(least)
			shown = fmt.Sprintf("min %d%s, %s", least, unit, shown)
		}
		*at(&c.spec) = r
		return shown, nil
	}
}

// parseMinMax reads min:max as upstream does, within the CRD's int32.
func parseMinMax(value string) (least, most int32, err error) {
	lo, hi, ok := strings.Cut(value, ":")
	if !ok {
		return 0, 0, fmt.Errorf("not min:max")
	}
	if least, err = parseInt32(lo, 0, math.MaxInt32, "the minimum"); err != nil {
		return 0, 0, fmt.Errorf("min %q: %w", lo, err)
	}
	if most, err = parseInt32(hi, 0, math.MaxInt32, "the maximum"); err != nil {
		return 0, 0, fmt.Errorf("max %q: %w", hi, err)
	}
	if least > most {
		return 0, 0, fmt.Errorf("min is above max")
	}
	return least, most, nil
}

// applyGPUTotal reads upstream's type:min:max. The type may be given again:
// the last one holds, as the CRD keeps one limit per type.
func applyGPUTotal(c *conversion, value string) (string, error) {
	parts := strings.Split(value, ":")
	if len(parts) != 3 || parts[0] == "" {
		return "", fmt.Errorf("not gpu-type:min:max")
	}
	least, most, err := parseMinMax(parts[1] + ":" + parts[2])
	if err != nil {
		return "", err
	}
	gpuType := parts[0]
	if !strings.Contains(gpuType, "/") {
		c.warnf("--gpu-total=%s: upstream counts GPUs by the cloud's GPU type (and only on GKE); capi-autoscaler counts them by extended resource name such as nvidia.com/gpu, or, for a type without a slash, as the devices of the DRA driver of that name such as gpu.nvidia.com: check the type", value)
	}
	gpus := &limits(&c.spec).GPUs
	*gpus = slices.DeleteFunc(*gpus, func(g autoscalingv1alpha1.GPULimit) bool { return g.Type == gpuType })
	if len(*gpus) == autoscalingv1alpha1.MaxGPULimits {
		return "", fmt.Errorf("spec.resourceLimits.gpus takes at most %d types", autoscalingv1alpha1.MaxGPULimits)
	}
	*gpus = append(*gpus, autoscalingv1alpha1.GPULimit{Type: gpuType, Min: least, Max: most})
	return fmt.Sprintf("%s min %d, max %d", gpuType, least, most), nil
}

// applyUtilizationThreshold writes the threshold as the CRD's decimal
// string; the manager's rules check its range.
func applyUtilizationThreshold(c *conversion, value string) (string, error) {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil || math.IsNaN(f) {
		return "", fmt.Errorf("not a number")
	}
	threshold := formatDecimal(f)
	scaleDown(&c.spec).UtilizationThreshold = ptr.To(threshold)
	return strconv.Quote(threshold), nil
}

// applyUnreadyPercentage: upstream takes a decimal, the CRD a whole percentage.
func applyUnreadyPercentage(c *conversion, value string) (string, error) {
	f, err := strconv.ParseFloat(value, 64)
	if err != nil {
		return "", fmt.Errorf("not a number")
	}
	if f != math.Trunc(f) || f < 0 || f > 100 {
		return "", fmt.Errorf("spec.clusterHealth.maxTotalUnreadyPercentage is a whole number from 0 to 100")
	}
	clusterHealth(&c.spec).MaxTotalUnreadyPercentage = ptr.To(int32(f))
	return formatDecimal(f), nil
}
