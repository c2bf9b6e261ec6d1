package convert

import (
	"cmp"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/cluster-api/util/secret"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// discoverySpec is one clusterapi node group auto-discovery of upstream:
// --node-group-auto-discovery=clusterapi:clusterName=X,namespace=Y,k=v.
type discoverySpec struct {
	written                string
	clusterName, namespace string
	labels                 []string
}

// notMapped is what apply returns for a value that has no field: the
// report lists the flag as not mapped, for the reason it gives.
type notMapped string

func (n notMapped) Error() string { return string(n) }

// identify finds the Cluster the ClusterAutoscaler is for, and its
// namespace: from convert's flags, else from the node group discovery.
func (c *conversion) identify(parsed []upstreamFlag) error {
	if err := c.checkCloudProvider(parsed); err != nil {
		return err
	}
	chosen := c.chooseDiscovery(c.discoveries(parsed))
	c.cluster = cmp.Or(c.opts.clusterName, chosen.clusterName)
	if c.cluster == "" {
		return noClusterError(parsed, chosen)
	}
	c.namespace = cmp.Or(c.opts.namespace, chosen.namespace)
	if err := c.checkNames(); err != nil {
		return err
	}
	switch {
	case c.namespace == "":
		c.warnf("no namespace: neither -n nor the discovery's namespace= names the Cluster's; metadata.namespace is left out: apply the ClusterAutoscaler with -n <the namespace of Cluster %s>", c.cluster)
	case chosen.namespace != "" && chosen.namespace != c.namespace:
		c.warnf("-n %s is not the namespace %s of the discovery: a ClusterAutoscaler must be in the namespace of its Cluster", c.namespace, chosen.namespace)
	}
	return nil
}

// checkNames refuses names the API server would refuse.
func (c *conversion) checkNames() error {
	if problems := validation.IsDNS1123Subdomain(c.cluster); len(problems) > 0 || len(c.cluster) > autoscalingv1alpha1.MaxClusterNameLength {
		return fmt.Errorf("the Cluster name %q is not the name of a Cluster: %s", c.cluster, strings.Join(append(problems, fmt.Sprintf("at most %d characters", autoscalingv1alpha1.MaxClusterNameLength)), "; "))
	}
	if name := cmp.Or(c.opts.name, c.cluster); len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("--name %q is not a name of an object: %s", name, strings.Join(validation.IsDNS1123Subdomain(name), "; "))
	}
	if problems := validation.IsDNS1123Label(c.namespace); c.namespace != "" && len(problems) > 0 {
		return fmt.Errorf("the namespace %q is not the name of a namespace: %s", c.namespace, strings.Join(problems, "; "))
	}
	return nil
}

// checkCloudProvider refuses to convert another provider's configuration.
func (c *conversion) checkCloudProvider(parsed []upstreamFlag) error {
	var provider *upstreamFlag
	for i := range parsed {
		if parsed[i].name == "cloud-provider" {
			provider = &parsed[i]
		}
	}
	if provider == nil {
		c.warnf("no --cloud-provider: upstream's default is gce; converted as a configuration of the clusterapi provider")
		return nil
	}
	if provider.value != "clusterapi" {
		hint := ""
		if c.in.chartDefaults["cloud-provider"] {
			hint = " (the chart's default cloudProvider; the values need cloudProvider: clusterapi)"
		}
		return fmt.Errorf("%s%s: convert converts configurations of upstream's clusterapi provider only: %s",
			provider.written, hint, flagsByName["cloud-provider"].reason)
	}
	c.given["cloud-provider"] = true
	c.report.unmapped = append(c.report.unmapped, unmappedFlag{flag: provider.written, reason: "nothing to set: " + flagsByName["cloud-provider"].reason})
	return nil
}

// discoveries reads the clusterapi node group discoveries.
func (c *conversion) discoveries(parsed []upstreamFlag) []discoverySpec {
	var found []discoverySpec
	for _, f := range parsed {
		if f.name != "node-group-auto-discovery" {
			continue
		}
		c.given[f.name] = true
		rest, ok := strings.CutPrefix(f.value, "clusterapi")
		if !ok || (rest != "" && !strings.HasPrefix(rest, ":")) {
			c.warnf("%s: not a discovery of the clusterapi provider: left out", f.written)
			continue
		}
		found = append(found, c.parseDiscovery(f.written, strings.TrimPrefix(rest, ":")))
	}
	return found
}

// parseDiscovery reads key=value pairs: clusterName, namespace and labels.
func (c *conversion) parseDiscovery(written, pairs string) discoverySpec {
	d := discoverySpec{written: written}
	for _, pair := range strings.Split(pairs, ",") {
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, "=")
		switch {
		case !ok:
			c.warnf("%s: %q is not key=value: left out", written, pair)
		case key == "clusterName":
			d.clusterName = value
		case key == "namespace":
			d.namespace = value
		default:
			d.labels = append(d.labels, pair)
		}
	}
	return d
}

// chooseDiscovery picks the discovery of the Cluster to convert for: the
// first of --cluster-name, else the first that names a Cluster, else the
// first.
func (c *conversion) chooseDiscovery(found []discoverySpec) discoverySpec {
	if len(found) == 0 {
		return discoverySpec{}
	}
	score := func(d discoverySpec) int {
		switch {
		case d.clusterName != "" && d.clusterName == c.opts.clusterName:
			return 2
		case d.clusterName != "":
			return 1
		}
		return 0
	}
	chosen := found[0]
	for _, d := range found[1:] {
		if score(d) > score(chosen) {
			chosen = d
		}
	}
	for _, d := range found {
		if d.written != chosen.written {
			c.report.unmapped = append(c.report.unmapped, unmappedFlag{flag: d.written,
				reason: fmt.Sprintf("a ClusterAutoscaler autoscales one Cluster: converted for the discovery %s; run convert with --cluster-name for each other Cluster", chosen.written)})
		}
	}
	c.reportDiscovery(chosen)
	return chosen
}

