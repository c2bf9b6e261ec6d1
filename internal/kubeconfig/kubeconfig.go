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
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
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
// Secret or its key does not exist, and ErrInvalid when the Secret that
// spec.workloadKubeconfigSecretRef names is not one for the Cluster
// (ForCluster).
func Read(ctx context.Context, c client.Reader, ca *autoscalingv1alpha1.ClusterAutoscaler, opts ...client.GetOption) (*corev1.Secret, []byte, error) {
	key, dataKey := Location(ca)
	s := &corev1.Secret{}
	if err := c.Get(ctx, key, s, opts...); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("%w: Secret %s does not exist", ErrNotFound, key)
		}
		return nil, nil, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	if ca.Spec.WorkloadKubeconfigSecretRef != nil {
		if err := ForCluster(s, ca.Spec.ClusterName); err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
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

// ForCluster refuses a Secret that is not meant as a kubeconfig of the
// named Cluster: one of Cluster API's type (cluster.x-k8s.io/secret),
// labelled with the Cluster's name (cluster.x-k8s.io/cluster-name), as
// Cluster API makes its own. A user who may create a ClusterAutoscaler but
// not such Secrets cannot have the manager act with the credentials of
// any other Secret of the namespace.
func ForCluster(s *corev1.Secret, clusterName string) error {
	if s.Type != clusterv1.ClusterSecretType {
		return fmt.Errorf("the Secret %s is of type %q: a workload kubeconfig Secret is of type %q", client.ObjectKeyFromObject(s), s.Type, clusterv1.ClusterSecretType)
	}
	if s.Labels[clusterv1.ClusterNameLabel] != clusterName {
		return fmt.Errorf("the Secret %s is not labelled %s=%s: only Secrets labelled for the Cluster are used as its kubeconfig", client.ObjectKeyFromObject(s), clusterv1.ClusterNameLabel, clusterName)
	}
	return nil
}
