//go:build kind

package kind

import (
	"context"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
)

const (
	workloadClusterName      = "capi-autoscaler-e2e-wl"
	workloadClusterNamespace = "default"
	// machineDeploymentMinSize and machineDeploymentMaxSize are the
	// autoscaler's bounds for the workload cluster's MachineDeployment, set
	// through the Cluster topology.
	machineDeploymentMinSize = "1"
	machineDeploymentMaxSize = "3"

	minSizeAnnotation = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	maxSizeAnnotation = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
)

// workloadClusterVariables are the clusterctl variables of Cluster API's
// Docker templates, as a user of `clusterctl generate` sets them.
var workloadClusterVariables = map[string]string{
	"CLUSTER_NAME":                workloadClusterName,
	"KUBERNETES_VERSION":          "v1.36.3",
	"CONTROL_PLANE_MACHINE_COUNT": "1",
	"DOCKER_SERVICE_CIDRS":        "10.128.0.0/12",
	"DOCKER_POD_CIDRS":            "192.168.0.0/16",
	"DOCKER_SERVICE_DOMAIN":       "cluster.local",
}

// kubeProxyWithoutConntrackLimit lets kube-proxy start where it may not
// change the host's nf_conntrack_max (2 CPUs and no CAP_SYS_ADMIN over the
// host's netns): the KubeadmConfig API has no kube-proxy configuration, so
// the first control plane patches kubeadm's and restarts kube-proxy.
const kubeProxyWithoutConntrackLimit = `kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system get configmap kube-proxy -o yaml | sed 's/maxPerCore: null/maxPerCore: 0/' | kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f - && kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system delete pod -l k8s-app=kube-proxy`

// workloadClusterObjects returns the ClusterClass quick-start of Cluster
// API's e2e data for the Docker provider and a Cluster of it with the
// autoscaler's bounds on its MachineDeployment, processed by the clusterctl
// library as `clusterctl generate yaml --from` does.
func workloadClusterObjects(ctx context.Context, clusterctl client.Client) ([]unstructured.Unstructured, error) {
	testDir, err := moduleDir("sigs.k8s.io/cluster-api/test", capiVersion)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(testDir, "e2e", "data", "infrastructure-docker", "main")
	clusterClass, err := processTemplate(ctx, clusterctl, filepath.Join(data, "clusterclass-quick-start.yaml"))
	if err != nil {
		return nil, err
	}
	for i := range clusterClass {
		if err := adaptToHost(&clusterClass[i]); err != nil {
			return nil, err
		}
	}
	cluster, err := processTemplate(ctx, clusterctl, filepath.Join(data, "cluster-template-topology-autoscaler", "cluster-autoscaler.yaml"))
	if err != nil {
		return nil, err
	}
	var objs []unstructured.Unstructured
	objs = append(objs, clusterClass...)
	for _, obj := range cluster {
		// The CNI of the node image configures itself; MachinePool node
		// groups do not exist yet.
		switch obj.GetKind() {
		case "ConfigMap", "ClusterResourceSet":
			continue
		case "Cluster":
			if err := setAutoscalerBounds(&obj); err != nil {
				return nil, err
			}
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

func processTemplate(ctx context.Context, clusterctl client.Client, path string) ([]unstructured.Unstructured, error) {
	template, err := clusterctl.ProcessYAML(ctx, client.ProcessYAMLOptions{URLSource: &client.URLSourceOptions{URL: path}})
	if err != nil {
		return nil, fmt.Errorf("processing %s: %w", path, err)
	}
	raw, err := template.Yaml()
	if err != nil {
		return nil, err
	}
	return utilyaml.ToUnstructured(raw)
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

// setAutoscalerBounds keeps the template's MachineDeployment (its replicas
// left to the autoscaler) with the suite's bounds, and drops its MachinePool.
func setAutoscalerBounds(cluster *unstructured.Unstructured) error {
	workers := []string{"spec", "topology", "workers"}
	unstructured.RemoveNestedField(cluster.Object, append(workers, "machinePools")...)
	machineDeployments, _, err := unstructured.NestedSlice(cluster.Object, append(workers, "machineDeployments")...)
	if err != nil {
		return err
	}
	if len(machineDeployments) != 1 {
		return fmt.Errorf("the Cluster template has %d MachineDeployments, want 1", len(machineDeployments))
	}
	annotations := map[string]any{minSizeAnnotation: machineDeploymentMinSize, maxSizeAnnotation: machineDeploymentMaxSize}
	if err := unstructured.SetNestedMap(machineDeployments[0].(map[string]any), annotations, "metadata", "annotations"); err != nil {
		return err
	}
	return unstructured.SetNestedSlice(cluster.Object, machineDeployments, append(workers, "machineDeployments")...)
}
