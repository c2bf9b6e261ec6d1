package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReplicaGroupLabel is the label of the replicas' membership Leases: its
// value names the replicas that share the Clusters (ClusterShare.Group).
const ReplicaGroupLabel = "autoscaling.cluster.x-k8s.io/replicas-of"

// ClusterShare spreads the Clusters' Leases evenly over the replicas of a
// manager that all run their engines: a replica takes a free Lease only
// while it holds fewer than ceil(Clusters / live replicas), and gives back
// those above that share when replicas join. Each replica says it is live
// by renewing a membership Lease of its own, labelled with Group; those
// whose Lease was not renewed within half the Lease duration are dead, and
// their Clusters go to the others as their Leases expire.
type ClusterShare struct {
	// Namespace holds the membership Leases.
	Namespace string
	// Group names the replicas that share the Clusters, a label value:
	// those of one Deployment, which see the same Clusters (the same watch
	// filter and namespace). Replicas of other groups hold Leases of the
	// same Clusters apart from this share.
	Group string
	// Name is this replica's membership Lease.
	Name string
	// Clock tells when membership Leases expire; the real clock when nil.
	Clock clock.PassiveClock
}

// errOverShare refuses to take a free Lease: the manager holds its share.
var errOverShare = errors.New("this manager holds its share of the Clusters")

// sharedLock is a Cluster's Lease that the manager takes, free or expired,
// only within its share; renewing a Lease it holds is never refused.
type sharedLock struct {
	resourcelock.Interface
	leases *ClusterLeases
	lease  *clusterLease
	// holder is the holder that the last Get read; the elector calls Get,
	// then Update, from one goroutine.
	holder string
}

func (l *sharedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.Interface.Get(ctx)
	l.holder = ""
	if err == nil {
		l.holder = record.HolderIdentity
	}
	return record, raw, err
}

func (l *sharedLock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	return l.take(func() error { return l.Interface.Create(ctx, record) })
}

func (l *sharedLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	if l.holder == l.leases.Identity {
		return l.Interface.Update(ctx, record)
	}
	return l.take(func() error { return l.Interface.Update(ctx, record) })
}

// take writes the Lease as its holder if the manager is within its share,
// counting it as held from then on, so that the Leases taken at once by
// several electors never exceed the share.
func (l *sharedLock) take(write func() error) error {
	if !l.leases.reserve(l.lease) {
		return errOverShare
	}
	if err := write(); err != nil {
		l.leases.unreserve(l.lease)
		return err
	}
	// The elector renews without reading the Lease again.
	l.holder = l.leases.Identity
	return nil
}

// share is how many Clusters' Leases this manager may hold: all of them
// without a ClusterShare, none until the live replicas were counted once.
// Under c.mu.
func (c *ClusterLeases) share() int {
	clusters := 0
	for _, lease := range c.leases {
		if !lease.releasing {
			clusters++
		}
	}
	if c.Share == nil {
		return clusters
	}
	live := int(c.liveReplicas.Load())
	if live == 0 {
		return 0
	}
	return (clusters + live - 1) / live
}

// holding is how many Clusters' Leases the manager holds or is taking.
// Under c.mu.
func (c *ClusterLeases) holding() int {
	n := 0
	for _, lease := range c.leases {
		if lease.counted() {
			n++
		}
	}
	return n
}

// reserve counts lease as held if the manager is within its share, and
// says whether it was.
func (c *ClusterLeases) reserve(lease *clusterLease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lease.releasing {
		return false
	}
	if lease.counted() {
		return true
	}
	if c.holding() >= c.share() {
		return false
	}
	lease.mu.Lock()
	lease.taking = true
	lease.mu.Unlock()
	return true
}

// unreserve no longer counts lease as held: it could not be written.
func (c *ClusterLeases) unreserve(lease *clusterLease) {
	lease.mu.Lock()
	defer lease.mu.Unlock()
	lease.taking = false
}

// RunShare renews this replica's membership Lease, counts the live
// replicas and gives back the Leases above the share, every RetryPeriod
// until ctx ends; it then deletes the membership Lease, so that the
// others count one replica less at once.
func (c *ClusterLeases) RunShare(ctx context.Context) error {
	logger := ctrl.LoggerFrom(ctx).WithValues("membershipLease", client.ObjectKey{Namespace: c.Share.Namespace, Name: c.Share.Name})
	ticker := time.NewTicker(c.timings().RetryPeriod)
	defer ticker.Stop()
	for {
		if live, err := c.countReplicas(ctx); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Cannot count the live replicas that share the Clusters")
			}
		} else if previous := c.liveReplicas.Swap(int32(live)); previous != int32(live) {
			logger.Info("Live replicas sharing the Clusters changed", "replicas", live, "previously", previous)
		}
		c.giveBackAboveShare(logger)
		select {
		case <-ctx.Done():
			deleteCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timings().RenewDeadline)
			defer cancel()
			err := c.Client.Leases(c.Share.Namespace).Delete(deleteCtx, c.Share.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				logger.Error(err, "Cannot delete the membership Lease: the others count this replica until it expires")
			}
			return nil
		case <-ticker.C:
		}
	}
}

