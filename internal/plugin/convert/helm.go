package convert

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// helmValues are values of the upstream cluster-autoscaler Helm chart
// (kubernetes/autoscaler, charts/cluster-autoscaler), as Helm reads them.
type helmValues = map[string]any

// chartDefaults are the defaults of the chart's values.yaml that its
// templates/deployment.yaml turns into the container's command line.
func chartDefaults() helmValues {
	return helmValues{
		"cloudProvider": "aws",
		"autoDiscovery": helmValues{
			"clusterName": nil,
			"namespace":   nil,
			"labels":      []any{},
		},
		"autoscalingGroups":                []any{},
		"clusterAPIMode":                   "incluster-incluster",
		"clusterAPIKubeconfigSecret":       "",
		"clusterAPIWorkloadKubeconfigPath": "/etc/kubernetes/value",
		"clusterAPICloudConfigPath":        "/etc/kubernetes/mgmt-kubeconfig",
		"clusterAPIConfigMapsNamespace":    "",
		"extraArgs": helmValues{
			"logtostderr":     true,
			"stderrthreshold": "info",
			"v":               float64(4),
		},
		"customArgs":         []any{},
		"extraVolumeSecrets": helmValues{},
		"expanderPriorities": helmValues{},
		"image": helmValues{
			"repository": "registry.k8s.io/autoscaling/cluster-autoscaler",
			"tag":        "",
		},
	}
}

// releaseNamespace stands for the namespace Helm installs the release in,
// which values do not tell.
const releaseNamespace = "<release namespace>"

// readHelmValues renders the command line the chart's Deployment gets with
// the values of files (read by the caller, named by names), merged over
// the chart's defaults as Helm merges them.
func readHelmValues(files [][]byte, names []string) (convertInput, error) {
	user := helmValues{}
	for i, data := range files {
		var values helmValues
		if err := yaml.Unmarshal(data, &values); err != nil {
			return convertInput{}, fmt.Errorf("reading the Helm values %s: %w", names[i], err)
		}
		user = mergeValues(user, values)
	}
	values := coalesce(chartDefaults(), user)
	in := convertInput{
		source:        "the Helm values " + strings.Join(names, ", ") + " over the chart's defaults",
		chartDefaults: chartDefaultFlags(user),
		image:         imageOfValues(values),
		secretOf:      helmSecretFiles(values),
	}
	in.args = renderArgs(values, &in)
	if err := helmPriorities(values, &in); err != nil {
		return convertInput{}, err
	}
	return in, nil
}

// mergeValues merges the values of a later file over those of earlier
// ones, as Helm merges -f files: maps merge key by key, other values,
// nulls too, replace.
func mergeValues(dst, src helmValues) helmValues {
	out := maps.Clone(dst)
	for key, value := range src {
		srcMap, srcIsMap := value.(helmValues)
		dstMap, dstIsMap := out[key].(helmValues)
		if srcIsMap && dstIsMap {
			out[key] = mergeValues(dstMap, srcMap)
			continue
		}
		out[key] = value
	}
	return out
}

// coalesce merges the user's values src over the chart's defaults dst as
// Helm does: maps merge key by key, other values replace, and a null
// removes a default.
func coalesce(dst, src helmValues) helmValues {
	out := maps.Clone(dst)
	for key, value := range src {
		srcMap, srcIsMap := value.(helmValues)
		dstMap, dstIsMap := out[key].(helmValues)
		_, inDst := out[key]
		switch {
		case value == nil && inDst:
			delete(out, key)
		case srcIsMap && dstIsMap:
			out[key] = coalesce(dstMap, srcMap)
		default:
			out[key] = value
		}
	}
	return out
}

// chartDefaultFlags are the flags of the chart's default extraArgs that
// the user's values leave as they are.
func chartDefaultFlags(user helmValues) map[string]bool {
	userArgs, _ := user["extraArgs"].(helmValues)
	defaults := map[string]bool{"cloud-provider": user["cloudProvider"] == nil}
	for key := range chartDefaults()["extraArgs"].(helmValues) {
		if _, set := userArgs[key]; !set {
			defaults[key] = true
		}
	}
	return defaults
}

