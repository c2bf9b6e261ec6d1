package localstack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/faultproxy"
)

// AutoscalerUserAgent starts the user agent of every request the
// autoscaler manager makes; the fault proxies aim at these.
const AutoscalerUserAgent = "capi-autoscaler"

// serviceAccountTokenSeconds is how long the token of a ServiceAccount
// kubeconfig is valid: longer than any run of the suite.
const serviceAccountTokenSeconds = 24 * 60 * 60

// isAutoscaler tells the autoscaler's requests from those of the stack's
// own components and of the tests.
func isAutoscaler(req *http.Request) bool {
	return strings.HasPrefix(req.UserAgent(), AutoscalerUserAgent)
}

// startProxies puts a fault proxy in front of the management API server
// and, when it is another one, the workload API server.
func (s *Stack) startProxies(autoscalerNeedsTokens bool) error {
	for _, cluster := range []*Cluster{s.Management, s.Workload} {
		if cluster.Proxy != nil {
			continue
		}
		proxy, err := faultproxy.Start(faultproxy.Options{
			Upstream:   cluster.Config.Host,
			CA:         s.ca,
			FrontProxy: s.frontProxy,
			Target:     isAutoscaler,
			// Only the Cluster's kubeconfig Secret authenticates with a
			// certificate.
			TargetsNeedTokens: autoscalerNeedsTokens,
		})
		if err != nil {
			return fmt.Errorf("fault proxy of %s: %w", cluster.Name, err)
		}
		cluster.Proxy = proxy
	}
	return nil
}

// proxiedAdminKubeconfig is an admin kubeconfig for cluster through its
// fault proxy: what the Cluster's kubeconfig Secret holds.
func (s *Stack) proxiedAdminKubeconfig(cluster *Cluster) ([]byte, error) {
	return clientcmd.Write(*kubeconfig(cluster.Name, cluster.Proxy.URL(), s.ca.CertPEM,
		&clientcmdapi.AuthInfo{ClientCertificateData: s.admin.Cert, ClientKeyData: s.admin.Key}))
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates to the
// management cluster, through its fault proxy, with a token of the
// ServiceAccount namespace/name, and returns its path. The ServiceAccount
// must exist.
func (s *Stack) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	data, err := s.serviceAccountKubeconfig(ctx, s.Management, namespace, name, nil)
	if err != nil {
		return "", err
	}
	path := filepath.Join(s.WorkDir, s.Management.Name, "serviceaccount-"+namespace+"-"+name+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// WorkloadServiceAccountKubeconfig returns a kubeconfig that authenticates
// to the workload cluster, through its fault proxy, with a token of the
// ServiceAccount namespace/name there: what a ClusterAutoscaler's
// spec.workloadKubeconfigSecretRef names. The ServiceAccount must exist.
func (s *Stack) WorkloadServiceAccountKubeconfig(ctx context.Context, namespace, name string) ([]byte, error) {
	return s.serviceAccountKubeconfig(ctx, s.Workload, namespace, name, nil)
}

// WorkloadServiceAccountKubeconfigBoundTo is WorkloadServiceAccountKubeconfig
// with a token bound to holder, a Secret of the workload cluster in the
// ServiceAccount's namespace: deleting holder revokes the token, as
// rotating credentials does.
func (s *Stack) WorkloadServiceAccountKubeconfigBoundTo(ctx context.Context, namespace, name string, holder *corev1.Secret) ([]byte, error) {
	return s.serviceAccountKubeconfig(ctx, s.Workload, namespace, name, &authenticationv1.BoundObjectReference{
		Kind: "Secret", APIVersion: "v1", Name: holder.Name, UID: holder.UID,
	})
}

// serviceAccountKubeconfig is a kubeconfig for cluster, through its fault
// proxy, with a new token of the ServiceAccount namespace/name, bound to
// boundTo unless it is nil.
func (s *Stack) serviceAccountKubeconfig(ctx context.Context, cluster *Cluster, namespace, name string, boundTo *authenticationv1.BoundObjectReference) ([]byte, error) {
	serviceAccount := &corev1.ServiceAccount{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, serviceAccount); err != nil {
		return nil, fmt.Errorf("ServiceAccount %s/%s of %s: %w", namespace, name, cluster.Name, err)
	}
	token := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To[int64](serviceAccountTokenSeconds),
		BoundObjectRef:    boundTo,
	}}
	if err := cluster.Client.SubResource("token").Create(ctx, serviceAccount, token); err != nil {
		return nil, fmt.Errorf("token of ServiceAccount %s/%s of %s: %w", namespace, name, cluster.Name, err)
	}
	return clientcmd.Write(*kubeconfig(cluster.Name, cluster.Proxy.URL(), s.ca.CertPEM,
		&clientcmdapi.AuthInfo{Token: token.Status.Token}))
}

// kubeconfig is a kubeconfig with one context, for server as user.
func kubeconfig(name, server string, caPEM []byte, user *clientcmdapi.AuthInfo) *clientcmdapi.Config {
	config := clientcmdapi.NewConfig()
	config.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	config.AuthInfos["user"] = user
	config.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: "user"}
	config.CurrentContext = name
	return config
}
