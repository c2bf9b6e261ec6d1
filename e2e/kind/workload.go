//go:build kind

package kind

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	workloadClusterName      = "capi-autoscaler-e2e-wl"
	workloadClusterNamespace = "default"

	// poolLabel is set on each MachineDeployment's Machines through the
	// Cluster topology; Cluster API copies it to their Nodes, and the
	// autoscaler puts it on the group's template node, so pods can ask for
	// one group.
	poolLabel = "node.cluster.x-k8s.io/pool"

	// watchFilter is the --watch-filter of the capi-autoscaler the suite
	// installs: it serves the Clusters and ClusterAutoscalers labelled
	// cluster.x-k8s.io/watch-filter with it.
	watchFilter = managementClusterName
)

// workerGroup is a MachineDeployment of the workload cluster's topology.
type workerGroup struct {
	// name is the topology's name for it, also its poolLabel value.
	name             string
	minSize, maxSize int
}

var (
	// workers starts at its min size and grows for pods.
	workers = workerGroup{name: "md-0", minSize: 1, maxSize: 3}
	// fromZero starts empty: the autoscaler knows its nodes from CAPD's
	// DockerMachineTemplate status.capacity.
	fromZero = workerGroup{name: "md-from-zero", minSize: 0, maxSize: 1}
)

// workloadClusterVariables are the clusterctl variables of Cluster API's
// Docker templates that `clusterctl generate cluster` does not set from its
// flags.
var workloadClusterVariables = map[string]string{
	"DOCKER_SERVICE_CIDRS":  "10.128.0.0/12",
	"DOCKER_POD_CIDRS":      "192.168.0.0/16",
	"DOCKER_SERVICE_DOMAIN": "cluster.local",
}

const (
	kubernetesVersion = "v1.36.3"
	// autoscalerFlavor is the flavor of the Cluster template in the
	// repository's CAPD release, named as in Cluster API's e2e
	// configuration for the Docker provider.
	autoscalerFlavor = "topology-autoscaler"
)

// kubeProxyWithoutConntrackLimit lets kube-proxy start where it may not
// change the host's nf_conntrack_max (2 CPUs and no CAP_SYS_ADMIN over the
// host's netns): the KubeadmConfig API has no kube-proxy configuration, so
// the first control plane patches kubeadm's and restarts kube-proxy.
const kubeProxyWithoutConntrackLimit = `kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get configmap kube-proxy -o yaml | sed 's/maxPerCore: null/maxPerCore: 0/' | kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f - && kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system delete pod -l k8s-app=kube-proxy`

// writeDockerTemplates adds to the repository's CAPD release what `clusterctl
// generate cluster --flavor topology-autoscaler` reads: Cluster API's e2e
// data for the Docker provider, the ClusterClass quick-start and the Cluster
// template of the autoscaler flavor, changed only where this host needs it
// or what the suite chooses: kubeadm adapted to the host (adaptToHost), the
// MachineDeployment with the workers group's bounds, and no CNI
// ClusterResourceSet (the node image's CNI configures itself). The
// MachinePool stays, without bounds, as Cluster API's AutoscalerSpec
// expects.
func writeDockerTemplates(repositoryDir string) error {
	testDir, err := moduleDir("sigs.k8s.io/cluster-api/test", capiVersion)
	if err != nil {
		return err
	}
	data := filepath.Join(testDir, "e2e", "data", "infrastructure-docker", "main")
	release := filepath.Join(repositoryDir, clusterctlv1.ManifestLabel("docker", clusterctlv1.InfrastructureProviderType), capiVersion)

	clusterClass, err := readTemplate(filepath.Join(data, "clusterclass-quick-start.yaml"))
	if err != nil {
		return err
	}
	for i := range clusterClass {
		if err := adaptToHost(&clusterClass[i]); err != nil {
			return err
		}
	}
	if err := writeTemplate(filepath.Join(release, "clusterclass-quick-start.yaml"), clusterClass); err != nil {
		return err
	}

	template, err := readTemplate(filepath.Join(data, "cluster-template-topology-autoscaler", "cluster-autoscaler.yaml"))
	if err != nil {
		return err
	}
	var cluster []unstructured.Unstructured
	for _, obj := range template {
		switch obj.GetKind() {
		case "ConfigMap", "ClusterResourceSet":
			continue
		case "Cluster":
			obj.SetLabels(nil) // the label only selected the ClusterResourceSet
			if err := setWorkerGroups(&obj, workers); err != nil {
				return err
			}
		}
		cluster = append(cluster, obj)
	}
	return writeTemplate(filepath.Join(release, "cluster-template-"+autoscalerFlavor+".yaml"), cluster)
}

// readTemplate reads the objects of a clusterctl template, its variables
// left as they are.
func readTemplate(path string) ([]unstructured.Unstructured, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return utilyaml.ToUnstructured(raw)
}

