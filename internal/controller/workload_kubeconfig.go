package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/kubeconfig"
)

const (
	// ClusterResyncPeriod is how often the manager's cache replays every
	// Cluster to the controllers that watch Clusters. The ClusterCache
	// reconciles a Cluster on its events only, and does not come back to
	// one it disconnected as gone (see
	// WorkloadKubeconfigs.ClusterCacheManager): the replay makes it
	// connect again, with the kubeconfig read anew.
	ClusterResyncPeriod = 5 * time.Second

	// workloadKubeconfigRetryInterval is how often a ClusterAutoscaler
	// whose spec.workloadKubeconfigSecretRef names a missing or unusable
	// kubeconfig looks at it again: the manager does not watch Secrets.
	workloadKubeconfigRetryInterval = 10 * time.Second

	// workloadKubeconfigCheckInterval is how often a running engine's
	// kubeconfig is read again to see whether its credentials changed:
	// not at every loop, which under pod churn comes every second for
	// each cluster. A change of spec.workloadKubeconfigSecretRef is
	// checked at once.
	workloadKubeconfigCheckInterval = 10 * time.Second

	// WorkloadKubeconfigChangedReason is the reason of the event that says
	// the credentials of the kubeconfig changed and the workload cluster is
	// connected to again.
	WorkloadKubeconfigChangedReason = "WorkloadKubeconfigChanged"
)

// WorkloadKubeconfigs gives the ClusterCache the kubeconfig of each
// workload cluster: it is its SecretClient, through which it reads the
// Cluster's <cluster>-kubeconfig Secret, and it has it connect again when
// the credentials of that kubeconfig change (see ClusterCacheManager).
//
// The kubeconfig of a Cluster is the one spec.workloadKubeconfigSecretRef
// of the Cluster's owner (see ownerOfCluster) names, or, when it names
// none or no ClusterAutoscaler names the Cluster, the Cluster's own.
type WorkloadKubeconfigs struct {
	// client reads ClusterAutoscalers from the manager's cache, by the
	// index that ClusterAutoscalerReconciler.SetupWithManager adds, and
	// Secrets from the API server.
	client client.Reader

	mu sync.Mutex
	// reconnects are the Clusters whose connection the ClusterCache is to
	// drop the next time it reconciles them.
	reconnects sets.Set[client.ObjectKey]
}

var _ client.Reader = &WorkloadKubeconfigs{}

// NewWorkloadKubeconfigs returns the kubeconfigs of workload clusters, read
// with c.
func NewWorkloadKubeconfigs(c client.Reader) *WorkloadKubeconfigs {
	return &WorkloadKubeconfigs{client: c, reconnects: sets.New[client.ObjectKey]()}
}

// Get reads an object as c does, except the kubeconfig Secret of a Cluster
// whose owner names a Secret of its own: then it returns that Secret with
// its kubeconfig under the key of Cluster API's kubeconfig Secrets, or the
// error of reading it. It never falls back to the Cluster's kubeconfig.
func (k *WorkloadKubeconfigs) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kubeconfigSecret, isSecret := obj.(*corev1.Secret)
	clusterName, isKubeconfig := strings.CutSuffix(key.Name, "-"+string(secret.Kubeconfig))
	if !isSecret || !isKubeconfig {
		return k.client.Get(ctx, key, obj, opts...)
	}
	owner, err := ownerOfCluster(ctx, k.client, client.ObjectKey{Namespace: key.Namespace, Name: clusterName})
	if err != nil {
		return err
	}
	if owner == nil || owner.Spec.WorkloadKubeconfigSecretRef == nil {
		return k.client.Get(ctx, key, obj, opts...)
	}
	named, data, err := kubeconfig.Read(ctx, k.client, owner, opts...)
	if err != nil {
		return fmt.Errorf("reading the kubeconfig that ClusterAutoscaler %s names: %w", owner.Name, err)
	}
	*kubeconfigSecret = corev1.Secret{ObjectMeta: named.ObjectMeta, Data: map[string][]byte{secret.KubeconfigDataName: data}}
	return nil
}

// List lists objects as c does.
func (k *WorkloadKubeconfigs) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return k.client.List(ctx, list, opts...)
}

// ClusterCacheByObject are the per-object options of the manager's cache that the
// ClusterCache of SetupClusterCache needs: Clusters replayed every
// ClusterResyncPeriod.
func ClusterCacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&clusterv1.Cluster{}: {SyncPeriod: ptr.To(ClusterResyncPeriod)},
	}
}

// SetupClusterCache sets up Cluster API's ClusterCache on mgr, whose cache
// has ClusterCacheByObject, to reach workload clusters with the
// kubeconfigs WorkloadKubeconfigs gives; options.SecretClient is set here.
// The manager's client is to read Secrets live: only kubeconfig Secrets are
// read.
func SetupClusterCache(ctx context.Context, mgr manager.Manager, options clustercache.Options, controllerOptions controller.Options) (clustercache.ClusterCache, *WorkloadKubeconfigs, error) {
	kubeconfigs := NewWorkloadKubeconfigs(mgr.GetClient())
	options.SecretClient = kubeconfigs
	clusterCache, err := clustercache.SetupWithManager(ctx, kubeconfigs.ClusterCacheManager(mgr), options, controllerOptions)
	if err != nil {
		return nil, nil, err
	}
	return clusterCache, kubeconfigs, nil
}

