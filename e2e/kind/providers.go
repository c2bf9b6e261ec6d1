//go:build kind

package kind

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"
	"sigs.k8s.io/cluster-api/cmd/clusterctl/client"
	clusterctlconfig "sigs.k8s.io/cluster-api/cmd/clusterctl/config"
	utilyaml "sigs.k8s.io/cluster-api/util/yaml"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/pki"
)

const (
	capiVersion = "v1.14.0"

	// certManagerInjectCA is the annotation cert-manager's CA injector reads:
	// the suite fills in the caBundle it names instead.
	certManagerInjectCA = "cert-manager.io/inject-ca-from"
	certManagerGroup    = "cert-manager.io"

	fieldOwner = "capi-autoscaler-kind-e2e"
)

// provider is one clusterctl provider the suite installs: where its
// kustomization is, and where its manager runs once installed.
type provider struct {
	name         string
	providerType clusterctlv1.ProviderType
	// kustomization is the provider's config/default, relative to its module.
	kustomization string
	// module is the Go module holding the kustomization.
	module string
	// namespace and deployment are what `clusterctl init` leaves running.
	namespace, deployment string
	// managerArgs are added to the arguments of the Deployment's manager
	// container, as a user would patch them in.
	managerArgs []string
}

// label is the provider's folder in a clusterctl repository.
func (p provider) label() string { return clusterctlv1.ManifestLabel(p.name, p.providerType) }

// clusterAPIProviders are the providers a CAPD user installs, in the order
// `clusterctl init` installs them.
var clusterAPIProviders = []provider{
	{name: "cluster-api", providerType: clusterctlv1.CoreProviderType, module: "sigs.k8s.io/cluster-api", kustomization: "core/config/default", namespace: "capi-system", deployment: "capi-controller-manager"},
	{name: "kubeadm", providerType: clusterctlv1.BootstrapProviderType, module: "sigs.k8s.io/cluster-api", kustomization: "bootstrap/kubeadm/config/default", namespace: "capi-kubeadm-bootstrap-system", deployment: "capi-kubeadm-bootstrap-controller-manager"},
	{name: "kubeadm", providerType: clusterctlv1.ControlPlaneProviderType, module: "sigs.k8s.io/cluster-api", kustomization: "controlplane/kubeadm/config/default", namespace: "capi-kubeadm-control-plane-system", deployment: "capi-kubeadm-control-plane-controller-manager"},
	{name: "docker", providerType: clusterctlv1.InfrastructureProviderType, module: "sigs.k8s.io/cluster-api/test", kustomization: "infrastructure/docker/config/default", namespace: "capd-system", deployment: "capd-controller-manager"},
}

// autoscalerProvider is capi-autoscaler, installed from its release artifacts.
var autoscalerProvider = provider{
	name: "capi-autoscaler", providerType: clusterctlv1.AddonProviderType,
	namespace: "capi-autoscaler-system", deployment: "capi-autoscaler-controller-manager",
	// It serves the suite's own Clusters; Cluster API's AutoscalerSpec
	// runs another capi-autoscaler, in its Cluster's namespace.
	managerArgs: []string{"--watch-filter=" + watchFilter},
}

// moduleDir returns where the module proxy put a module of the version
// this repository pins, downloading it if needed (no build).
func moduleDir(module, version string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var download struct{ Dir string }
	if err := yaml.Unmarshal(out, &download); err != nil {
		return "", err
	}
	return download.Dir, nil
}

// writeClusterAPIRepository writes a local clusterctl repository of the
// Cluster API providers from their modules' own kustomizations, as Cluster
// API's e2e framework builds one from its source tree.
func writeClusterAPIRepository(repositoryDir string) error {
	// Every provider of this Cluster API release shares its metadata.
	coreDir, err := moduleDir("sigs.k8s.io/cluster-api", capiVersion)
	if err != nil {
		return err
	}
	metadata, err := os.ReadFile(filepath.Join(coreDir, "metadata.yaml"))
	if err != nil {
		return err
	}
	for _, p := range clusterAPIProviders {
		dir, err := moduleDir(p.module, capiVersion)
		if err != nil {
			return err
		}
		resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(dir, p.kustomization))
		if err != nil {
			return fmt.Errorf("building %s: %w", p.kustomization, err)
		}
		components, err := resources.AsYaml()
		if err != nil {
			return err
		}
		if err := writeRelease(filepath.Join(repositoryDir, p.label(), capiVersion), components, metadata); err != nil {
			return err
		}
	}
	return nil
}

