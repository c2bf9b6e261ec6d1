package controller

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// With --watch-filter a Cluster event reaches only the ClusterAutoscalers
// of that manager: the event filter sees the Cluster, not the objects it
// maps to.
func TestClusterToClusterAutoscalersWatchFilter(t *testing.T) {
	clusterAutoscaler := func(name string, labels map[string]string) *autoscalingv1alpha1.ClusterAutoscaler {
		return &autoscalingv1alpha1.ClusterAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels},
			Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: "cluster"},
		}
	}
	objects := []client.Object{
		clusterAutoscaler("mine", map[string]string{clusterv1.WatchLabel: "mine"}),
		clusterAutoscaler("theirs", map[string]string{clusterv1.WatchLabel: "theirs"}),
		clusterAutoscaler("unlabelled", nil),
	}
	tests := []struct {
		name        string
		watchFilter string
		want        []string
	}{
		{name: "no filter", want: []string{"mine", "theirs", "unlabelled"}},
		{name: "filter", watchFilter: "mine", want: []string{"mine"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			scheme := runtime.NewScheme()
			g.Expect(autoscalingv1alpha1.AddToScheme(scheme)).To(Succeed())
			r := &ClusterAutoscalerReconciler{
				Client: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).
					WithIndex(&autoscalingv1alpha1.ClusterAutoscaler{}, clusterNameField, indexByClusterName).Build(),
				WatchFilterValue: tt.watchFilter,
			}
			cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cluster"}}

			var got []string
			for _, req := range r.clusterToClusterAutoscalers(context.Background(), cluster) {
				got = append(got, req.Name)
			}
			g.Expect(got).To(ConsistOf(tt.want))
		})
	}
}
