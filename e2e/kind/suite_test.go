//go:build kind

// Package kind runs capi-autoscaler against real kubelets: a kind management
// cluster with Cluster API and the Docker infrastructure provider (CAPD),
// installed the way clusterctl installs them, and capi-autoscaler installed
// from its release artifacts. The images come from `make e2e-images`
// (docs/kind-e2e.md).
package kind

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	logf "sigs.k8s.io/cluster-api/cmd/clusterctl/log"
	"sigs.k8s.io/cluster-api/test/framework"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	"sigs.k8s.io/yaml"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/release"
)

const (
	// managementClusterName and workloadClusterName are also the values of
	// the label kind and CAPD put on a cluster's containers
	// (io.x-k8s.kind.cluster): the suite removes what carries them, and
	// nothing else.
	managementClusterName = "capi-autoscaler-e2e"
	nodeImage             = "kindest/node:v1.36.3"
	// autoscalerImage is `make docker-build`'s image as the kind node's
	// containerd names it once loaded.
	autoscalerImage = "docker.io/library/capi-autoscaler:dev"
)

// managerImages are loaded into the management cluster: the released names
// of the Cluster API managers (the clusterctl configuration's image
// overrides point at them) and capi-autoscaler's.
var managerImages = []string{
	"registry.k8s.io/cluster-api/cluster-api-controller:" + capiVersion,
	"registry.k8s.io/cluster-api/kubeadm-bootstrap-controller:" + capiVersion,
	"registry.k8s.io/cluster-api/kubeadm-control-plane-controller:" + capiVersion,
	"registry.k8s.io/cluster-api/capd-manager:" + capiVersion,
	"capi-autoscaler:dev",
}

var keepClusters = flag.Bool("kind.keep", false, "Keep the management cluster after the run, for debugging (the next run removes it)")

var (
	ctx        = context.Background()
	kind       *kindcluster.Provider
	kubeconfig string
	management ctrlclient.Client
	clusterctl client.Client
	// autoscalerVersion is the release of capi-autoscaler the suite installs.
	autoscalerVersion string

	// repositoryRoot is this repository's top directory.
	repositoryRoot string
	// artifactFolder keeps what Cluster API's specs collect (logs, dumped
	// objects), in _artifacts/kind.
	artifactFolder string
	// clusterctlConfigPath names the suite's local repository.
	clusterctlConfigPath string
	// bootstrapClusterProxy is the management cluster for Cluster API's
	// specs.
	bootstrapClusterProxy framework.ClusterProxy
)

func TestKind(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "capi-autoscaler on kind with CAPD", Label("kind"))
}

