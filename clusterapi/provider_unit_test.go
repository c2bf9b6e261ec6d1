package clusterapi

import (
	"context"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

// TestNodeGroupsListsOncePerListing lists the node groups of Clusters of
// 3 and 30 MachineDeployments, each with a MachineSet and a Machine and
// the first with a second active MachineSet (rolling out), and expects
// the same number of lists of the management cluster for both: a list per
// group filters every MachineSet and Machine of the namespace, which at a
// thousand groups made each loop's listing of them take seconds. Each
// group still finds its own Machine, and the first its rollout.
func TestNodeGroupsListsOncePerListing(t *testing.T) {
	g := NewWithT(t)
	scheme, err := simcluster.NewScheme()
	g.Expect(err).NotTo(HaveOccurred())
	lists := func(groups int) int {
		objects := []client.Object{&clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}}
		for i := range groups {
			md := simcluster.NodeGroup{Namespace: "ns", Name: fmt.Sprintf("md-%02d", i), Cluster: "c", MinSize: 0, MaxSize: 10, Replicas: ptr.To[int32](1)}.MachineDeployment()
			md.UID = types.UID("uid-" + md.Name)
			md.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}}
			objects = append(objects, md)
			sets := 1
			if i == 0 {
				sets = 2
			}
			for s := range sets {
				ms := &clusterv1.MachineSet{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s-%d", md.Name, s), UID: types.UID(fmt.Sprintf("uid-%s-%d", md.Name, s)),
						Labels:          map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment", Name: md.Name, UID: md.UID, Controller: ptr.To(true)}}},
					Spec: clusterv1.MachineSetSpec{ClusterName: "c", Replicas: ptr.To[int32](1)},
				}
				machine := &clusterv1.Machine{
					ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: ms.Name + "-m",
						Labels:          map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name},
						OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
					Spec: clusterv1.MachineSpec{ClusterName: "c"},
				}
				objects = append(objects, ms, machine)
			}
		}
		listed := 0
		management := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build(), interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				listed++
				return c.List(ctx, list, opts...)
			},
		})
		provider := NewProvider(Options{Management: management, Workload: fake.NewClientBuilder().WithScheme(scheme).Build(),
			Cluster: types.NamespacedName{Namespace: "ns", Name: "c"}, Owner: "owner"})
		list, err := provider.NodeGroups(t.Context())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(list.Problems).To(BeEmpty())
		g.Expect(list.Groups).To(HaveLen(groups))
		for _, group := range list.Groups {
			name := strings.TrimPrefix(group.ID(), "MachineDeployment/ns/")
			var machines []string
			for _, instance := range group.Instances() {
				machines = append(machines, instance.Name)
			}
			if name == "md-00" {
				g.Expect(machines).To(ConsistOf("md-00-0-m", "md-00-1-m"))
				g.Expect(group.ScaleDownBlockedReason()).To(ContainSubstring("2 active MachineSets"))
			} else {
				g.Expect(machines).To(ConsistOf(name+"-0-m"), name)
				g.Expect(group.ScaleDownBlockedReason()).To(BeEmpty(), name)
			}
		}
		return listed
	}
	g.Expect(lists(30)).To(Equal(lists(3)))
}
