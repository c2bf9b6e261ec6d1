package framework

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
)

// HasDeletionTaint says whether node carries the taint the autoscaler puts
// on the Nodes it removes.
func HasDeletionTaint(node *corev1.Node) bool {
	return nodefacts.HasTaint(node, nodefacts.ToBeDeletedTaint)
}

// NodeNames lists the names of the Nodes of the workload cluster.
func NodeNames(ctx context.Context, c client.Client) sets.Set[string] {
	nodes := &corev1.NodeList{}
	Expect(c.List(ctx, nodes)).To(Succeed())
	names := sets.New[string]()
	for _, node := range nodes.Items {
		names.Insert(node.Name)
	}
	return names
}

// ClusterNodes lists the Nodes of the workload cluster that belong to
// cluster (by ClusterLabel).
func ClusterNodes(ctx context.Context, g Gomega, workload client.Client, cluster *clusterv1.Cluster) []corev1.Node {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes, client.MatchingLabels{ClusterLabel: cluster.Name})).To(Succeed())
	return nodes.Items
}

// CountNodes counts all Nodes of the workload cluster.
func CountNodes(ctx context.Context, g Gomega, workload client.Client) int {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	return len(nodes.Items)
}

// ClusterCores sums the cpu capacity of every Node of the workload cluster,
// in whole cores (rounded up).
func ClusterCores(ctx context.Context, g Gomega, workload client.Client) int64 {
	nodes := &corev1.NodeList{}
	g.Expect(workload.List(ctx, nodes)).To(Succeed())
	var milli int64
	for _, node := range nodes.Items {
		milli += node.Status.Capacity.Cpu().MilliValue()
	}
	return (milli + 999) / 1000
}

// SetNodeLabel sets a label of the Node name, or removes it when value is
// empty.
func SetNodeLabel(ctx context.Context, workload client.Client, name, key, value string) {
	GinkgoHelper()
	PatchObject(ctx, workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, func(node *corev1.Node) {
		SetOrDelete(&node.Labels, key, value)
	})
}

// SetNodeAnnotation sets an annotation of the Node name, or removes it when
// value is empty.
func SetNodeAnnotation(ctx context.Context, workload client.Client, name, key, value string) {
	GinkgoHelper()
	PatchObject(ctx, workload, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, false, func(node *corev1.Node) {
		SetOrDelete(&node.Annotations, key, value)
	})
}