var _ = BeforeSuite(func() {
	logf.SetLogger(GinkgoLogr)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	repositoryRoot = root
	artifactFolder = filepath.Join(root, "_artifacts", "kind")
	dir := GinkgoT().TempDir()

	By("Checking that Docker runs privileged containers here")
	timed("host check", func() {
		hostCheck := exec.Command(filepath.Join(root, "hack", "kind", "host-check.sh"))
		hostCheck.Stdout, hostCheck.Stderr = GinkgoWriter, GinkgoWriter
		Expect(hostCheck.Run()).To(Succeed())
	})

	kind = kindcluster.NewProvider(kindcluster.ProviderWithDocker())
	By("Removing the management cluster an interrupted run left")
	Expect(removeManagementCluster()).To(Succeed())

	By("Creating the kind management cluster")
	kubeconfigDir := dir
	if *keepClusters {
		// The kubeconfig of a kept cluster outlives the suite's temporary files.
		kubeconfigDir, err = os.MkdirTemp("", managementClusterName+"-")
		Expect(err).NotTo(HaveOccurred())
	}
	kubeconfig = filepath.Join(kubeconfigDir, "kubeconfig")
	timed("kind create cluster", func() {
		Expect(kind.Create(managementClusterName,
			kindcluster.CreateWithV1Alpha4Config(managementClusterConfig()),
			kindcluster.CreateWithNodeImage(nodeImage),
			kindcluster.CreateWithKubeconfigPath(kubeconfig),
			kindcluster.CreateWithWaitForReady(3*time.Minute),
			kindcluster.CreateWithDisplayUsage(false),
			kindcluster.CreateWithDisplaySalutation(false),
		)).To(Succeed())
	})
	DeferCleanup(func() {
		if *keepClusters {
			GinkgoWriter.Printf("Keeping the management cluster: KUBECONFIG=%s\n", kubeconfig)
			return
		}
		By("Removing the management cluster")
		Expect(removeManagementCluster()).To(Succeed())
	})

	By("Loading the manager images into the management cluster")
	timed("loading images", func() { Expect(loadImages(managerImages)).To(Succeed()) })

	restConfig, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	management, err = ctrlclient.New(restConfig, ctrlclient.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	proxyScheme := runtime.NewScheme()
	framework.TryAddDefaultSchemes(proxyScheme)
	Expect(autoscalingv1alpha1.AddToScheme(proxyScheme)).To(Succeed())
	bootstrapClusterProxy = framework.NewClusterProxy(managementClusterName, kubeconfig, proxyScheme)
	DeferCleanup(func() { bootstrapClusterProxy.Dispose(ctx) })

	By("Writing a local clusterctl repository: Cluster API from its modules, capi-autoscaler from its release artifacts")
	repositoryDir := filepath.Join(dir, "repository")
	clusterctlConfigPath = filepath.Join(dir, "clusterctl.yaml")
	timed("clusterctl repository", func() {
		Expect(writeClusterAPIRepository(repositoryDir)).To(Succeed())
		Expect(writeDockerTemplates(repositoryDir)).To(Succeed())
		autoscalerVersion, err = newestReleaseSeries(filepath.Join(root, "metadata.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(release.Manifests(root, autoscalerVersion, filepath.Join(repositoryDir, autoscalerProvider.label(), autoscalerVersion))).To(Succeed())
		Expect(writeClusterctlConfig(clusterctlConfigPath, repositoryDir, autoscalerImage)).To(Succeed())
	})

	clusterctl, err = client.New(ctx, clusterctlConfigPath)
	Expect(err).NotTo(HaveOccurred())
	ca, err := pki.NewCA("capi-autoscaler kind e2e CA")
	Expect(err).NotTo(HaveOccurred())
	install := &installer{clusterctl: clusterctl, client: management, ca: ca}

	By("Installing Cluster API, the kubeadm providers and CAPD")
	timed("installing Cluster API", func() {
		Expect(install.inventoryDefinitions(ctx)).To(Succeed())
		for _, p := range clusterAPIProviders {
			Expect(install.install(ctx, p, capiVersion)).To(Succeed())
		}
	})
	By("Installing capi-autoscaler")
	timed("installing capi-autoscaler", func() {
		Expect(install.install(ctx, autoscalerProvider, autoscalerVersion)).To(Succeed())
	})
})

// managementClusterConfig is one node with the host's Docker socket, which
// CAPD's Deployment mounts to create the workload clusters' containers.
func managementClusterConfig() *v1alpha4.Cluster {
	config := &v1alpha4.Cluster{
		Nodes: []v1alpha4.Node{{
			Role: v1alpha4.ControlPlaneRole,
			ExtraMounts: []v1alpha4.Mount{{
				HostPath:      "/var/run/docker.sock",
				ContainerPath: "/var/run/docker.sock",
			}},
		}},
	}
	v1alpha4.SetDefaultsCluster(config)
	return config
}

// removeManagementCluster removes the suite's kind cluster and, first, the
// CAPD containers of every Cluster it manages, including those of Cluster
// API's specs, whose names are random. kind and CAPD label every container
// with its cluster's name (io.x-k8s.kind.cluster), and kind removes the
// containers (and their volumes) that carry the label; the suite removes
// only clusters its management cluster created, and its own.
func removeManagementCluster() error {
	clusters, err := kind.List()
	if err != nil {
		return err
	}
	if !slices.Contains(clusters, managementClusterName) {
		return nil
	}
	managed, err := managedClusters()
	if err != nil {
		// A management cluster that does not answer cannot say which
		// containers are its own: remove only the suite's workload cluster.
		GinkgoWriter.Printf("Listing the Clusters of %s: %v; only %s's containers are removed with it\n", managementClusterName, err, workloadClusterName)
		managed = []string{workloadClusterName}
	}
	for _, name := range append(managed, managementClusterName) {
		if !slices.Contains(clusters, name) {
			continue
		}
		if err := kind.Delete(name, filepath.Join(os.TempDir(), name+"-kubeconfig")); err != nil {
			return fmt.Errorf("removing the containers of %s: %w", name, err)
		}
	}
	return nil
}

// managedClusters lists the names of the Clusters in the management cluster.
func managedClusters() ([]string, error) {
	config, err := kind.KubeConfig(managementClusterName, false)
	if err != nil {
		return nil, err
	}
	restConfig, err := clientcmd.RESTConfigFromKubeConfig([]byte(config))
	if err != nil {
		return nil, err
	}
	restConfig.Timeout = 10 * time.Second
	scheme := runtime.NewScheme()
	if err := clusterv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := ctrlclient.New(restConfig, ctrlclient.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	list := &clusterv1.ClusterList{}
	if err := c.List(ctx, list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, cluster := range list.Items {
		names = append(names, cluster.Name)
	}
	return names, nil
}

// loadImages copies images from the host's Docker into every node of the
// management cluster, as `kind load docker-image` does.
func loadImages(images []string) error {
	nodes, err := kind.ListNodes(managementClusterName)
	if err != nil {
		return err
	}
	archive := filepath.Join(GinkgoT().TempDir(), "images.tar")
	if out, err := exec.Command("docker", append([]string{"save", "-o", archive}, images...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("docker save: %w\n%s", err, out)
	}
	for _, node := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(node, f)
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("loading images into %s: %w", node, err)
		}
	}
	return nil
}

// newestReleaseSeries returns the first release of the newest release
// series in clusterctl's metadata.
func newestReleaseSeries(metadataPath string) (string, error) {
	content, err := os.ReadFile(metadataPath)
	if err != nil {
		return "", err
	}
	metadata := &clusterctlv1.Metadata{}
	if err := yaml.UnmarshalStrict(content, metadata); err != nil {
		return "", fmt.Errorf("reading %s: %w", metadataPath, err)
	}
	if len(metadata.ReleaseSeries) == 0 {
		return "", fmt.Errorf("%s has no release series", metadataPath)
	}
	newest := slices.MaxFunc(metadata.ReleaseSeries, func(a, b clusterctlv1.ReleaseSeries) int {
		if a.Major != b.Major {
			return int(a.Major) - int(b.Major)
		}
		return int(a.Minor) - int(b.Minor)
	})
	return fmt.Sprintf("v%d.%d.0", newest.Major, newest.Minor), nil
}

// timed runs a step of the suite and reports how long it took.
func timed(step string, f func()) {
	start := time.Now()
	f()
	AddReportEntry(step, time.Since(start).Round(time.Second).String())
	GinkgoWriter.Printf("%s took %s\n", step, time.Since(start).Round(time.Second))
}
