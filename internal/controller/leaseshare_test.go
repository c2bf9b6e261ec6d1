package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("Clusters spread over replicas by their Leases", func() {
	It("gives each replica its share, has those above it given back once their engines stopped, and the Clusters of a dead replica taken over within the Lease duration, never serving a Cluster twice", func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lease-share-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		clusters := make([]client.ObjectKey, 6)
		for i := range clusters {
			clusters[i] = client.ObjectKey{Namespace: ns.Name, Name: fmt.Sprintf("cluster-%d", i)}
		}
		add, violations := watchServedTwice(clusters)
		holders := func() map[string]int { return leaseHolders(clusters) }

		By("one replica: it holds every Cluster")
		a := startShareReplica(ns.Name, "replica-a", clusters)
		add(a)
		Eventually(holders, waitTimeout).Should(Equal(map[string]int{"replica-a": 6}))

		By("a second replica joining: the first gives back three")
		b := startShareReplica(ns.Name, "replica-b", clusters)
		add(b)
		Eventually(holders, waitTimeout).Should(Equal(map[string]int{"replica-a": 3, "replica-b": 3}))
		Consistently(holders, 3*testLeaseTimings.RetryPeriod, 100*time.Millisecond).Should(Equal(map[string]int{"replica-a": 3, "replica-b": 3}), "the share is stable")

		By("a third replica joining: two each")
		c := startShareReplica(ns.Name, "replica-c", clusters)
		add(c)
		Eventually(holders, waitTimeout).Should(Equal(map[string]int{"replica-a": 2, "replica-b": 2, "replica-c": 2}))

		By("the third replica cut off from the API server, as if dead: the others take its Clusters within the Lease duration")
		cut := time.Now()
		c.cutOff.Store(true)
		Eventually(holders, waitTimeout, 50*time.Millisecond).Should(Equal(map[string]int{"replica-a": 3, "replica-b": 3}))
		// Its Leases and its membership expire a Lease duration after its
		// last renewal, at most a RetryPeriod before the cut; the others
		// count the replicas and try every RetryPeriod (jittered by 1.2):
		// about 5s. The slack is for a loaded machine's delays, below a
		// second Lease duration.
		Expect(time.Since(cut)).To(BeNumerically("<", 2*testLeaseTimings.LeaseDuration), "taken over within the Lease duration")
		Expect(c.acting()).To(BeEmpty(), "the cut off replica stopped acting")

		Expect(violations()).To(BeEmpty())
	})
})

// shareReplica is a manager's replica that spreads the Clusters with the
// others: its ClusterLeases with a ClusterShare, and owners that act as
// the reconciler does, an engine per Cluster whose Lease it holds, stopped
// before a Lease is given back.
type shareReplica struct {
	leases *ClusterLeases
	cancel context.CancelFunc
	done   chan struct{}
	cutOff atomic.Bool

	mu sync.Mutex
	// engines are the Clusters this replica acts on.
	engines map[client.ObjectKey]bool
	// serving serialises the reconciles of each Cluster, as the
	// controller's queue does.
	serving map[client.ObjectKey]*sync.Mutex
}

func startShareReplica(namespace, identity string, clusters []client.ObjectKey) *shareReplica {
	GinkgoHelper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	Expect(err).NotTo(HaveOccurred())
	r := &shareReplica{engines: map[client.ObjectKey]bool{}, serving: map[client.ObjectKey]*sync.Mutex{}, done: make(chan struct{})}
	r.leases = &ClusterLeases{
		Client:   cuttableLeases{LeasesGetter: clientset.CoordinationV1(), cutOff: &r.cutOff},
		Identity: identity,
		Timings:  testLeaseTimings,
		Share:    &ClusterShare{Namespace: namespace, Group: "replicas", Name: identity},
	}
	Expect(r.leases.Validate()).To(Succeed())
	var shareCtx context.Context
	shareCtx, r.cancel = context.WithCancel(ctx)
	go func() {
		defer GinkgoRecover()
		defer close(r.done)
		Expect(r.leases.RunShare(shareCtx)).To(Succeed())
	}()
	for _, cluster := range clusters {
		r.serving[cluster] = &sync.Mutex{}
		go r.reconcile(cluster)
	}
	return r
}

