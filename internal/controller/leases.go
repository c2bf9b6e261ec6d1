package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// ClusterLeaseName is the coordination.k8s.io Lease, in a Cluster's
// namespace, whose holder is the one manager whose engine acts on the
// Cluster.
func ClusterLeaseName(cluster string) string { return "capi-autoscaler-" + cluster }

// ClusterLeaseTimings are the timings of the Clusters' Leases, as those of
// leader election: a manager that stops renewing gives way after
// LeaseDuration; its engine stops acting after RenewDeadline, before any
// other may take over.
type ClusterLeaseTimings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultClusterLeaseTimings are client-go's leader election defaults.
var DefaultClusterLeaseTimings = ClusterLeaseTimings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}

// ClusterLeases fence the engines of one manager: an Active engine runs for
// a Cluster only while the manager holds the Cluster's Lease, whatever the
// watch filters, namespaces and installs of other managers beside it (an
// unfiltered one beside a filtered one, the clusterctl add-on beside the
// Helm release during a migration). The others wait, say who holds it, and
// take over once the holder stops renewing it.
type ClusterLeases struct {
	// Client reads and writes Leases in the management cluster.
	Client coordinationv1client.LeasesGetter
	// Identity names this manager in the Leases it holds: unique, such as
	// its pod's name and a random suffix.
	Identity string
	Timings  ClusterLeaseTimings
	// Share, when set, spreads the Clusters evenly over the replicas
	// that run RunShare; without it, the manager takes every Lease it can.
	Share *ClusterShare

	// liveReplicas is the last count of RunShare, 0 before the first.
	liveReplicas atomic.Int32

	mu     sync.Mutex
	leases map[client.ObjectKey]*clusterLease
}

// clusterLease is one Cluster's Lease as this manager contends for it, for
// the ClusterAutoscaler that owns the Cluster.
type clusterLease struct {
	// owner is the ClusterAutoscaler the Lease is held for, under
	// ClusterLeases.mu.
	owner  types.NamespacedName
	cancel context.CancelFunc
	// releasing is set, under ClusterLeases.mu, once the Lease is being
	// given up.
	releasing bool
	// done is closed once the Lease is given up; observed once the
	// manager first took it or saw another hold it.
	done     chan struct{}
	observed chan struct{}
	observe  sync.Once

	mu     sync.Mutex
	held   bool
	holder string
	// changed tells the owner, the last one Hold was called for, that the
	// manager took or lost the Lease, or that its holder changed.
	changed func()
	// reported is the other holder the manager last reported, "" since it
	// last held the Lease.
	reported string
	// taking is set while the manager writes itself as the holder of the
	// Lease (sharedLock), which counts it as held.
	taking bool
	// giving is set while the manager gives the Lease back, above its
	// share: its engine stops, then stopRun releases the Lease.
	giving  bool
	stopRun context.CancelFunc
}

// state says whether this manager holds the Lease, and who does; one it
// gives back it no longer holds for its engine.
func (l *clusterLease) state() (held bool, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.giving {
		return false, l.holder
	}
	return l.held, l.holder
}

// counted says whether the Lease counts in the manager's share: held, or
// being taken.
func (l *clusterLease) counted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held || l.taking
}

// givingBack says whether the manager gives the Lease back.
func (l *clusterLease) givingBack() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.giving
}

// startGivingBack has the owner stop its engine, which then hands the
// Lease back (ClusterLeases.handBack).
func (l *clusterLease) startGivingBack() {
	l.mu.Lock()
	l.giving = true
	changed := l.changed
	l.mu.Unlock()
	changed()
}

// set records who holds the Lease, and tells the owner.
func (l *clusterLease) set(held bool, holder string) {
	l.mu.Lock()
	if holder != "" {
		l.holder = holder
	} else if l.held && !held {
		// Stopped leading: who holds it next is not known yet.
		l.holder = ""
	}
	l.held = held
	l.taking = false
	if held {
		l.reported = ""
	}
	changed := l.changed
	l.mu.Unlock()
	l.observe.Do(func() { close(l.observed) })
	changed()
}

// tellOwner has changed tell the ClusterAutoscaler the Lease is now held
// for: a Lease that changes hands before the manager takes it, as when its
// owner is deleted, is news to the next owner only.
func (l *clusterLease) tellOwner(changed func()) {
	l.mu.Lock()
	l.changed = changed
	l.mu.Unlock()
}

