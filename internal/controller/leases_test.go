package controller

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
			g.Expect(leaseEvents(g, key)).To(ContainElement(ContainSubstring("other-manager holds Lease " + lease.String())))
		}, waitTimeout).Should(Succeed())
		Consistently(func() *runningEngine { return reconciler.engines.get(key) }, 3*testLeaseTimings.LeaseDuration/2, 200*time.Millisecond).
			Should(BeNil(), "no engine of this manager runs while the other renews the Lease")
		// The holder serves the same ClusterAutoscaler and writes its
		// status; this manager, writing it too, would have the two
		// rewrite it in turn.
		Expect(getClusterAutoscaler(Default, key).Status).To(Equal(autoscalingv1alpha1.ClusterAutoscalerStatus{}), "the status was written by the manager that does not hold the Lease")
		Expect(leaseEvents(Default, key)).To(HaveLen(1), "the holder is reported once")

		By("the other manager stopping: this one takes over once the Lease expires")
		stopRenewing()
		<-other
		expectRunning(key)
		Expect(leaseHolder(lease)).To(Equal("envtest-manager"))
		Eventually(func(g Gomega) {
			ready := conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason))
			g.Expect(ready.Message).To(Equal("Autoscaled by manager envtest-manager, which holds Lease " + lease.String()))
		}, waitTimeout).Should(Succeed(), "the status says which manager acts")

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
		// A ClusterAutoscaler deleted before its first reconcile has no
		// finalizer yet, and goes at once: no engine of it ever marked.
		Eventually(func(g Gomega) {
			g.Expect(getClusterAutoscaler(g, key).Finalizers).To(ContainElement(CleanupFinalizer))
		}, waitTimeout).Should(Succeed())
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

// leaseEvents are the notes of the events saying that another manager
// holds the Lease of the ClusterAutoscaler's Cluster.
func leaseEvents(g Gomega, key client.ObjectKey) []string {
	events := &eventsv1.EventList{}
	g.Expect(k8sClient.List(ctx, events, client.InNamespace(key.Namespace))).To(Succeed())
	var notes []string
	for _, event := range events.Items {
		if event.Regarding.Name == key.Name && event.Reason == autoscalingv1alpha1.ClusterLeaseHeldElsewhereReason {
			notes = append(notes, event.Note)
		}
	}
	return notes
}

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

var _ = Describe("The Lease of a Cluster whose ClusterAutoscaler leaves Active mode", func() {
	It("is kept until the engine has run a dry loop, since a loop that started Active still acts", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		lease := client.ObjectKey{Namespace: fixture.Namespace, Name: ClusterLeaseName(fixture.Cluster.Name)}
		key := createClusterAutoscaler(fixture)
		DeferCleanup(deleteClusterAutoscaler, key)
		expectRunning(key)
		Expect(leaseHolder(lease)).To(Equal("envtest-manager"))

		By("looping only on triggers from now on")
		patchClusterAutoscaler(key, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.Spec.ScanInterval = &metav1.Duration{Duration: time.Hour}
		})
		expectLoopsOnlyOnTriggers(key)

		By("switching to DryRun: no dry loop has run yet, so the Lease stays")
		patchClusterAutoscaler(key, func(ca *autoscalingv1alpha1.ClusterAutoscaler) {
			ca.Spec.Mode = autoscalingv1alpha1.DryRunMode
		})
		Consistently(func() string { return leaseHolder(lease) }, 3*time.Second, 200*time.Millisecond).
			Should(Equal("envtest-manager"), "the Lease is given back before a dry loop ran")

		By("a pod turning unschedulable triggers a dry loop, after which the Lease is given back")
		pod := pendingPod(fixture.Namespace, nil)
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod))).To(Succeed()) })
		Eventually(func() string { return leaseHolder(lease) }, waitTimeout).Should(BeEmpty())
		Expect(reconciler.engines.get(key).engine.Status().DryRun).To(BeTrue())
	})
})

// patchClusterAutoscaler changes the spec of a ClusterAutoscaler and waits
// until its reconcile has observed the change.
func patchClusterAutoscaler(key types.NamespacedName, change func(*autoscalingv1alpha1.ClusterAutoscaler)) {
	GinkgoHelper()
	ca := getClusterAutoscaler(Default, key)
	original := ca.DeepCopy()
	change(ca)
	Expect(k8sClient.Patch(ctx, ca, client.MergeFrom(original))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(getClusterAutoscaler(g, key).Status.ObservedGeneration).To(Equal(ca.Generation))
	}, waitTimeout).Should(Succeed())
}

