// Package clusterctl checks that clusterctl installs, upgrades and deletes
// capi-autoscaler from its release artifacts as it does any provider: the
// artifacts come from `make release-manifests`, and the clusterctl library
// of the Cluster API module works on a real API server (envtest).
package clusterctl

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/cluster"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	logf "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/release"
)

const (
	providerName    = "capi-autoscaler"
	componentsFile  = "addon-components.yaml"
	targetNamespace = "capi-autoscaler-system"

	// The management cluster runs the Cluster API this module pins.
	coreProviderName      = "cluster-api"
	coreProviderNamespace = "capi-system"
	coreProviderVersion   = "v1.14.0"

	// releaseImage is the image the test's releases default to; clusterctl
	// wants a name with its registry.
	releaseImage = "registry.example.com/release/capi-autoscaler"

	// logVerbosityInConfig is what the clusterctl configuration file sets
	// CAPI_AUTOSCALER_LOG_VERBOSITY to.
	logVerbosityInConfig = "2"
)

// providerLabel is what clusterctl calls an AddonProvider named
// capi-autoscaler: its repository folder and its objects' label value.
var providerLabel = clusterctlv1.ManifestLabel(providerName, clusterctlv1.AddonProviderType)

var (
	ctx        context.Context
	env        *testenv.Environment
	kubeconfig client.Kubeconfig
	configFile string
	// repositoryDir is the local clusterctl repository configFile points at.
	repositoryDir string
	// oldVersion and newVersion are two releases of the newest release
	// series of metadata.yaml, to upgrade from one to the other.
	oldVersion, newVersion string
)

func TestClusterctl(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "clusterctl with the release artifacts")
}

var _ = BeforeSuite(func() {
	ctx = context.Background()
	logf.SetLogger(GinkgoLogr)

	var err error
	env, err = startManagementCluster()
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(env.Stop)

	dir := GinkgoT().TempDir()
	kubeconfig = client.Kubeconfig{Path: filepath.Join(dir, "kubeconfig")}
	Expect(writeKubeconfig(env.Config, kubeconfig.Path)).To(Succeed())

	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	oldVersion, newVersion, err = releaseVersions(filepath.Join(root, "metadata.yaml"))
	Expect(err).NotTo(HaveOccurred())

	repositoryDir = filepath.Join(dir, "repository")
	for _, version := range []string{oldVersion, newVersion} {
		Expect(release.Manifests(root, version, filepath.Join(repositoryDir, providerLabel, version), "RELEASE_IMAGE="+releaseImage)).To(Succeed())
	}
	Expect(writeCoreProviderRelease(filepath.Join(repositoryDir, coreProviderName, coreProviderVersion))).To(Succeed())

	configFile = filepath.Join(dir, "clusterctl.yaml")
	Expect(writeConfig(configFile, repositoryDir)).To(Succeed())

	Expect(registerCoreProvider(ctx, env, kubeconfig)).To(Succeed())
})

// startManagementCluster starts an API server with the Cluster API CRDs,
// without capi-autoscaler's: clusterctl installs it from the components.
func startManagementCluster() (*testenv.Environment, error) {
	return testenv.Start(testenv.Options{
		AddToScheme:        []func(*runtime.Scheme) error{clusterctlv1.AddToScheme, autoscalingv1alpha1.AddToScheme},
		WithoutProjectCRDs: true,
	})
}

// releaseVersions returns a first and a patch release of the newest
// release series in clusterctl's metadata.
func releaseVersions(metadataPath string) (string, string, error) {
	content, err := os.ReadFile(metadataPath)
	if err != nil {
		return "", "", err
	}
	metadata := &clusterctlv1.Metadata{}
	if err := yaml.UnmarshalStrict(content, metadata); err != nil {
		return "", "", fmt.Errorf("reading %s: %w", metadataPath, err)
	}
	if len(metadata.ReleaseSeries) == 0 {
		return "", "", fmt.Errorf("%s has no release series", metadataPath)
	}
	newest := slices.MaxFunc(metadata.ReleaseSeries, func(a, b clusterctlv1.ReleaseSeries) int {
		if a.Major != b.Major {
			return int(a.Major) - int(b.Major)
		}
		return int(a.Minor) - int(b.Minor)
	})
	return fmt.Sprintf("v%d.%d.0", newest.Major, newest.Minor), fmt.Sprintf("v%d.%d.1", newest.Major, newest.Minor), nil
}

