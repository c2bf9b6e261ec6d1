package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

var _ = Describe("The Lease of a Cluster", func() {
	It("keeps this manager's engine from acting while another manager holds it, says who does, and takes over once it is no longer renewed", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		lease := client.ObjectKey{Namespace: fixture.Namespace, Name: ClusterLeaseName(fixture.Cluster.Name)}

		By("another manager holding the Lease and renewing it")
		other, stopRenewing := holdLease(lease, "other-manager")
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		Eventually(func(g Gomega) {
			ready := conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason))
			g.Expect(ready.Message).To(ContainSubstring("other-manager holds Lease " + lease.String()))
		}, waitTimeout).Should(Succeed())
		Consistently(func() *runningEngine { return reconciler.engines.get(key) }, 3*testLeaseTimings.LeaseDuration/2, 200*time.Millisecond).
			Should(BeNil(), "no engine of this manager runs while the other renews the Lease")
		Expect(getClusterAutoscaler(Default, key).Status.LastLoopTime).To(BeNil(), "no loop ran")

		By("the other manager stopping: this one takes over once the Lease expires")
		stopRenewing()
		<-other
		expectRunning(key)
		Expect(leaseHolder(lease)).To(Equal("envtest-manager"))

		By("giving the Lease back at once when the ClusterAutoscaler goes")
		deleteClusterAutoscaler(key)
		Eventually(func() string { return leaseHolder(lease) }, waitTimeout).Should(BeEmpty())
	})

	It("removes the marks of a ClusterAutoscaler being deleted only once this manager holds the Lease: the holder's engine may be between a mark and its write", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		ms := fixture.MachineSet("ms-0", 1, nil, nil)
		fixture.Create(ctx, ms)
		machine := fixture.Machine("machine-0", ms)
		fixture.Create(ctx, machine)
		lease := client.ObjectKey{Namespace: fixture.Namespace, Name: ClusterLeaseName(fixture.Cluster.Name)}
		other, stopRenewing := holdLease(lease, "other-manager")
		key := createClusterAutoscaler(fixture)
		markedBy(machine, getClusterAutoscaler(Default, key).UID)

		By("deleting the ClusterAutoscaler while the other manager holds the Lease")
		Expect(k8sClient.Delete(ctx, &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})).To(Succeed())
		Consistently(func() map[string]string { return get(machine).Annotations }, 3*testLeaseTimings.LeaseDuration/2, 200*time.Millisecond).
			Should(HaveKey(clusterv1.DeleteMachineAnnotation), "the mark stays while another manager holds the Lease")

		By("the other manager stopping: this one takes the Lease and cleans up")
		stopRenewing()
		<-other
		expectGone(key)
		Expect(get(machine).Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation))
	})
})

// holdLease holds the Lease as another manager would, renewing it every
// RetryPeriod until stop is called; done is closed when it stopped.
func holdLease(key client.ObjectKey, identity string) (done <-chan struct{}, stop func()) {
	GinkgoHelper()
	now := metav1.NewMicroTime(time.Now())
	Expect(k8sClient.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(identity),
			LeaseDurationSeconds: ptr.To(int32(testLeaseTimings.LeaseDuration.Seconds())),
			AcquireTime:          &now, RenewTime: &now,
		},
	})).To(Succeed())
	renewCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		ticker := time.NewTicker(testLeaseTimings.RetryPeriod)
		defer ticker.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-ticker.C:
			}
			held := &coordinationv1.Lease{}
			if err := k8sClient.Get(renewCtx, key, held); err != nil {
				continue
			}
			held.Spec.RenewTime = ptr.To(metav1.NewMicroTime(time.Now()))
			_ = k8sClient.Update(renewCtx, held)
		}
	}()
	return stopped, cancel
}

// leaseHolder is who holds the Lease now.
func leaseHolder(key client.ObjectKey) string {
	GinkgoHelper()
	lease := &coordinationv1.Lease{}
	Expect(k8sClient.Get(ctx, key, lease)).To(Succeed())
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// Zero timings take leader election's defaults, as a manager set up
// without the flags gets them; timings leader election refuses are
// refused at setup, not by a Lease that is silently never taken.
func TestClusterLeasesValidate(t *testing.T) {
	client := kubefake.NewClientset().CoordinationV1()
	for _, tt := range []struct {
		name    string
		leases  *ClusterLeases
		wantErr string
	}{
		{name: "zero timings", leases: &ClusterLeases{Client: client, Identity: "manager"}},
		{name: "a renew deadline past the lease duration", leases: &ClusterLeases{Client: client, Identity: "manager",
			Timings: ClusterLeaseTimings{LeaseDuration: time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second}}, wantErr: "leaseDuration must be greater than renewDeadline"},
		{name: "no identity", leases: &ClusterLeases{Client: client}, wantErr: "need a client and an identity"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tt.leases.Validate()
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(tt.leases.timings()).To(Equal(DefaultClusterLeaseTimings))
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
		})
	}
}