// countReplicas renews this replica's membership Lease and counts those
// of its group that are live, itself included. Membership Leases expired
// for long are deleted: those of replicas killed without a word.
func (c *ClusterLeases) countReplicas(ctx context.Context) (int, error) {
	leases := c.Client.Leases(c.Share.Namespace)
	clk := c.Share.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	duration := membershipDuration(c.timings())
	mine := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: c.Share.Name, Labels: map[string]string{ReplicaGroupLabel: c.Share.Group}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(c.Identity),
			LeaseDurationSeconds: ptr.To(int32(duration / time.Second)),
			RenewTime:            ptr.To(metav1.NewMicroTime(clk.Now())),
		},
	}
	current, err := leases.Get(ctx, c.Share.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, mine, metav1.CreateOptions{})
	case err == nil:
		mine.ResourceVersion = current.ResourceVersion
		_, err = leases.Update(ctx, mine, metav1.UpdateOptions{})
	}
	if err != nil {
		return 0, fmt.Errorf("renewing the membership Lease: %w", err)
	}
	members, err := leases.List(ctx, metav1.ListOptions{LabelSelector: ReplicaGroupLabel + "=" + c.Share.Group})
	if err != nil {
		return 0, fmt.Errorf("listing the membership Leases: %w", err)
	}
	live := 1
	for _, member := range members.Items {
		if member.Name == c.Share.Name || member.Spec.RenewTime == nil {
			continue
		}
		expires := member.Spec.RenewTime.Add(time.Duration(ptr.Deref(member.Spec.LeaseDurationSeconds, 0)) * time.Second)
		switch {
		case clk.Now().Before(expires):
			live++
		case clk.Now().After(expires.Add(staleMembership * duration)):
			_ = leases.Delete(ctx, member.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &member.ResourceVersion}})
		}
	}
	return live, nil
}

// membershipDuration is how long a replica counts as live after it last
// renewed its membership Lease: half the Clusters' Lease duration, so that
// the others have counted it dead, and grown their share, by the time its
// Clusters' Leases expire. Counted dead too soon, a replica that is only
// slow loses nothing: the others take only free Leases.
func membershipDuration(timings ClusterLeaseTimings) time.Duration {
	return max(timings.LeaseDuration/2, time.Second)
}

// staleMembership is how many membership durations after its expiry a dead
// replica's membership Lease is deleted.
const staleMembership = 20

// giveBackAboveShare has the engines of the Clusters above the share stop,
// then gives their Leases back (handBack), the last ones by name first.
func (c *ClusterLeases) giveBackAboveShare(logger logr.Logger) {
	c.mu.Lock()
	share, holding := c.share(), c.holding()
	var excess []*clusterLease
	var clusters []client.ObjectKey
	var kept []client.ObjectKey
	for cluster, lease := range c.leases {
		if lease.counted() && !lease.givingBack() {
			kept = append(kept, cluster)
		}
	}
	// Those being given back are still held, until their engines stop.
	if over := len(kept) - share; over > 0 {
		slices.SortFunc(kept, func(a, b client.ObjectKey) int {
			return -strings.Compare(a.String(), b.String())
		})
		for _, cluster := range kept[:over] {
			excess = append(excess, c.leases[cluster])
			clusters = append(clusters, cluster)
		}
	}
	c.mu.Unlock()
	for i, lease := range excess {
		logger.Info("Giving back the Lease of a Cluster: this manager holds more than its share", "Cluster", clusters[i], "share", share, "holding", holding)
		lease.startGivingBack()
	}
}

// handBack gives the Lease of the Cluster back if the manager is giving
// it back, once the engine of it stopped, and says whether it does.
func (c *ClusterLeases) handBack(cluster client.ObjectKey) bool {
	c.mu.Lock()
	lease := c.leases[cluster]
	c.mu.Unlock()
	if lease == nil {
		return false
	}
	lease.mu.Lock()
	defer lease.mu.Unlock()
	if !lease.giving {
		return false
	}
	// The elector releases the Lease as it stops, and contend runs a new
	// one, which takes it again only within the share.
	lease.stopRun()
	return true
}
