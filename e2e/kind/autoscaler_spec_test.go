//go:build kind

package kind

import (
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"
	capie2e "sigs.k8s.io/cluster-api/test/e2e"
	frameworkclusterctl "sigs.k8s.io/cluster-api/test/framework/clusterctl"
)

// Cluster API's own end-to-end test of a cluster autoscaler, run against
// capi-autoscaler: a Cluster of the autoscaler flavor in a namespace of its
// own, capi-autoscaler installed for it on the management cluster by the
// spec's AUTOSCALER_WORKLOAD template, then scale up, manual scaling with the
// autoscaler off, scale down once it is on again, and scale to and from
// zero, for the MachineDeployment; then scale up, manual scaling and scale
// down for the MachinePool (a DockerMachinePool).
var _ = Describe("Cluster API's AutoscalerSpec", Label("kind"), func() {
	capie2e.AutoscalerSpec(ctx, func() capie2e.AutoscalerSpecInput {
		return capie2e.AutoscalerSpecInput{
			E2EConfig:                             autoscalerSpecConfig(),
			ClusterctlConfigPath:                  clusterctlConfigPath,
			BootstrapClusterProxy:                 bootstrapClusterProxy,
			ArtifactFolder:                        filepath.Join(artifactFolder, "autoscaler-spec"),
			InfrastructureProvider:                ptr.To("docker"),
			Flavor:                                ptr.To(autoscalerFlavor),
			InfrastructureMachineTemplateKind:     "dockermachinetemplates",
			InfrastructureMachinePoolTemplateKind: "dockermachinepooltemplates",
			InfrastructureMachinePoolKind:         "dockermachinepools",
			// The tag of `make docker-build`'s image, loaded into the
			// management cluster.
			AutoscalerVersion:          "dev",
			InstallOnManagementCluster: true,
			ScaleToAndFromZero:         true,
		}
	})
})

// autoscalerSpecConfig is the part of Cluster API's e2e configuration the
// spec reads: the Kubernetes version, the AUTOSCALER_WORKLOAD template, and
// its waits, roomier than Cluster API's own for CAPD machines on two cores.
func autoscalerSpecConfig() *frameworkclusterctl.E2EConfig {
	return &frameworkclusterctl.E2EConfig{
		Variables: map[string]string{
			capie2e.KubernetesVersion:          kubernetesVersion,
			capie2e.AutoscalerWorkloadYAMLPath: filepath.Join(repositoryRoot, "e2e", "kind", "data", "autoscaler-on-management-cluster.yaml"),
		},
		Intervals: map[string][]string{
			"default/wait-controllers":        {"5m", "5s"},
			"default/wait-cluster":            {"5m", "5s"},
			"default/wait-control-plane":      {"10m", "5s"},
			"default/wait-worker-nodes":       {"6m", "5s"},
			"default/wait-machine-pool-nodes": {"6m", "5s"},
			"default/wait-autoscaler":         {"6m", "5s"},
			"default/wait-delete-cluster":     {"5m", "5s"},
		},
	}
}