// A Lease that changes hands between the ClusterAutoscalers of its Cluster
// before this manager takes it, as when the owner is deleted while a
// reconcile of it, from a cache that still shows it, contends again, tells
// the one that owns it now: told only to the one gone, the next owner
// waited for the manager's sync period.
func TestAClusterLeaseTellsItsCurrentOwnerWhenTaken(t *testing.T) {
	g := NewWithT(t)
	cluster := client.ObjectKey{Namespace: "ns", Name: "workload"}
	clientset := kubefake.NewClientset()
	now := metav1.NewMicroTime(time.Now())
	_, err := clientset.CoordinationV1().Leases(cluster.Namespace).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.Namespace, Name: ClusterLeaseName(cluster.Name)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("other-manager"), LeaseDurationSeconds: ptr.To(int32(1)),
			AcquireTime: &now, RenewTime: &now,
		},
	}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	leases := &ClusterLeases{Client: clientset.CoordinationV1(), Identity: "this-manager",
		Timings: ClusterLeaseTimings{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}}
	defer leases.ReleaseAll()

	told := make(chan string, 100)
	tell := func(name string) func() { return func() { told <- name } }
	first, second := types.NamespacedName{Namespace: "ns", Name: "first"}, types.NamespacedName{Namespace: "ns", Name: "second"}
	held, _ := leases.Hold(context.Background(), cluster, first, tell(first.Name))
	g.Expect(held).To(BeFalse(), "another manager holds the Lease")
	held, _ = leases.Hold(context.Background(), cluster, second, tell(second.Name))
	g.Expect(held).To(BeFalse(), "another manager holds the Lease")
	for len(told) > 0 {
		<-told
	}

	g.Eventually(func() bool {
		held, _ := leases.Hold(context.Background(), cluster, second, tell(second.Name))
		return held
	}, 10*time.Second, 50*time.Millisecond).
		Should(BeTrue(), "the Lease is taken once the other manager's expires")
	var toldNames []string
	g.Eventually(func() []string {
		for len(told) > 0 {
			toldNames = append(toldNames, <-told)
		}
		return toldNames
	}).Should(ContainElement(second.Name), "the ClusterAutoscaler that owns the Lease is told")
	g.Expect(toldNames).NotTo(ContainElement(first.Name), "the ClusterAutoscaler that no longer owns the Lease is told")
}

// Pausing a Cluster stops its engine before giving the Lease back: an
// engine stopped while in a loop may be between a delete-machine mark and
// the replicas write, and another manager that took the Lease meanwhile
// would start an engine of its own on the Cluster.
func TestAPausedClusterKeepsItsLeaseUntilItsEngineHasStopped(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
	g.Expect(clusterv1.AddToScheme(scheme)).To(Succeed())
	cluster := &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workload"},
		Spec:       clusterv1.ClusterSpec{Paused: ptr.To(true)},
	}
	ca := &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "autoscaler"},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: cluster.Name},
	}
	key := client.ObjectKeyFromObject(ca)
	clientset := kubefake.NewClientset()
	r := &ClusterAutoscalerReconciler{
		Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(cluster, ca).
			WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build(),
		Recorder: record.NewFakeRecorder(10),
		Leases: &ClusterLeases{Client: clientset.CoordinationV1(), Identity: "this-manager",
			Timings: ClusterLeaseTimings{LeaseDuration: time.Second, RenewDeadline: 800 * time.Millisecond, RetryPeriod: 100 * time.Millisecond}},
	}
	defer r.Leases.ReleaseAll()
	g.Eventually(func() bool {
		held, _ := r.Leases.Hold(ctx, clusterKey(ca), key, func() {})
		return held
	}, 10*time.Second, 50*time.Millisecond).Should(BeTrue())

	// The engine's loop, stopped while it acts, reads who holds the
	// Lease when it returns.
	desired, err := desiredConfig(ca, clocktesting.NewFakeClock(time.Now()))
	g.Expect(err).NotTo(HaveOccurred())
	loopCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var holderAtLoopEnd string
	go func() {
		defer close(done)
		<-loopCtx.Done()
		lease, err := clientset.CoordinationV1().Leases(ca.Namespace).Get(ctx, ClusterLeaseName(cluster.Name), metav1.GetOptions{})
		if err == nil {
			holderAtLoopEnd = ptr.Deref(lease.Spec.HolderIdentity, "")
		}
	}()
	r.engines.put(key, &runningEngine{cluster: clusterKey(ca), applied: desired, cancel: cancel, done: done})

	_, err = r.reconcileNormal(ctx, newReconcileScope(ca))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.engines.get(key)).To(BeNil(), "the engine of a paused Cluster is stopped")
	g.Expect(holderAtLoopEnd).To(Equal("this-manager"), "the Lease was given back while the engine's loop still acted")
	lease, err := clientset.CoordinationV1().Leases(ca.Namespace).Get(ctx, ClusterLeaseName(cluster.Name), metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ptr.Deref(lease.Spec.HolderIdentity, "")).To(BeEmpty(), "the Lease is given back once the engine has stopped")
}
