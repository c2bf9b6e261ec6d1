package clusterctl

import (
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/config"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client/repository"
	"sigs.k8s.io/cluster-api/util/conditions"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
)

const (
	crdName        = "clusterautoscalers.autoscaling.cluster.x-k8s.io"
	deploymentName = "capi-autoscaler-controller-manager"
	containerName  = "manager"

	// fromMemoryLimit stands for a value the kubelet takes from the
	// container's memory limit.
	fromMemoryLimit = "<limits.memory>"
)

// manager is what the variables decide in the manager's Deployment.
type manager struct {
	image         string
	logVerbosity  string
	cpuRequest    string
	memoryRequest string
	memoryLimit   string
	// memoryLimitEnv is the MEMORY_LIMIT environment variable, from which
	// the manager sets its Go memory limit.
	memoryLimitEnv       string
	goMemoryLimitPercent string
	// safeToEvict is the pod's safe-to-evict annotation, "false" so that
	// no autoscaler drains the node of a self-hosted manager.
	safeToEvict string
}

// defaults is the manager when the user sets nothing but the verbosity in
// the configuration file.
func defaults(image string) manager {
	return manager{
		image:                image,
		logVerbosity:         "--v=" + logVerbosityInConfig,
		cpuRequest:           "100m",
		memoryRequest:        "256Mi",
		memoryLimit:          "1Gi",
		memoryLimitEnv:       fromMemoryLimit,
		goMemoryLimitPercent: "--go-memory-limit-percent=90",
		safeToEvict:          "false",
	}
}