// Hold has the manager contend for the Lease of the Cluster, for the
// ClusterAutoscaler owner, from now until Release; changed, that of the
// latest call, is called whenever the manager takes or loses it, or its
// holder changes. It says
// whether the manager holds it, and who does ("" while unknown). The
// first time, it waits up to RetryPeriod for the first try: a manager
// that gets the Lease at once starts its engine in this reconcile.
func (c *ClusterLeases) Hold(ctx context.Context, cluster client.ObjectKey, owner types.NamespacedName, changed func()) (held bool, holder string) {
	c.mu.Lock()
	if c.leases == nil {
		c.leases = map[client.ObjectKey]*clusterLease{}
	}
	lease, ok := c.leases[cluster]
	for ok && lease.releasing {
		// Given back for another ClusterAutoscaler of this manager: wait
		// until it is, so that two electors of one identity never contend.
		c.mu.Unlock()
		<-lease.done
		c.mu.Lock()
		if c.leases[cluster] == lease {
			delete(c.leases, cluster)
		}
		lease, ok = c.leases[cluster]
	}
	if ok {
		lease.owner = owner
		lease.tellOwner(changed)
	} else {
		// Not the reconcile's context: the Lease outlives it, until Release.
		leaseCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		lease = &clusterLease{owner: owner, cancel: cancel, done: make(chan struct{}), observed: make(chan struct{}), changed: changed}
		c.leases[cluster] = lease
		go c.contend(leaseCtx, cluster, lease)
	}
	c.mu.Unlock()
	if !ok {
		select {
		case <-lease.observed:
		case <-time.After(c.timings().RetryPeriod):
		case <-ctx.Done():
		}
	}
	return lease.state()
}

// reportHolder says whether holder, another manager holding the Lease of
// the Cluster, is news: not the one last reported since this manager last
// held it.
func (c *ClusterLeases) reportHolder(cluster client.ObjectKey, holder string) bool {
	c.mu.Lock()
	lease := c.leases[cluster]
	c.mu.Unlock()
	if lease == nil {
		return true
	}
	lease.mu.Lock()
	defer lease.mu.Unlock()
	if lease.reported == holder {
		return false
	}
	lease.reported = holder
	return true
}

// Release gives up the Lease that the manager holds, or contends for, for
// the ClusterAutoscaler owner, if any, and waits until it is given back,
// so that another manager need not wait for it to expire.
func (c *ClusterLeases) Release(owner types.NamespacedName) {
	c.mu.Lock()
	released := map[client.ObjectKey]*clusterLease{}
	for cluster, lease := range c.leases {
		if lease.owner == owner && !lease.releasing {
			lease.releasing = true
			released[cluster] = lease
		}
	}
	c.mu.Unlock()
	c.release(released)
}

// release gives up leases, and forgets them once given up.
func (c *ClusterLeases) release(leases map[client.ObjectKey]*clusterLease) {
	for _, lease := range leases {
		lease.cancel()
		<-lease.done
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for cluster, lease := range leases {
		if c.leases[cluster] == lease {
			delete(c.leases, cluster)
		}
	}
}

// ReleaseAll gives up every Lease, as the manager stops, once its engines
// have stopped.
func (c *ClusterLeases) ReleaseAll() {
	c.mu.Lock()
	released := map[client.ObjectKey]*clusterLease{}
	for cluster, lease := range c.leases {
		if !lease.releasing {
			lease.releasing = true
			released[cluster] = lease
		}
	}
	c.mu.Unlock()
	c.release(released)
}

// Validate says why the Leases cannot be held: no client or identity, or
// timings leader election refuses. Zero timings take
// DefaultClusterLeaseTimings.
func (c *ClusterLeases) Validate() error {
	if c.Client == nil || c.Identity == "" {
		return errors.New("the Clusters' Leases need a client and an identity")
	}
	if _, err := leaderelection.NewLeaderElector(c.config(logr.Discard(), client.ObjectKey{Namespace: "default", Name: "validate"}, nil)); err != nil {
		return fmt.Errorf("the Clusters' Leases: %w", err)
	}
	return nil
}

// timings are the Timings, zero ones the defaults.
func (c *ClusterLeases) timings() ClusterLeaseTimings {
	return ClusterLeaseTimings{
		LeaseDuration: cmp.Or(c.Timings.LeaseDuration, DefaultClusterLeaseTimings.LeaseDuration),
		RenewDeadline: cmp.Or(c.Timings.RenewDeadline, DefaultClusterLeaseTimings.RenewDeadline),
		RetryPeriod:   cmp.Or(c.Timings.RetryPeriod, DefaultClusterLeaseTimings.RetryPeriod),
	}
}

// config is the leader election on the Cluster's Lease, for lease.
func (c *ClusterLeases) config(logger logr.Logger, cluster client.ObjectKey, lease *clusterLease) leaderelection.LeaderElectionConfig {
	timings := c.timings()
	var lock resourcelock.Interface = &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: cluster.Namespace, Name: ClusterLeaseName(cluster.Name)},
		Client:     c.Client,
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.Identity},
	}
	if c.Share != nil {
		lock = &sharedLock{Interface: lock, leases: c, lease: lease}
	}
	return leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   timings.LeaseDuration,
		RenewDeadline:   timings.RenewDeadline,
		RetryPeriod:     timings.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cluster.String(),
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				logger.Info("Took the Lease of the Cluster: this manager autoscales it")
				lease.set(true, c.Identity)
			},
			OnStoppedLeading: func() {
				logger.Info("Gave up the Lease of the Cluster")
				lease.set(false, "")
			},
			// Called apart from, and maybe before, OnStartedLeading: the
			// holder being this manager's identity is what holding it is.
			OnNewLeader: func(identity string) {
				if identity != c.Identity {
					logger.V(2).Info("Another manager holds the Lease of the Cluster", "holder", identity)
				}
				lease.set(identity == c.Identity, identity)
			},
		},
	}
}