// reportDiscovery says what the chosen discovery became.
func (c *conversion) reportDiscovery(d discoverySpec) {
	var parts []string
	if d.clusterName != "" {
		parts = append(parts, "clusterName "+d.clusterName)
	}
	if d.namespace != "" {
		parts = append(parts, "namespace "+d.namespace)
	}
	if len(parts) > 0 {
		c.report.mapped = append(c.report.mapped, mappedFlag{flag: d.written, field: "spec.clusterName, metadata.namespace", value: strings.Join(parts, ", ")})
	}
	switch {
	case d.clusterName == "" && c.opts.clusterName != "":
		c.warnf("%s names no Cluster: upstream autoscales every Cluster it matches; this ClusterAutoscaler autoscales %s only", d.written, c.opts.clusterName)
	case d.clusterName != "" && c.opts.clusterName != "" && d.clusterName != c.opts.clusterName:
		c.warnf("--cluster-name %s is not the Cluster %s of %s: the ClusterAutoscaler is for %s", c.opts.clusterName, d.clusterName, d.written, c.opts.clusterName)
	}
	if len(d.labels) > 0 {
		c.warnf("%s: upstream autoscales only the node groups labelled %s; capi-autoscaler autoscales every node group of the Cluster that has the size annotations: remove them from the node groups that should not be autoscaled",
			d.written, strings.Join(d.labels, ","))
	}
}

func noClusterError(parsed []upstreamFlag, d discoverySpec) error {
	why := "no --node-group-auto-discovery=clusterapi:clusterName=... names it"
	if d.written != "" {
		why = d.written + " names no clusterName (upstream then autoscales every Cluster it matches)"
	}
	for _, f := range parsed {
		if f.name == "cluster-name" && f.value != "" {
			why += fmt.Sprintf("; upstream's --cluster-name is %q", f.value)
		}
	}
	return fmt.Errorf("which Cluster to autoscale? %s: pass --cluster-name", why)
}

// applyNodes reads --nodes=min:max:name: capi-autoscaler, as upstream's
// clusterapi provider, takes node group sizes from annotations of the node
// group, which the report lists.
func applyNodes(c *conversion, value string) (string, error) {
	parts := strings.SplitN(value, ":", 3)
	if len(parts) != 3 || parts[2] == "" {
		return "", fmt.Errorf("not min:max:name")
	}
	least, most, err := parseMinMax(parts[0] + ":" + parts[1])
	if err != nil {
		return "", err
	}
	group := nodeGroupBounds{kind: "MachineDeployment", namespace: c.namespace, name: parts[2], min: least, max: most}
	switch names := strings.Split(parts[2], "/"); len(names) {
	case 2:
		group.namespace, group.name = names[0], names[1]
	case 3:
		group.kind, group.namespace, group.name = names[0], names[1], names[2]
	}
	switch group.kind {
	case "MachineDeployment", "MachineSet", "MachinePool":
	default:
		return "", fmt.Errorf("%s is no MachineDeployment, MachineSet or MachinePool", group.kind)
	}
	c.report.nodeGroups = append(c.report.nodeGroups, group)
	return fmt.Sprintf("%s %s: min %d, max %d", group.kind, group.name, least, most), nil
}

// applyKubeconfig reads the kubeconfig of the workload cluster. Only a
// Secret of the ClusterAutoscaler's namespace, other than the Cluster's
// own kubeconfig, needs a field: spec.workloadKubeconfigSecretRef.
func applyKubeconfig(c *conversion, path string) (string, error) {
	var file secretFile
	ok := false
	if c.in.secretOf != nil {
		file, ok = c.in.secretOf(path)
	}
	if !ok {
		return "", notMapped(reasonWorkloadConnection + " (convert does not see which Secret " + path + " comes from)")
	}
	if file.name == secret.Name(c.cluster, secret.Kubeconfig) && file.key == secret.KubeconfigDataName {
		return "", notMapped(fmt.Sprintf("the Cluster's own kubeconfig Secret %s, which capi-autoscaler uses by default: nothing to set", file.name))
	}
	if file.namespace != "" && c.namespace != "" && file.namespace != c.namespace {
		return "", notMapped(fmt.Sprintf("the kubeconfig of Secret %s/%s: spec.workloadKubeconfigSecretRef names a Secret of the ClusterAutoscaler's namespace %s; copy the Secret there and set it",
			file.namespace, file.name, c.namespace))
	}
	ref := &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: file.name}
	if file.key != secret.KubeconfigDataName {
		ref.Key = file.key
	}
	c.spec.WorkloadKubeconfigSecretRef = ref
	shown := fmt.Sprintf("Secret %s, key %s", file.name, file.key)
	if file.namespace == "" {
		shown += ", which must be in the ClusterAutoscaler's namespace"
	}
	return shown, nil
}

// object is the ClusterAutoscaler the conversion made.
func (c *conversion) object() autoscalingv1alpha1.ClusterAutoscaler {
	spec := c.spec
	spec.ClusterName = c.cluster
	spec.Mode = c.opts.mode
	return autoscalingv1alpha1.ClusterAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: autoscalingv1alpha1.GroupVersion.String(), Kind: cli.ClusterAutoscalerKind},
		ObjectMeta: metav1.ObjectMeta{Name: cmp.Or(c.opts.name, c.cluster), Namespace: c.namespace},
		Spec:       spec,
	}
}