var _ = Describe("clusterctl with a local repository of the release artifacts", Ordered, func() {
	var clusterctl client.Client

	BeforeAll(func() {
		var err error
		clusterctl, err = newClusterctlClient()
		Expect(err).NotTo(HaveOccurred())
	})

	It("reads the releases and the Cluster API contract each implements", func() {
		cfg, err := config.New(ctx, configFile)
		Expect(err).NotTo(HaveOccurred())
		provider, err := cfg.Providers().Get(providerName, clusterctlv1.AddonProviderType)
		Expect(err).NotTo(HaveOccurred())
		repo, err := repository.New(ctx, provider, cfg)
		Expect(err).NotTo(HaveOccurred())

		Expect(repo.GetVersions(ctx)).To(ConsistOf(oldVersion, newVersion))
		Expect(repo.DefaultVersion()).To(Equal(newVersion), "latest in the providers URL is the newest release")
		for _, v := range []string{oldVersion, newVersion} {
			metadata, err := repo.Metadata(v).Get(ctx)
			Expect(err).NotTo(HaveOccurred())
			series := metadata.GetReleaseSeriesForVersion(version.MustParseSemantic(v))
			Expect(series).NotTo(BeNil(), "metadata.yaml has a release series for %s", v)
			Expect(series.Contract).To(Equal(clusterv1.GroupVersion.Version))
		}
	})

	It("finds the install-time variables, the image and the namespace in the components", func() {
		components, err := clusterctl.GetProviderComponents(ctx, providerName+":"+oldVersion, clusterctlv1.AddonProviderType, client.ComponentsOptions{})
		Expect(err).NotTo(HaveOccurred())

		Expect(components.Variables()).To(ConsistOf(
			"CAPI_AUTOSCALER_IMAGE",
			"CAPI_AUTOSCALER_LOG_VERBOSITY",
			"CAPI_AUTOSCALER_CPU_REQUEST",
			"CAPI_AUTOSCALER_MEMORY_REQUEST",
			"CAPI_AUTOSCALER_MEMORY_LIMIT",
			"CAPI_AUTOSCALER_GOMEMLIMIT_PERCENT",
		))
		Expect(components.Images()).To(ConsistOf(releaseImage + ":" + oldVersion))
		Expect(components.TargetNamespace()).To(Equal(targetNamespace))
		Expect(components.Version()).To(Equal(oldVersion))
	})

	It("labels every object of the artifact for an AddonProvider, as Tilt and kubectl users get it", func() {
		raw, err := os.ReadFile(filepath.Join(repositoryDir, providerLabel, oldVersion, componentsFile))
		Expect(err).NotTo(HaveOccurred())
		objs, err := utilyaml.ToUnstructured(raw)
		Expect(err).NotTo(HaveOccurred())

		Expect(objs).NotTo(BeEmpty())
		for _, obj := range objs {
			Expect(obj.GetLabels()).To(HaveKeyWithValue(clusterv1.ProviderNameLabel, providerLabel), "%s %s", obj.GetKind(), obj.GetName())
		}
	})

	DescribeTable("substitutes the variables: defaults, and what the user sets wins",
		func(environment map[string]string, change func(*manager)) {
			for name, value := range environment {
				Expect(os.Setenv(name, value)).To(Succeed())
				DeferCleanup(os.Unsetenv, name)
			}

			components, err := clusterctl.GetProviderComponents(ctx, providerName+":"+oldVersion, clusterctlv1.AddonProviderType, client.ComponentsOptions{})
			Expect(err).NotTo(HaveOccurred())

			want := defaults(releaseImage + ":" + oldVersion)
			change(&want)
			Expect(managerOf(components.Objs())).To(Equal(want))
		},
		Entry("nothing set: the defaults, and the verbosity from the configuration file",
			nil, func(*manager) {}),
		Entry("an environment variable wins over the configuration file",
			map[string]string{"CAPI_AUTOSCALER_LOG_VERBOSITY": "5"},
			func(m *manager) { m.logVerbosity = "--v=5" }),
		Entry("a registry of the user's, and a larger memory limit that the Go memory limit follows",
			map[string]string{"CAPI_AUTOSCALER_IMAGE": "registry.example.com/capi-autoscaler:v9.9.9", "CAPI_AUTOSCALER_MEMORY_LIMIT": "2Gi"},
			func(m *manager) { m.image, m.memoryLimit = "registry.example.com/capi-autoscaler:v9.9.9", "2Gi" }),
		Entry("requests and the Go memory limit's share of the user's",
			map[string]string{"CAPI_AUTOSCALER_CPU_REQUEST": "250m", "CAPI_AUTOSCALER_MEMORY_REQUEST": "512Mi", "CAPI_AUTOSCALER_GOMEMLIMIT_PERCENT": "80"},
			func(m *manager) {
				m.cpuRequest, m.memoryRequest, m.goMemoryLimitPercent = "250m", "512Mi", "--go-memory-limit-percent=80"
			}),
	)

	It("init --addon installs the components and the provider's inventory entry", func() {
		_, err := clusterctl.Init(ctx, client.InitOptions{
			Kubeconfig:     kubeconfig,
			AddonProviders: []string{providerName + ":" + oldVersion},
		})
		Expect(err).NotTo(HaveOccurred())

		Expect(inventoryEntries()).To(ConsistOf(inventoryEntry(oldVersion)))
		Expect(installedManager()).To(Equal(defaults(releaseImage + ":" + oldVersion)))
		for _, obj := range providerObjects() {
			Expect(env.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)).To(Succeed(), "%T %s", obj, obj.GetName())
			Expect(obj.GetLabels()).To(HaveKeyWithValue(clusterv1.ProviderNameLabel, providerLabel), "%T %s", obj, obj.GetName())
		}
	})

	It("upgrade plan offers the newer release, and upgrade apply installs it", func() {
		plans, err := clusterctl.PlanUpgrade(ctx, client.PlanUpgradeOptions{Kubeconfig: kubeconfig})
		Expect(err).NotTo(HaveOccurred())
		Expect(plans).To(HaveLen(1))
		Expect(plans[0].Providers).To(ContainElement(SatisfyAll(
			HaveField("Provider.ProviderName", providerName),
			HaveField("NextVersion", newVersion),
		)))

		Expect(clusterctl.ApplyUpgrade(ctx, client.ApplyUpgradeOptions{
			Kubeconfig:     kubeconfig,
			AddonProviders: []string{providerName + ":" + newVersion},
		})).To(Succeed())

		Expect(inventoryEntries()).To(ConsistOf(inventoryEntry(newVersion)))
		Expect(installedManager()).To(Equal(defaults(releaseImage + ":" + newVersion)))
	})

	It("move takes the ClusterAutoscaler along with its Cluster to another management cluster", func() {
		By("running the controller in the source management cluster, where a Cluster has a ClusterAutoscaler")
		runController(env)
		cluster := createProvisionedCluster(env.Client)
		ca := &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: "autoscaler"},
			Spec: autoscalingv1alpha1.ClusterAutoscalerSpec{
				ClusterName:    cluster.Name,
				Expanders:      []autoscalingv1alpha1.Expander{autoscalingv1alpha1.LeastWasteExpander},
				ResourceLimits: &autoscalingv1alpha1.ResourceLimits{MaxNodesTotal: ptr.To[int32](10)},
			},
		}
		Expect(env.Client.Create(ctx, ca)).To(Succeed())
		// Without a kubeconfig Secret the workload cluster is unreachable:
		// the Ready condition says the controller has seen the object.
		Eventually(func(g Gomega) {
			g.Expect(env.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(ca), ca)).To(Succeed())
			g.Expect(conditions.Get(ca, autoscalingv1alpha1.ReadyCondition)).NotTo(BeNil())
		}, reconcileTimeout).Should(Succeed())

		target, targetKubeconfig := startTargetManagementCluster(clusterctl, newVersion)

		Expect(clusterctl.Move(ctx, client.MoveOptions{
			FromKubeconfig: kubeconfig,
			ToKubeconfig:   targetKubeconfig,
			Namespace:      cluster.Namespace,
		})).To(Succeed())

		By("finding the ClusterAutoscaler in the target, owned by the moved Cluster, which is resumed")
		movedCluster := &clusterv1.Cluster{}
		Expect(target.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(cluster), movedCluster)).To(Succeed())
		Expect(ptr.Deref(movedCluster.Spec.Paused, false)).To(BeFalse())
		moved := &autoscalingv1alpha1.ClusterAutoscaler{}
		Expect(target.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(ca), moved)).To(Succeed(), "the ClusterAutoscaler is in the target management cluster")
		Expect(moved.Spec).To(Equal(ca.Spec))
		Expect(moved.OwnerReferences).To(ConsistOf(metav1.OwnerReference{
			APIVersion: clusterv1.GroupVersion.String(),
			Kind:       clusterv1.ClusterKind,
			Name:       movedCluster.Name,
			UID:        movedCluster.UID,
		}))

		By("finding neither in the source")
		for _, obj := range []ctrlclient.Object{cluster, ca} {
			err := env.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s is gone from the source: %v", obj, obj.GetName(), err)
		}
	})

	It("delete --addon removes the provider and keeps the CRD and namespace, as clusterctl does by default", func() {
		Expect(clusterctl.Delete(ctx, client.DeleteOptions{
			Kubeconfig:     kubeconfig,
			AddonProviders: []string{providerName},
		})).To(Succeed())

		Expect(inventoryEntries()).To(BeEmpty())
		for _, obj := range namespacedProviderObjects() {
			err := env.Client.Get(ctx, ctrlclient.ObjectKeyFromObject(obj), obj)
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T %s is deleted: %v", obj, obj.GetName(), err)
		}
		Expect(env.Client.Get(ctx, ctrlclient.ObjectKey{Name: crdName}, &apiextensionsv1.CustomResourceDefinition{})).To(Succeed())
		Expect(env.Client.Get(ctx, ctrlclient.ObjectKey{Name: targetNamespace}, &corev1.Namespace{})).To(Succeed())
	})
})