func writeRelease(dir string, components, metadata []byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "components.yaml"), components, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "metadata.yaml"), metadata, 0o644)
}

// writeClusterctlConfig writes the clusterctl configuration a user of the
// local repository writes: the providers, the variables the suite and its
// workload cluster template need, and image overrides pointing the Cluster
// API providers at their release names.
func writeClusterctlConfig(path, repositoryDir, autoscalerImage string) error {
	config := map[string]any{
		// ClusterClass needs the topology controllers.
		"CLUSTER_TOPOLOGY":      "true",
		"CAPI_AUTOSCALER_IMAGE": autoscalerImage,
	}
	for name, value := range workloadClusterVariables {
		config[name] = value
	}
	var providers []map[string]string
	images := map[string]map[string]string{}
	for _, p := range clusterAPIProviders {
		providers = append(providers, map[string]string{
			"name": p.name,
			"type": string(p.providerType),
			"url":  fmt.Sprintf("file://%s/%s/%s/components.yaml", repositoryDir, p.label(), capiVersion),
		})
		images[p.label()] = map[string]string{"repository": "registry.k8s.io/cluster-api", "tag": capiVersion}
	}
	providers = append(providers, map[string]string{
		"name": autoscalerProvider.name,
		"type": string(autoscalerProvider.providerType),
		"url":  fmt.Sprintf("file://%s/%s/latest/addon-components.yaml", repositoryDir, autoscalerProvider.label()),
	})
	config["providers"] = providers
	config["images"] = images
	content, err := yaml.Marshal(config)
	if err != nil {
		return err
	}
	return os.WriteFile(path, content, 0o644)
}

// installer applies a provider's components as `clusterctl init` would,
// with the suite's certificate authority in place of cert-manager.
type installer struct {
	clusterctl client.Client
	client     ctrlclient.Client
	ca         *pki.CA
}

// install reads a provider's components through the clusterctl library
// (variables, image overrides, target namespace) and applies them.
func (i *installer) install(ctx context.Context, p provider, version string) error {
	components, err := i.clusterctl.GetProviderComponents(ctx, p.name+":"+version, p.providerType, client.ComponentsOptions{})
	if err != nil {
		return fmt.Errorf("reading the components of %s: %w", p.label(), err)
	}
	var first, rest []unstructured.Unstructured
	var secrets []*corev1ac.SecretApplyConfiguration
	for _, obj := range components.Objs() {
		switch {
		case obj.GroupVersionKind().Group == certManagerGroup:
			if obj.GetKind() == "Certificate" {
				secret, err := i.servingSecret(obj)
				if err != nil {
					return err
				}
				secrets = append(secrets, secret)
			}
		case obj.GetKind() == "Namespace" || obj.GetKind() == "CustomResourceDefinition":
			first = append(first, i.injectCA(obj))
		default:
			if err := addManagerArgs(&obj, p.managerArgs); err != nil {
				return err
			}
			rest = append(rest, i.injectCA(obj))
		}
	}
	for _, obj := range first {
		if err := i.apply(ctx, &obj); err != nil {
			return err
		}
	}
	for _, secret := range secrets {
		if err := i.client.Apply(ctx, secret, ctrlclient.FieldOwner(fieldOwner), ctrlclient.ForceOwnership); err != nil {
			return fmt.Errorf("applying Secret %s: %w", *secret.Name, err)
		}
	}
	for _, obj := range rest {
		if err := i.apply(ctx, &obj); err != nil {
			return err
		}
	}
	return i.addToInventory(ctx, components.InventoryObject())
}

// inventoryDefinitions installs clusterctl's inventory CRD, as `clusterctl
// init` does first, and waits until it serves.
func (i *installer) inventoryDefinitions(ctx context.Context) error {
	objs, err := utilyaml.ToUnstructured(clusterctlconfig.ClusterctlAPIManifest)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := i.apply(ctx, &obj); err != nil {
			return err
		}
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("ProviderList"))
		return i.client.List(ctx, list) == nil, nil
	})
}