// writeCoreProviderRelease writes the metadata of the Cluster API release
// the management cluster runs: clusterctl reads the core provider's contract
// from it before installing or upgrading any other provider.
func writeCoreProviderRelease(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	metadata := `apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3
kind: Metadata
releaseSeries:
- major: 1
  minor: 14
  contract: v1beta2
`
	return os.WriteFile(filepath.Join(dir, "metadata.yaml"), []byte(metadata), 0o644)
}

// writeConfig writes the clusterctl configuration a user writes: the
// providers entry pointing at the local repository, and a variable.
func writeConfig(path, repository string) error {
	content := fmt.Sprintf(`providers:
- name: %[1]s
  type: CoreProvider
  url: file://%[2]s/%[1]s/%[3]s/core-components.yaml
- name: %[4]s
  type: AddonProvider
  url: file://%[2]s/%[5]s/latest/%[6]s
CAPI_AUTOSCALER_LOG_VERBOSITY: "%[7]s"
`, coreProviderName, repository, coreProviderVersion, providerName, providerLabel, componentsFile, logVerbosityInConfig)
	return os.WriteFile(path, []byte(content), 0o644)
}

// registerCoreProvider leaves Cluster API as `clusterctl init` leaves it:
// recorded in clusterctl's inventory, and its CRDs, which envtest
// installed, with the labels clusterctl adds (clusterctl move only
// discovers the kinds of CRDs labelled as installed by clusterctl).
func registerCoreProvider(ctx context.Context, env *testenv.Environment, kubeconfig client.Kubeconfig) error {
	crds := &apiextensionsv1.CustomResourceDefinitionList{}
	if err := env.Client.List(ctx, crds); err != nil {
		return err
	}
	for i := range crds.Items {
		crd := &crds.Items[i]
		original := crd.DeepCopy()
		if crd.Labels == nil {
			crd.Labels = map[string]string{}
		}
		crd.Labels[clusterctlv1.ClusterctlLabel] = ""
		crd.Labels[clusterv1.ProviderNameLabel] = clusterctlv1.ManifestLabel(coreProviderName, clusterctlv1.CoreProviderType)
		if err := env.Client.Patch(ctx, crd, ctrlclient.MergeFrom(original)); err != nil {
			return err
		}
	}

	cfg, err := config.New(ctx, configFile)
	if err != nil {
		return err
	}
	inventory := cluster.New(cluster.Kubeconfig(kubeconfig), cfg).ProviderInventory()
	if err := inventory.EnsureCustomResourceDefinitions(ctx); err != nil {
		return err
	}
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: coreProviderNamespace}}); err != nil {
		return err
	}
	return inventory.Create(ctx, clusterctlv1.Provider{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: coreProviderNamespace,
			Name:      clusterctlv1.ManifestLabel(coreProviderName, clusterctlv1.CoreProviderType),
		},
		ProviderName: coreProviderName,
		Type:         string(clusterctlv1.CoreProviderType),
		Version:      coreProviderVersion,
	})
}

// newClusterctlClient returns the library behind the clusterctl command,
// reading configFile and working on the envtest API server.
func newClusterctlClient() (client.Client, error) {
	cfg, err := config.New(ctx, configFile)
	if err != nil {
		return nil, err
	}
	return client.New(ctx, configFile,
		client.InjectConfig(cfg),
		client.InjectClusterClientFactory(func(input client.ClusterClientFactoryInput) (cluster.Client, error) {
			return withoutCertManager{cluster.New(cluster.Kubeconfig(input.Kubeconfig), cfg, cluster.InjectYamlProcessor(input.Processor))}, nil
		}),
	)
}

// withoutCertManager is the management cluster as clusterctl sees it, with
// cert-manager taken as installed: its commands cannot be built here, and
// capi-autoscaler has no webhook that needs a certificate.
type withoutCertManager struct {
	cluster.Client
}

func (withoutCertManager) CertManager() cluster.CertManagerClient {
	return certManagerInstalled{}
}

type certManagerInstalled struct{}

var _ cluster.CertManagerClient = certManagerInstalled{}

func (certManagerInstalled) EnsureInstalled(context.Context) error     { return nil }
func (certManagerInstalled) EnsureLatestVersion(context.Context) error { return nil }
func (certManagerInstalled) PlanUpgrade(context.Context) (cluster.CertManagerUpgradePlan, error) {
	return cluster.CertManagerUpgradePlan{ExternallyManaged: true}, nil
}
func (certManagerInstalled) Images(context.Context) ([]string, error) { return nil, nil }

// writeKubeconfig writes a kubeconfig for cfg, which is how clusterctl
// finds a management cluster.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kubeconfig.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kubeconfig.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kubeconfig.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kubeconfig, path)
}