// inventoryEntryFields are what an inventory entry says of a provider.
type inventoryEntryFields struct {
	Name, Namespace, ProviderName, Type, Version string
}

// inventoryEntry is the inventory entry clusterctl keeps for the provider.
func inventoryEntry(version string) inventoryEntryFields {
	return inventoryEntryFields{
		Name:         providerLabel,
		Namespace:    targetNamespace,
		ProviderName: providerName,
		Type:         string(clusterctlv1.AddonProviderType),
		Version:      version,
	}
}

// inventoryEntries lists clusterctl's inventory entries of AddonProviders.
func inventoryEntries() []inventoryEntryFields {
	list := &clusterctlv1.ProviderList{}
	Expect(env.Client.List(ctx, list)).To(Succeed())
	var entries []inventoryEntryFields
	for _, p := range list.FilterByType(clusterctlv1.AddonProviderType) {
		entries = append(entries, inventoryEntryFields{Name: p.Name, Namespace: p.Namespace, ProviderName: p.ProviderName, Type: p.Type, Version: p.Version})
	}
	return entries
}

// providerObjects are the objects of the components: the CRD, the RBAC,
// the namespace and the manager.
func providerObjects() []ctrlclient.Object {
	return append(namespacedProviderObjects(),
		&apiextensionsv1.CustomResourceDefinition{ObjectMeta: objectMeta("", crdName)},
		&corev1.Namespace{ObjectMeta: objectMeta("", targetNamespace)},
		&rbacv1.ClusterRole{ObjectMeta: objectMeta("", "capi-autoscaler-manager-role")},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objectMeta("", "capi-autoscaler-manager-rolebinding")},
		&rbacv1.ClusterRole{ObjectMeta: objectMeta("", "capi-autoscaler-manager-namespace-role")},
		&rbacv1.ClusterRoleBinding{ObjectMeta: objectMeta("", "capi-autoscaler-manager-namespace-rolebinding")},
	)
}