// renderArgs renders the container's command line as the chart's
// templates/deployment.yaml does.
func renderArgs(values helmValues, in *convertInput) []string {
	provider := helmString(values["cloudProvider"])
	mode := helmString(values["clusterAPIMode"])
	args := []string{"./cluster-autoscaler", "--cloud-provider=" + provider}
	namespace := releaseNamespace
	if provider == "clusterapi" && mode == "kubeconfig-incluster" {
		namespace = cmp.Or(helmString(values["clusterAPIConfigMapsNamespace"]), "kube-system")
	}
	args = append(args, "--namespace="+namespace)
	groups, _ := values["autoscalingGroups"].([]any)
	for _, g := range groups {
		group, _ := g.(helmValues)
		args = append(args, fmt.Sprintf("--nodes=%s:%s:%s", helmString(group["minSize"]), helmString(group["maxSize"]), helmString(group["name"])))
	}
	discovery := capiDiscovery(values, in)
	if provider == "clusterapi" {
		if discovery != "" {
			args = append(args, "--node-group-auto-discovery=clusterapi:"+discovery)
		}
		args = append(args, clusterAPIModeArgs(values, mode, in)...)
	}
	if discovery == "" && len(groups) == 0 {
		in.warnings = append(in.warnings, "with these values the chart creates no Deployment: it needs autoDiscovery.clusterName, autoDiscovery.namespace, autoDiscovery.labels or autoscalingGroups")
	}
	args = append(args, extraArgs(values)...)
	custom, _ := values["customArgs"].([]any)
	for _, arg := range custom {
		args = append(args, helmString(arg))
	}
	return args
}

// capiDiscovery is the chart's clusterapi auto-discovery: clusterName,
// namespace and labels, as key=value pairs.
func capiDiscovery(values helmValues, in *convertInput) string {
	discovery, _ := values["autoDiscovery"].(helmValues)
	var pairs []string
	if clusterName := helmString(discovery["clusterName"]); clusterName != "" {
		if strings.Contains(clusterName, "{{") {
			in.warnings = append(in.warnings, fmt.Sprintf("autoDiscovery.clusterName %q is a template, which convert does not render: pass --cluster-name", clusterName))
		}
		pairs = append(pairs, "clusterName="+clusterName)
	}
	if namespace := helmString(discovery["namespace"]); namespace != "" {
		pairs = append(pairs, "namespace="+namespace)
	}
	labels, _ := discovery["labels"].([]any)
	for _, l := range labels {
		label, _ := l.(helmValues)
		for _, key := range slices.Sorted(maps.Keys(label)) {
			pairs = append(pairs, key+"="+helmString(label[key]))
		}
	}
	return strings.Join(pairs, ",")
}

// clusterAPIModeArgs are the kubeconfig flags of the chart's clusterAPIMode,
// workload-management: incluster or kubeconfig each.
func clusterAPIModeArgs(values helmValues, mode string, in *convertInput) []string {
	workload := "--kubeconfig=" + helmString(values["clusterAPIWorkloadKubeconfigPath"])
	management := "--cloud-config=" + helmString(values["clusterAPICloudConfigPath"])
	switch mode {
	case "incluster-incluster":
		return nil
	case "incluster-kubeconfig":
		return []string{management}
	case "kubeconfig-incluster":
		return []string{workload, "--clusterapi-cloud-config-authoritative"}
	case "kubeconfig-kubeconfig":
		return []string{workload, management}
	case "single-kubeconfig":
		return []string{workload}
	}
	in.warnings = append(in.warnings, fmt.Sprintf("clusterAPIMode %q is none of the chart's modes: no kubeconfig flags rendered", mode))
	return nil
}

// extraArgs are the chart's extraArgs, in the order of their keys, as Go
// templates range over maps; what follows a key's first _ is dropped, so
// that a flag can be given several times, and a null value gives the flag
// alone.
func extraArgs(values helmValues) []string {
	extra, _ := values["extraArgs"].(helmValues)
	var args []string
	for _, key := range slices.Sorted(maps.Keys(extra)) {
		name, _, _ := strings.Cut(key, "_")
		if extra[key] == nil {
			args = append(args, "--"+name)
			continue
		}
		args = append(args, "--"+name+"="+helmString(extra[key]))
	}
	return args
}

// helmString prints a value as a Helm template does: numbers are float64,
// and large ones print as 1e+06.
func helmString(value any) string {
	if value == nil {
		return ""
	}
	return fmt.Sprint(value)
}

func imageOfValues(values helmValues) string {
	image, _ := values["image"].(helmValues)
	if tag := helmString(image["tag"]); tag != "" {
		return helmString(image["repository"]) + ":" + tag
	}
	return helmString(image["repository"])
}