// reconcile runs or stops the engine of the Cluster, as
// holdClusterLease has the reconciler do.
func (r *shareReplica) reconcile(cluster client.ObjectKey) {
	defer GinkgoRecover()
	r.serving[cluster].Lock()
	defer r.serving[cluster].Unlock()
	owner := types.NamespacedName{Namespace: cluster.Namespace, Name: "ca-" + cluster.Name}
	held, _ := r.leases.Hold(ctx, cluster, owner, func() { go r.reconcile(cluster) })
	r.mu.Lock()
	r.engines[cluster] = held
	r.mu.Unlock()
	if !held {
		r.leases.handBack(cluster)
	}
}

// acting are the Clusters whose engines run in this replica.
func (r *shareReplica) acting() []client.ObjectKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	var acting []client.ObjectKey
	for cluster, running := range r.engines {
		if running {
			acting = append(acting, cluster)
		}
	}
	return acting
}

func (r *shareReplica) stop() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	clear(r.engines)
	r.mu.Unlock()
	r.leases.ReleaseAll()
}

// watchServedTwice checks, every 20ms until the spec ends, that no Cluster
// has an engine in two of the replicas added at once, and returns what it
// saw. The replicas stop as the spec ends.
func watchServedTwice(clusters []client.ObjectKey) (add func(*shareReplica), violations func() []string) {
	var mu sync.Mutex
	var seen []string
	var replicas []*shareReplica
	watchCtx, cancel := context.WithCancel(ctx)
	DeferCleanup(func() {
		cancel()
		for _, r := range replicas {
			r.stop()
		}
	})
	snapshot := func() []*shareReplica {
		mu.Lock()
		defer mu.Unlock()
		return append([]*shareReplica(nil), replicas...)
	}
	// Every 20 ms, a sample of which replicas act on each Cluster.
	go wait.UntilWithContext(watchCtx, func(context.Context) {
		served := map[client.ObjectKey][]string{}
		for _, r := range snapshot() {
			for _, cluster := range r.acting() {
				served[cluster] = append(served[cluster], r.leases.Identity)
			}
		}
		for _, cluster := range clusters {
			if len(served[cluster]) > 1 {
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%s served by %v at %s", cluster, served[cluster], time.Now().Format(time.StampMilli)))
				mu.Unlock()
			}
		}
	}, 20*time.Millisecond)
	add = func(r *shareReplica) {
		mu.Lock()
		defer mu.Unlock()
		replicas = append(replicas, r)
	}
	return add, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

// leaseHolders counts the Clusters' Leases each manager holds.
func leaseHolders(clusters []client.ObjectKey) map[string]int {
	held := map[string]int{}
	for _, cluster := range clusters {
		lease := &coordinationv1.Lease{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: ClusterLeaseName(cluster.Name)}, lease); err != nil {
			continue
		}
		expires := lease.Spec.RenewTime.Add(time.Duration(ptr.Deref(lease.Spec.LeaseDurationSeconds, 0)) * time.Second)
		if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" && time.Now().Before(expires) {
			held[holder]++
		}
	}
	return held
}

// cuttableLeases are Leases whose every request fails once cutOff is
// set: a replica cut off from the API server, which can neither renew
// nor give back.
type cuttableLeases struct {
	coordinationv1client.LeasesGetter
	cutOff *atomic.Bool
}

func (l cuttableLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return cuttableLease{LeaseInterface: l.LeasesGetter.Leases(namespace), cutOff: l.cutOff}
}

type cuttableLease struct {
	coordinationv1client.LeaseInterface
	cutOff *atomic.Bool
}

var errCutOff = errors.New("cut off from the API server")

func (l cuttableLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if l.cutOff.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l cuttableLease) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.cutOff.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Create(ctx, lease, opts)
}

func (l cuttableLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.cutOff.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

func (l cuttableLease) List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error) {
	if l.cutOff.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.List(ctx, opts)
}

func (l cuttableLease) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if l.cutOff.Load() {
		return errCutOff
	}
	return l.LeaseInterface.Delete(ctx, name, opts)
}

func (l cuttableLease) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if l.cutOff.Load() {
		return nil, errCutOff
	}
	return l.LeaseInterface.Watch(ctx, opts)
}