// namespacedProviderObjects are the objects of the components in the
// provider's namespace.
func namespacedProviderObjects() []ctrlclient.Object {
	return []ctrlclient.Object{
		&appsv1.Deployment{ObjectMeta: objectMeta(targetNamespace, deploymentName)},
		&corev1.ServiceAccount{ObjectMeta: objectMeta(targetNamespace, "capi-autoscaler-controller-manager")},
		&rbacv1.Role{ObjectMeta: objectMeta(targetNamespace, "capi-autoscaler-leader-election-role")},
		&rbacv1.RoleBinding{ObjectMeta: objectMeta(targetNamespace, "capi-autoscaler-leader-election-rolebinding")},
	}
}

// installedManager reads the manager's Deployment from the API server.
func installedManager() manager {
	deployment := &appsv1.Deployment{}
	Expect(env.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: targetNamespace, Name: deploymentName}, deployment)).To(Succeed())
	return managerOfDeployment(deployment)
}

// managerOf finds the manager's Deployment in processed components.
func managerOf(objs []unstructured.Unstructured) manager {
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		deployment := &appsv1.Deployment{}
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment)).To(Succeed())
		return managerOfDeployment(deployment)
	}
	Fail("the components have no Deployment")
	return manager{}
}

func managerOfDeployment(deployment *appsv1.Deployment) manager {
	for _, c := range deployment.Spec.Template.Spec.Containers {
		if c.Name != containerName {
			continue
		}
		m := manager{
			image:         c.Image,
			cpuRequest:    quantity(c.Resources.Requests, corev1.ResourceCPU),
			memoryRequest: quantity(c.Resources.Requests, corev1.ResourceMemory),
			memoryLimit:   quantity(c.Resources.Limits, corev1.ResourceMemory),
			safeToEvict:   deployment.Spec.Template.Annotations[scaledown.SafeToEvictAnnotation],
		}
		for _, arg := range c.Args {
			switch {
			case strings.HasPrefix(arg, "--v="):
				m.logVerbosity = arg
			case strings.HasPrefix(arg, "--go-memory-limit-percent="):
				m.goMemoryLimitPercent = arg
			}
		}
		m.memoryLimitEnv = envOf(c.Env)["MEMORY_LIMIT"]
		return m
	}
	Fail("the Deployment has no manager container")
	return manager{}
}

// envOf is the container's environment: a value from the memory limit
// reads fromMemoryLimit.
func envOf(vars []corev1.EnvVar) map[string]string {
	values := map[string]string{}
	for _, e := range vars {
		value := e.Value
		if from := e.ValueFrom; from != nil && from.ResourceFieldRef != nil && from.ResourceFieldRef.Resource == "limits.memory" {
			value = fromMemoryLimit
		}
		values[e.Name] = value
	}
	return values
}

func quantity(list corev1.ResourceList, name corev1.ResourceName) string {
	q, ok := list[name]
	if !ok {
		return ""
	}
	return q.String()
}

func objectMeta(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