// addToInventory records an installed provider in clusterctl's inventory, as
// `clusterctl init` does: `clusterctl generate cluster` finds the version of
// the infrastructure provider there, and upgrade and delete find the
// providers.
func (i *installer) addToInventory(ctx context.Context, inventory clusterctlv1.Provider) error {
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&inventory)
	if err != nil {
		return err
	}
	obj := &unstructured.Unstructured{Object: content}
	obj.SetGroupVersionKind(clusterctlv1.GroupVersion.WithKind("Provider"))
	return apply(ctx, i.client, obj)
}

func (i *installer) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	pullIfNotPresent(obj)
	return apply(ctx, i.client, obj)
}

// apply applies obj with server-side apply, as the suite's field owner.
func apply(ctx context.Context, c ctrlclient.Client, obj *unstructured.Unstructured) error {
	if err := c.Apply(ctx, ctrlclient.ApplyConfigurationFromUnstructured(obj), ctrlclient.FieldOwner(fieldOwner), ctrlclient.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}

// servingSecret is the Secret cert-manager would write for a Certificate:
// the name the manager mounts, a certificate for the webhook Service.
func (i *installer) servingSecret(certificate unstructured.Unstructured) (*corev1ac.SecretApplyConfiguration, error) {
	secretName, _, err := unstructured.NestedString(certificate.Object, "spec", "secretName")
	if err != nil || secretName == "" {
		return nil, fmt.Errorf("certificate %s has no spec.secretName", certificate.GetName())
	}
	dnsNames, _, err := unstructured.NestedStringSlice(certificate.Object, "spec", "dnsNames")
	if err != nil {
		return nil, err
	}
	cert, err := i.ca.Serving(dnsNames)
	if err != nil {
		return nil, fmt.Errorf("issuing certificate %s: %w", certificate.GetName(), err)
	}
	return corev1ac.Secret(secretName, certificate.GetNamespace()).
		WithLabels(certificate.GetLabels()).
		WithType(corev1.SecretTypeTLS).
		WithData(map[string][]byte{
			corev1.TLSCertKey:       cert.Cert,
			corev1.TLSPrivateKeyKey: cert.Key,
			"ca.crt":                i.ca.CertPEM,
		}), nil
}

// injectCA does what cert-manager's CA injector does for objects that ask
// for it: the suite's CA as caBundle of every webhook client configuration.
func (i *installer) injectCA(obj unstructured.Unstructured) unstructured.Unstructured {
	annotations := obj.GetAnnotations()
	if _, ok := annotations[certManagerInjectCA]; !ok {
		return obj
	}
	delete(annotations, certManagerInjectCA)
	obj.SetAnnotations(annotations)
	caBundle := base64.StdEncoding.EncodeToString(i.ca.CertPEM)
	switch obj.GetKind() {
	case "CustomResourceDefinition":
		if _, found, _ := unstructured.NestedMap(obj.Object, "spec", "conversion", "webhook", "clientConfig"); found {
			_ = unstructured.SetNestedField(obj.Object, caBundle, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		}
	case "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration":
		webhooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		for _, webhook := range webhooks {
			_ = unstructured.SetNestedField(webhook.(map[string]any), caBundle, "clientConfig", "caBundle")
		}
		_ = unstructured.SetNestedSlice(obj.Object, webhooks, "webhooks")
	}
	return obj
}

// pullIfNotPresent keeps the kubelet from pulling: every image is loaded
// into the management cluster and there is no registry (Cluster API's e2e
// replaces imagePullPolicy: Always the same way).
// addManagerArgs appends args to the manager container of a Deployment.
func addManagerArgs(obj *unstructured.Unstructured, args []string) error {
	if obj.GetKind() != "Deployment" || len(args) == 0 {
		return nil
	}
	containers, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	for _, c := range containers {
		container := c.(map[string]any)
		if container["name"] != "manager" {
			continue
		}
		current, _, err := unstructured.NestedStringSlice(container, "args")
		if err != nil {
			return err
		}
		container["args"] = toAnySlice(append(current, args...))
		return unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
	}
	return fmt.Errorf("the Deployment %s has no manager container", obj.GetName())
}

func toAnySlice(values []string) []any {
	out := make([]any, len(values))
	for i, v := range values {
		out[i] = v
	}
	return out
}

func pullIfNotPresent(obj *unstructured.Unstructured) {
	if obj.GetKind() != "Deployment" {
		return
	}
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	for _, container := range containers {
		container.(map[string]any)["imagePullPolicy"] = string(corev1.PullIfNotPresent)
	}
	_ = unstructured.SetNestedSlice(obj.Object, containers, "spec", "template", "spec", "containers")
}