// helmSecretFiles says which Secret a file of the chart's container is:
// clusterAPIKubeconfigSecret is mounted in the directory of
// clusterAPIWorkloadKubeconfigPath, and each of extraVolumeSecrets at its
// mountPath.
func helmSecretFiles(values helmValues) func(string) (secretFile, bool) {
	mounts := map[string]*corev1.SecretVolumeSource{}
	if name := helmString(values["clusterAPIKubeconfigSecret"]); name != "" {
		dir := strings.TrimSuffix(helmString(values["clusterAPIWorkloadKubeconfigPath"]), "/value")
		mounts[dir] = &corev1.SecretVolumeSource{SecretName: name}
	}
	extra, _ := values["extraVolumeSecrets"].(helmValues)
	for key, v := range extra {
		volume, _ := v.(helmValues)
		source := &corev1.SecretVolumeSource{SecretName: cmp.Or(helmString(volume["name"]), key)}
		items, _ := volume["items"].([]any)
		for _, i := range items {
			item, _ := i.(helmValues)
			source.Items = append(source.Items, corev1.KeyToPath{Key: helmString(item["key"]), Path: helmString(item["path"])})
		}
		mounts[helmString(volume["mountPath"])] = source
	}
	return func(file string) (secretFile, bool) {
		for mountPath, volume := range mounts {
			if key, ok := keyOfMountedFile(volume, corev1.VolumeMount{MountPath: mountPath}, path.Clean(file)); ok {
				return secretFile{name: volume.SecretName, key: key}, true
			}
		}
		return secretFile{}, false
	}
}

// helmPriorities reads the chart's expanderPriorities, which it writes in
// the ConfigMap cluster-autoscaler-priority-expander: a map of priorities
// to node group patterns, or that map as a YAML string.
func helmPriorities(values helmValues, in *convertInput) error {
	priorities := values["expanderPriorities"]
	var text []byte
	switch p := priorities.(type) {
	case string:
		text = []byte(p)
	case helmValues:
		if len(p) == 0 {
			return nil
		}
		var err error
		if text, err = yaml.Marshal(p); err != nil {
			return err
		}
	default:
		return nil
	}
	parsed, err := parsePriorities(text)
	if err != nil {
		return fmt.Errorf("the Helm values' expanderPriorities: %w", err)
	}
	in.priorities, in.prioritiesSource = parsed, "the Helm values' expanderPriorities"
	return nil
}

// parsePriorities reads upstream's priority expander configuration: a
// YAML map of priorities to lists of node group ID patterns. The highest
// priority comes first.
func parsePriorities(text []byte) ([]autoscalingv1alpha1.ExpanderPriority, error) {
	var byPriority map[string][]string
	if err := yaml.Unmarshal(text, &byPriority); err != nil {
		return nil, fmt.Errorf("not a map of priorities to lists of patterns: %w", err)
	}
	priorities := make([]autoscalingv1alpha1.ExpanderPriority, 0, len(byPriority))
	for key, patterns := range byPriority {
		priority, err := strconv.ParseInt(key, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("priority %q is not an integer", key)
		}
		if len(patterns) == 0 {
			continue
		}
		if err := checkPatterns(patterns); err != nil {
			return nil, fmt.Errorf("priority %d: %w", priority, err)
		}
		priorities = append(priorities, autoscalingv1alpha1.ExpanderPriority{Priority: int32(priority), NodeGroupIDPatterns: patterns})
	}
	if len(priorities) > autoscalingv1alpha1.MaxExpanderPriorities {
		return nil, fmt.Errorf("%d priorities: spec.expanderPriorities takes at most %d", len(priorities), autoscalingv1alpha1.MaxExpanderPriorities)
	}
	sort.Slice(priorities, func(i, j int) bool { return priorities[i].Priority > priorities[j].Priority })
	return priorities, nil
}

// checkPatterns holds patterns to what spec.expanderPriorities takes:
// regular expressions in Go's syntax, as upstream's.
func checkPatterns(patterns []string) error {
	if len(patterns) > autoscalingv1alpha1.MaxNodeGroupIDPatterns {
		return fmt.Errorf("%d patterns: at most %d", len(patterns), autoscalingv1alpha1.MaxNodeGroupIDPatterns)
	}
	for _, pattern := range patterns {
		if pattern == "" || len(pattern) > autoscalingv1alpha1.MaxNodeGroupIDPatternLength {
			return fmt.Errorf("pattern %q: from 1 to %d characters", pattern, autoscalingv1alpha1.MaxNodeGroupIDPatternLength)
		}
		if _, err := regexp.Compile(pattern); err != nil {
			return fmt.Errorf("pattern %q: %w", pattern, err)
		}
	}
	return nil
}

// readPriorityConfigMap reads the priorities of upstream's ConfigMap
// cluster-autoscaler-priority-expander, key priorities.
func readPriorityConfigMap(data []byte, file string) ([]autoscalingv1alpha1.ExpanderPriority, error) {
	var configMap corev1.ConfigMap
	if err := yaml.Unmarshal(data, &configMap); err != nil {
		return nil, fmt.Errorf("reading the ConfigMap %s: %w", file, err)
	}
	text, ok := configMap.Data["priorities"]
	if !ok {
		return nil, fmt.Errorf("the ConfigMap %s has no key priorities, as upstream's cluster-autoscaler-priority-expander has", file)
	}
	priorities, err := parsePriorities([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("the priorities of %s: %w", file, err)
	}
	return priorities, nil
}