// ClusterCacheManager returns mgr as clustercache.SetupWithManager is to be
// given it: its client reports as not found, so that the ClusterCache does
// not connect to it or drops its connection as for a deleted Cluster:
//   - a Cluster that no ClusterAutoscaler names: the manager reaches only
//     the workload clusters it autoscales, and none with the Cluster's admin
//     kubeconfig while its ClusterAutoscaler is still to come;
//   - a Cluster whose reconnect was asked for, once.
//
// The ClusterCache connects, reading the kubeconfig anew, the next time it
// reconciles the Cluster: within ClusterResyncPeriod. Cluster API v1.14.0's
// ClusterCache has no other way to connect again while the old credentials
// still work (kubernetes-sigs/cluster-api#12399), and it ignores its
// Options.ClusterFilter (kubernetes-sigs/cluster-api#14119), which would
// otherwise be the place for this.
func (k *WorkloadKubeconfigs) ClusterCacheManager(mgr manager.Manager) manager.Manager {
	return clusterCacheManager{Manager: mgr, client: clusterCacheClient{Client: mgr.GetClient(), kubeconfigs: k}}
}

// clusterCacheManager is the manager with the client of the ClusterCache.
type clusterCacheManager struct {
	manager.Manager
	client client.Client
}

func (m clusterCacheManager) GetClient() client.Client { return m.client }

// clusterCacheClient is the manager's client, but for the Clusters that no
// ClusterAutoscaler names and those whose reconnect was asked for, which it
// reports as not found.
type clusterCacheClient struct {
	client.Client
	kubeconfigs *WorkloadKubeconfigs
}