// contend runs leader election on the Cluster's Lease until ctx ends,
// again each time the manager stops leading.
func (c *ClusterLeases) contend(ctx context.Context, cluster client.ObjectKey, lease *clusterLease) {
	defer close(lease.done)
	logger := ctrl.LoggerFrom(ctx).WithValues("Lease", client.ObjectKey{Namespace: cluster.Namespace, Name: ClusterLeaseName(cluster.Name)})
	for ctx.Err() == nil {
		// Validate checked the configuration.
		elector, err := leaderelection.NewLeaderElector(c.config(logger, cluster, lease))
		if err != nil {
			logger.Error(err, "Cannot contend for the Lease of the Cluster")
			return
		}
		runCtx, stopRun := context.WithCancel(ctx)
		lease.mu.Lock()
		lease.stopRun = stopRun
		lease.mu.Unlock()
		elector.Run(runCtx)
		stopRun()
		// Given back, or lost: the next elector takes it within the share.
		lease.mu.Lock()
		lease.giving = false
		lease.mu.Unlock()
	}
}

// holdClusterLease has the manager hold the Lease of the Cluster of s.ca,
// an Active ClusterAutoscaler that owns it, and says whether it does.
// While another manager holds it, no engine of this one runs for the
// Cluster, and an event says who holds it. The status is the holder's: it
// serves the same ClusterAutoscaler, and were this manager to write the
// status too, each would rewrite it in turn, every write the other's cue
// to reconcile.
func (r *ClusterAutoscalerReconciler) holdClusterLease(ctx context.Context, s *reconcileScope) bool {
	ca := s.ca
	key := client.ObjectKeyFromObject(ca)
	held, holder := r.Leases.Hold(ctx, clusterKey(ca), key, func() { r.enqueue(key) })
	if held {
		// The status says which manager acts, for those of the others,
		// whose events say they wait.
		s.actingManager = fmt.Sprintf("Autoscaled by manager %s, which holds Lease %s", r.Leases.Identity,
			client.ObjectKey{Namespace: ca.Namespace, Name: ClusterLeaseName(ca.Spec.ClusterName)})
		return true
	}
	r.stopEngine(ctx, key)
	s.statusElsewhere = true
	if r.Leases.handBack(clusterKey(ca)) {
		ctrl.LoggerFrom(ctx).Info("Gave the Lease of the Cluster back to the other replicas: this manager held more than its share")
		return false
	}
	if holder == "" && r.Leases.Share != nil {
		ctrl.LoggerFrom(ctx).V(2).Info("Not autoscaling: this manager holds its share of the Clusters, another replica takes this one")
		return false
	}
	// One event for each holder, not one per reconcile.
	if !r.Leases.reportHolder(clusterKey(ca), holder) {
		return false
	}
	lease := client.ObjectKey{Namespace: ca.Namespace, Name: ClusterLeaseName(ca.Spec.ClusterName)}
	ctrl.LoggerFrom(ctx).Info("Not autoscaling: another manager holds the Lease of the Cluster", "holder", holder, "Lease", lease)
	r.Recorder.Eventf(ca, corev1.EventTypeNormal, autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason,
		"Another manager autoscales Cluster %s: %s holds Lease %s; this one takes over within %s once it stops renewing it",
		clusterKey(ca), cmp.Or(holder, "another manager"), lease, r.Leases.timings().LeaseDuration)
	return false
}

// enqueue has the ClusterAutoscaler reconciled, from outside a reconcile.
func (r *ClusterAutoscalerReconciler) enqueue(key types.NamespacedName) {
	regarding := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	go func() {
		select {
		case r.statusEvents <- event.GenericEvent{Object: regarding}:
		case <-r.ctx.Done():
		}
	}()
}
