// Package kubeconfig owns how the workload cluster of a ClusterAutoscaler
// is reached: which Secret and key hold its kubeconfig, and which
// kubeconfigs are refused. The manager and the kubectl plugin both read
// kubeconfigs through it, so that neither runs what the other refuses.
package kubeconfig

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

var (
	// ErrNotFound: the Secret of a kubeconfig, or its key, does not exist.
	ErrNotFound = errors.New("kubeconfig not found")
	// ErrInvalid: a Secret holds no kubeconfig that may be used.
	ErrInvalid = errors.New("invalid kubeconfig")
)

// Location is the Secret and the key of the kubeconfig the workload
// cluster of ca is reached with: spec.workloadKubeconfigSecretRef, else
// the Cluster's own Cluster API kubeconfig Secret.
func Location(ca *autoscalingv1alpha1.ClusterAutoscaler) (client.ObjectKey, string) {
	if ref := ca.Spec.WorkloadKubeconfigSecretRef; ref != nil {
		return client.ObjectKey{Namespace: ca.Namespace, Name: ref.Name}, cmp.Or(ref.Key, secret.KubeconfigDataName)
	}
	return client.ObjectKey{Namespace: ca.Namespace, Name: secret.Name(ca.Spec.ClusterName, secret.Kubeconfig)}, secret.KubeconfigDataName
}

// Read reads the kubeconfig the workload cluster of ca is reached with,
// and the Secret that holds it. The error wraps ErrNotFound when the
// Secret or its key does not exist.
func Read(ctx context.Context, c client.Reader, ca *autoscalingv1alpha1.ClusterAutoscaler, opts ...client.GetOption) (*corev1.Secret, []byte, error) {
	key, dataKey := Location(ca)
	s := &corev1.Secret{}
	if err := c.Get(ctx, key, s, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%w: Secret %s does not exist", ErrNotFound, key)
		}
		return nil, nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	data, ok := s.Data[dataKey]
	if !ok {
		return nil, nil, fmt.Errorf("%w: Secret %s has no key %q", ErrNotFound, key, dataKey)
	}
	return s, data, nil
}

// RESTConfig is the REST config of a kubeconfig read from a Secret. One
// that runs a credential plugin (exec or auth-provider) is refused:
// whoever may write the Secret would run a command wherever it is used,
// and Cluster API's ClusterCache does not support them either.
func RESTConfig(data []byte) (*rest.Config, error) {
	config, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, err
	}
	if config.ExecProvider != nil || config.AuthProvider != nil {
		return nil, errors.New("it runs a credential plugin (exec or auth-provider), which is never run from a Secret: use a token or a client certificate")
	}
	return config, nil
}