func (c clusterCacheClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, isCluster := obj.(*clusterv1.Cluster); !isCluster {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	notFound := apierrors.NewNotFound(clusterv1.GroupVersion.WithResource("clusters").GroupResource(), key.Name)
	if c.kubeconfigs.takeReconnect(key) {
		ctrl.LoggerFrom(ctx).Info("Dropping the connection to the workload cluster, to connect again with the new credentials of its kubeconfig")
		return notFound
	}
	owner, err := ownerOfCluster(ctx, c.kubeconfigs.client, key)
	if err != nil {
		return err
	}
	if owner == nil {
		return notFound
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// reconnect asks the ClusterCache to connect to a Cluster again. It says
// whether the request is new.
func (k *WorkloadKubeconfigs) reconnect(cluster client.ObjectKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.reconnects.Has(cluster) {
		return false
	}
	k.reconnects.Insert(cluster)
	return true
}

// takeReconnect says whether a reconnect of the Cluster was asked for, and
// forgets it.
func (k *WorkloadKubeconfigs) takeReconnect(cluster client.ObjectKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.reconnects.Has(cluster) {
		return false
	}
	k.reconnects.Delete(cluster)
	return true
}

// sameCredentials says whether two REST configs authenticate alike. The
// server is left out: the ClusterCache replaces it when the manager runs in
// the workload cluster.
func sameCredentials(a, b *rest.Config) bool {
	return a.BearerToken == b.BearerToken && a.BearerTokenFile == b.BearerTokenFile &&
		a.Username == b.Username && a.Password == b.Password &&
		bytes.Equal(a.CertData, b.CertData) && bytes.Equal(a.KeyData, b.KeyData) &&
		a.CertFile == b.CertFile && a.KeyFile == b.KeyFile &&
		equality.Semantic.DeepEqual(a.Impersonate, b.Impersonate)
}

// reconcileWorkloadKubeconfig checks the kubeconfig the workload cluster is
// reached with, at most every workloadKubeconfigCheckInterval while its
// engine runs and at every reconcile otherwise, and has the
// ClusterCache connect again when its credentials are not those of the
// connection: the Secret was rotated, or spec.workloadKubeconfigSecretRef
// changed. It returns false, with the engine stopped and the scope saying
// why, while the Secret spec.workloadKubeconfigSecretRef
// names is missing or holds no usable kubeconfig.
//
// Only the Cluster's owner decides the connection, which its engine and
// the DryRun engines beside it share: a DryRun ClusterAutoscaler whose
// kubeconfig differs from the owner's never has the ClusterCache connect
// again, which would restart every engine of the Cluster, and a problem
// with its own Secret stops only its own engine.
func (r *ClusterAutoscalerReconciler) reconcileWorkloadKubeconfig(ctx context.Context, s *reconcileScope) (bool, error) {
	ca := s.ca
	running := r.engines.get(client.ObjectKeyFromObject(ca))
	location, dataKey := kubeconfig.Location(ca)
	checked := kubeconfigCheck{secret: location, dataKey: dataKey, at: r.Clock.Now()}
	if running != nil && running.kubeconfigChecked.coversNow(checked) {
		return true, nil
	}
	// From the API server's watch cache, not etcd: every engine comes here
	// every workloadKubeconfigCheckInterval.
	fromWatchCache := &client.GetOptions{Raw: &metav1.GetOptions{ResourceVersion: "0"}}
	kubeconfigSecret, data, err := kubeconfig.Read(ctx, r.Client, ca, fromWatchCache)
	var credentials *rest.Config
	if err == nil {
		if credentials, err = kubeconfig.RESTConfig(data); err != nil {
			err = fmt.Errorf("%w in Secret %s: %w", kubeconfig.ErrInvalid, client.ObjectKeyFromObject(kubeconfigSecret), err)
		}
	}
	switch {
	case err == nil:
	case apierrors.IsForbidden(err):
		// A narrower install grants the manager's namespace role only in
		// the namespaces it is to autoscale: the Cluster's Lease, /scale
		// and Machines are refused here too.
		r.refuseWorkloadKubeconfig(ctx, s, autoscalingv1alpha1.WorkloadKubeconfigForbiddenReason, fmt.Sprintf(
			"Nothing is autoscaled: the manager is not granted its namespace role (the ClusterRole *-manager-namespace-role; docs/reference/permissions.md) in namespace %s: %v", ca.Namespace, err))
		return false, nil
	case ca.Spec.WorkloadKubeconfigSecretRef == nil:
		// The Cluster's own kubeconfig: the ClusterCache reports its
		// problems, as it always did.
		return true, nil
	case errors.Is(err, kubeconfig.ErrNotFound):
		r.refuseWorkloadKubeconfig(ctx, s, autoscalingv1alpha1.WorkloadKubeconfigNotFoundReason, ownKubeconfigNotUsed+err.Error())
		return false, nil
	case errors.Is(err, kubeconfig.ErrInvalid):
		r.refuseWorkloadKubeconfig(ctx, s, autoscalingv1alpha1.InvalidWorkloadKubeconfigReason, ownKubeconfigNotUsed+err.Error())
		return false, nil
	default:
		return false, err
	}

	if running != nil {
		// Whatever follows, the next reconciles need not read it again:
		// the connection is either these credentials' or being replaced.
		running.kubeconfigChecked = checked
	}
	if s.otherOwner != nil {
		return true, nil
	}
	cluster := clusterKey(ca)
	connection, err := r.ClusterCache.GetRESTConfig(ctx, cluster)
	if err != nil || sameCredentials(connection, credentials) {
		// Not connected, and the next connection reads the kubeconfig
		// anew; or connected with these credentials.
		return true, nil //nolint:nilerr // Not connected is no error here.
	}
	if r.WorkloadKubeconfigs.reconnect(cluster) {
		ctrl.LoggerFrom(ctx).Info("Connecting to the workload cluster again: the credentials of its kubeconfig changed", "Secret", klog.KObj(kubeconfigSecret))
		r.Recorder.Eventf(ca, corev1.EventTypeNormal, WorkloadKubeconfigChangedReason,
			"Connecting to Cluster %s again with the new credentials in Secret %s", cluster, kubeconfigSecret.Name)
	}
	return true, nil
}

// kubeconfigCheck is a reading of the kubeconfig Secret of a running
// engine's workload cluster that found it usable.
type kubeconfigCheck struct {
	secret  client.ObjectKey
	dataKey string
	at      time.Time
}

// coversNow says whether this check makes another one, now, needless: the
// same Secret and key, read less than workloadKubeconfigCheckInterval
// before.
func (c kubeconfigCheck) coversNow(now kubeconfigCheck) bool {
	return c.secret == now.secret && c.dataKey == now.dataKey && now.at.Sub(c.at) < workloadKubeconfigCheckInterval
}

// ownKubeconfigNotUsed starts the message of a Secret that
// spec.workloadKubeconfigSecretRef names and that cannot be used.
const ownKubeconfigNotUsed = "Nothing is autoscaled, and the Cluster's own kubeconfig is not used instead: "

// refuseWorkloadKubeconfig stops the engine of ca, whose kubeconfig
// cannot be used, and says why in message.
// When ca owns the Cluster, a connection made with other credentials, such
// as the Cluster's before ca named a Secret, is dropped too: connecting
// again fails until the Secret is fixed. The owner's connection stays when
// ca is a DryRun ClusterAutoscaler beside it.
func (r *ClusterAutoscalerReconciler) refuseWorkloadKubeconfig(ctx context.Context, s *reconcileScope, reason, message string) {
	ca := s.ca
	r.stopEngine(ctx, client.ObjectKeyFromObject(ca))
	if _, err := r.ClusterCache.GetRESTConfig(ctx, clusterKey(ca)); err == nil && s.otherOwner == nil {
		r.WorkloadKubeconfigs.reconnect(clusterKey(ca))
	}
	// One event when it happens, not one per reconcile.
	if ready := conditions.Get(ca, autoscalingv1alpha1.ReadyCondition); ready == nil || ready.Reason != reason || ready.Message != message {
		ctrl.LoggerFrom(ctx).Info("Not autoscaling: the workload kubeconfig cannot be used", "reason", reason, "message", message)
		r.Recorder.Eventf(ca, corev1.EventTypeWarning, reason, "%s", message)
	}
	s.stop(reason, message)
}