// writeTemplate writes objects as a clusterctl template. Variables stay plain
// YAML scalars, so that clusterctl's substitution gives them their type.
func writeTemplate(path string, objs []unstructured.Unstructured) error {
	docs := make([][]byte, 0, len(objs))
	for _, obj := range objs {
		doc, err := yaml.Marshal(obj.Object)
		if err != nil {
			return err
		}
		docs = append(docs, doc)
	}
	return os.WriteFile(path, bytes.Join(docs, []byte("---\n")), 0o644)
}

// workloadClusterObjects generates the suite's workload cluster as `clusterctl
// generate cluster --flavor topology-autoscaler` does, with the ClusterClass
// it needs, then gives it a second group that starts at zero and the label
// of the installed capi-autoscaler's watch filter.
func workloadClusterObjects(ctx context.Context, clusterctl client.Client) ([]unstructured.Unstructured, error) {
	template, err := clusterctl.GetClusterTemplate(ctx, client.GetClusterTemplateOptions{
		Kubeconfig: client.Kubeconfig{Path: kubeconfig},
		ProviderRepositorySource: &client.ProviderRepositorySourceOptions{
			InfrastructureProvider: "docker:" + capiVersion,
			Flavor:                 autoscalerFlavor,
		},
		ClusterName:              workloadClusterName,
		TargetNamespace:          workloadClusterNamespace,
		KubernetesVersion:        kubernetesVersion,
		ControlPlaneMachineCount: ptr.To[int64](1),
	})
	if err != nil {
		return nil, fmt.Errorf("generating the workload cluster: %w", err)
	}
	raw, err := template.Yaml()
	if err != nil {
		return nil, err
	}
	objs, err := utilyaml.ToUnstructured(raw)
	if err != nil {
		return nil, err
	}
	for i := range objs {
		if objs[i].GetKind() != "Cluster" {
			continue
		}
		if err := setWorkerGroups(&objs[i], workers, fromZero); err != nil {
			return nil, err
		}
		// The suite's own scenarios use MachineDeployments; a MachinePool
		// would only add a machine to the two cores.
		unstructured.RemoveNestedField(objs[i].Object, "spec", "topology", "workers", "machinePools")
		objs[i].SetLabels(map[string]string{clusterv1.WatchLabel: watchFilter})
	}
	return objs, nil
}

// adaptToHost makes the ClusterClass's kubeadm work on the build machines
// (docs/kind-e2e.md, host adaptations): cgroup v1 fails kubeadm's
// SystemVerification preflight check, and kube-proxy must not touch the
// host's conntrack limit.
func adaptToHost(obj *unstructured.Unstructured) error {
	ignore := []any{"SystemVerification"}
	switch obj.GetKind() {
	case "KubeadmControlPlaneTemplate":
		spec := []string{"spec", "template", "spec", "kubeadmConfigSpec"}
		for _, configuration := range []string{"initConfiguration", "joinConfiguration"} {
			if err := unstructured.SetNestedSlice(obj.Object, ignore, append(spec, configuration, "nodeRegistration", "ignorePreflightErrors")...); err != nil {
				return err
			}
		}
		return unstructured.SetNestedSlice(obj.Object, []any{kubeProxyWithoutConntrackLimit}, append(spec, "postKubeadmCommands")...)
	case "KubeadmConfigTemplate":
		return unstructured.SetNestedSlice(obj.Object, ignore, "spec", "template", "spec", "joinConfiguration", "nodeRegistration", "ignorePreflightErrors")
	}
	return nil
}

// setWorkerGroups gives the Cluster's topology one MachineDeployment per
// group, each a copy of the template's first one, with the group's bounds
// and pool label (replicas left to the autoscaler).
func setWorkerGroups(cluster *unstructured.Unstructured, groups ...workerGroup) error {
	workersPath := []string{"spec", "topology", "workers"}
	machineDeployments, _, err := unstructured.NestedSlice(cluster.Object, append(workersPath, "machineDeployments")...)
	if err != nil {
		return err
	}
	if len(machineDeployments) == 0 {
		return fmt.Errorf("the Cluster %s has no MachineDeployment", cluster.GetName())
	}
	template := machineDeployments[0].(map[string]any)
	topologies := make([]any, 0, len(groups))
	for _, group := range groups {
		topology := runtime.DeepCopyJSON(template)
		topology["name"] = group.name
		topology["metadata"] = map[string]any{
			"annotations": map[string]any{
				clusterv1.AutoscalerMinSizeAnnotation: strconv.Itoa(group.minSize),
				clusterv1.AutoscalerMaxSizeAnnotation: strconv.Itoa(group.maxSize),
			},
			"labels": map[string]any{poolLabel: group.name},
		}
		topologies = append(topologies, topology)
	}
	return unstructured.SetNestedSlice(cluster.Object, topologies, append(workersPath, "machineDeployments")...)
}
