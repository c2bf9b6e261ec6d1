package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	infracrd "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/config/crd"
)

// startClusterAPI installs the CRDs of Cluster API, the simulated provider and
// the autoscaler, runs the Cluster API core manager and registers its
// webhooks, which it serves with a certificate of the stack's CA on the
// loopback address.
func (s *Stack) startClusterAPI(ctx context.Context, m modules) error {
	webhookPort, err := FreePort()
	if err != nil {
		return err
	}
	healthPort, err := FreePort()
	if err != nil {
		return err
	}
	diagnosticsPort, err := FreePort()
	if err != nil {
		return err
	}
	webhookURL := "https://127.0.0.1:" + strconv.Itoa(webhookPort)
	config := filepath.Join(m.clusterAPI, "core", "config")

	crds, err := clusterAPICRDs(filepath.Join(config, "crd", "bases"), webhookURL, s.ca.CertPEM)
	if err != nil {
		return err
	}
	providerCRDs, err := infracrd.CRDs()
	if err != nil {
		return err
	}
	// The autoscaler's own CRDs, so that its manager can run against the stack.
	var paths []string
	if dir := filepath.Join(s.repoRoot, "config", "crd", "bases"); isDir(dir) {
		paths = append(paths, dir)
	}
	if _, err := envtest.InstallCRDs(s.Management.Config, envtest.CRDInstallOptions{
		Paths:              paths,
		CRDs:               append(crds, providerCRDs...),
		MaxTime:            startTimeout,
		PollInterval:       100 * time.Millisecond,
		ErrorIfPathMissing: true,
	}); err != nil {
		return fmt.Errorf("installing CRDs: %w", err)
	}

	certDir := filepath.Join(s.WorkDir, "capi-webhook")
	if err := writeFiles(certDir, map[string][]byte{"tls.crt": s.serving.Cert, "tls.key": s.serving.Key}); err != nil {
		return err
	}
	manager, err := startProcess(ctx, s.logDir(), "capi-manager", s.binary("capi-manager"),
		"--kubeconfig="+s.Management.KubeconfigPath,
		"--leader-elect=false",
		"--webhook-port="+strconv.Itoa(webhookPort),
		"--webhook-cert-dir="+certDir,
		"--health-addr=127.0.0.1:"+strconv.Itoa(healthPort),
		"--diagnostics-address=127.0.0.1:"+strconv.Itoa(diagnosticsPort),
		"--insecure-diagnostics=true",
		// On by default since MachinePools went beta (v1.7); said here
		// because the MachinePool specs need its controller.
		"--feature-gates=MachinePool=true",
	)
	if err != nil {
		return err
	}
	s.track(manager)
	if err := manager.waitHealthy(ctx, &httpClient, fmt.Sprintf("http://127.0.0.1:%d/readyz", healthPort)); err != nil {
		return err
	}

	webhooks, err := os.ReadFile(filepath.Join(config, "webhook", "manifests.yaml"))
	if err != nil {
		return err
	}
	return installWebhooks(ctx, s.Management.Client, webhooks, webhookURL, s.ca.CertPEM)
}

// clusterAPICRDs reads the CRDs of Cluster API and points their conversion
// webhooks at the manager, as the kustomize patches of its release do with a
// Service.
func clusterAPICRDs(dir, webhookURL string, caBundle []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(paths))
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(crd.Spec.Versions) > 1 {
			crd.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{URL: ptr.To(webhookURL + "/convert"), CABundle: caBundle},
					ConversionReviewVersions: []string{"v1", "v1beta1"},
				},
			}
		}
		crds = append(crds, crd)
	}
	return crds, nil
}

// installWebhooks registers the mutating and validating webhooks of the
// manifests with URL client configs.
func installWebhooks(ctx context.Context, c client.Client, manifests []byte, webhookURL string, caBundle []byte) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	clientConfig := func(cc admissionregistrationv1.WebhookClientConfig) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(webhookURL + ptr.Deref(cc.Service.Path, "")), CABundle: caBundle}
	}
	var objs []client.Object
	for {
		var typeMeta struct {
			Kind string `json:"kind"`
		}
		var raw runtime.RawExtension
		if err := decoder.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		if len(raw.Raw) == 0 {
			continue
		}
		if err := yaml.Unmarshal(raw.Raw, &typeMeta); err != nil {
			return err
		}
		switch typeMeta.Kind {
		case "MutatingWebhookConfiguration":
			cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal(raw.Raw, cfg); err != nil {
				return err
			}
			cfg.Name = "capi-" + cfg.Name
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig)
			}
			objs = append(objs, cfg)
		case "ValidatingWebhookConfiguration":
			cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal(raw.Raw, cfg); err != nil {
				return err
			}
			cfg.Name = "capi-" + cfg.Name
			for i := range cfg.Webhooks {
				cfg.Webhooks[i].ClientConfig = clientConfig(cfg.Webhooks[i].ClientConfig)
			}
			objs = append(objs, cfg)
		default:
			return fmt.Errorf("unexpected %s in the webhook manifests", typeMeta.Kind)
		}
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			return fmt.Errorf("registering webhooks %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

func isDir(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.IsDir()
}
