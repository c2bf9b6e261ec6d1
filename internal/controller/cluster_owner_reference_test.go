package controller

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
)

var _ = Describe("The Cluster as owner of its ClusterAutoscalers", func() {
	// clusterctl move takes along what a Cluster owns; envtest runs no
	// garbage collector, so deletion with the Cluster is not seen here.
	DescribeTable("is set whatever the ClusterAutoscaler then does",
		func(prepare func(*testenv.Fixture) types.NamespacedName) {
			fixture := newWorkloadCluster(unreachableServer)
			key := prepare(fixture)
			Eventually(func(g Gomega) {
				g.Expect(getClusterAutoscaler(g, key).OwnerReferences).To(ConsistOf(clusterOwnerReference(get(fixture.Cluster))))
			}, waitTimeout).Should(Succeed())
			deleteClusterAutoscaler(key)
		},
		Entry("autoscaling it", createClusterAutoscaler),
		Entry("refused, as another ClusterAutoscaler autoscales the Cluster", func(fixture *testenv.Fixture) types.NamespacedName {
			first := createNamedClusterAutoscaler(fixture, "first")
			DeferCleanup(deleteClusterAutoscaler, first)
			second := createNamedClusterAutoscaler(fixture, "second")
			Eventually(func(g Gomega) {
				g.Expect(conditions.Get(getClusterAutoscaler(g, second), autoscalingv1alpha1.ReadyCondition)).To(
					haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterAlreadyAutoscaledReason))
			}, waitTimeout).Should(Succeed())
			return second
		}),
		Entry("stopped, as the Cluster is paused", func(fixture *testenv.Fixture) types.NamespacedName {
			setPaused(fixture.Cluster, true)
			return createClusterAutoscaler(fixture)
		}),
	)

	It("says that the Cluster is not in this management cluster, and follows a Cluster created again under its name", func() {
		fixture := newWorkloadCluster(unreachableServer)
		key := createClusterAutoscaler(fixture)
		Eventually(func(g Gomega) {
			g.Expect(getClusterAutoscaler(g, key).OwnerReferences).To(ConsistOf(clusterOwnerReference(get(fixture.Cluster))))
		}, waitTimeout).Should(Succeed())

		By("deleting the Cluster, which the garbage collector would follow by deleting the ClusterAutoscaler")
		Expect(k8sClient.Delete(ctx, fixture.Cluster)).To(Succeed())
		Eventually(func(g Gomega) {
			ready := conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)
			g.Expect(ready).To(haveStatusAndReason(metav1.ConditionFalse, autoscalingv1alpha1.ClusterNotFoundReason))
			g.Expect(ready.Message).To(ContainSubstring("Cluster %s/%s does not exist in this management cluster", fixture.Namespace, fixture.Cluster.Name))
			g.Expect(ready.Message).To(ContainSubstring("clusterctl move"))
		}, waitTimeout).Should(Succeed())

		By("creating a Cluster of the same name")
		cluster := &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: fixture.Cluster.Name},
			Spec:       clusterv1.ClusterSpec{Paused: ptr.To(false)},
		}
		Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
		Expect(cluster.UID).NotTo(Equal(fixture.Cluster.UID))
		Eventually(func(g Gomega) {
			g.Expect(getClusterAutoscaler(g, key).OwnerReferences).To(ConsistOf(clusterOwnerReference(cluster)))
		}, waitTimeout).Should(Succeed())

		deleteClusterAutoscaler(key)
	})
})

// clusterOwnerReference is the owner reference a ClusterAutoscaler has to
// its Cluster.
func clusterOwnerReference(cluster *clusterv1.Cluster) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: clusterv1.GroupVersion.String(),
		Kind:       clusterv1.ClusterKind,
		Name:       cluster.Name,
		UID:        cluster.UID,
	}
}

func TestEnsureClusterOwnerReference(t *testing.T) {
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "workload", UID: "new-uid"}}
	want := clusterOwnerReference(cluster)
	other := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "workload", UID: "configmap-uid"}
	otherCluster := metav1.OwnerReference{APIVersion: clusterv1.GroupVersion.String(), Kind: clusterv1.ClusterKind, Name: "another", UID: "another-uid"}

	tests := []struct {
		name   string
		before []metav1.OwnerReference
		want   []metav1.OwnerReference
	}{
		{
			name: "none yet",
			want: []metav1.OwnerReference{want},
		},
		{
			name:   "already there",
			before: []metav1.OwnerReference{want},
			want:   []metav1.OwnerReference{want},
		},
		{
			name:   "the owners of others are kept",
			before: []metav1.OwnerReference{other, otherCluster},
			want:   []metav1.OwnerReference{other, otherCluster, want},
		},
		{
			name:   "a Cluster deleted and created again under the name is replaced",
			before: []metav1.OwnerReference{other, {APIVersion: want.APIVersion, Kind: want.Kind, Name: want.Name, UID: "old-uid"}},
			want:   []metav1.OwnerReference{other, want},
		},
		{
			name:   "a reference of an older API version is brought to the current one",
			before: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta1", Kind: want.Kind, Name: want.Name, UID: want.UID}},
			want:   []metav1.OwnerReference{want},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ca := &autoscalingv1alpha1.ClusterAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "autoscaler", OwnerReferences: tt.before}}
			ensureClusterOwnerReference(ca, cluster)
			g.Expect(ca.OwnerReferences).To(Equal(tt.want))
		})
	}
}
