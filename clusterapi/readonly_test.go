package clusterapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// TestNodeGroupsLeaveTheCacheAsItWas: the Provider reads the Cluster API
// objects and the infrastructure templates from the cache without copies,
// so nothing the node groups do may change them. It lists the groups of a
// cache that serves its own objects when asked not to copy, builds a
// template from zero, grows a group, removes a node (marks its Machine and
// lowers the replicas) and cancels the removal of another, with the writes
// going to an API server, and expects every cached object as it was.
func TestNodeGroupsLeaveTheCacheAsItWas(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	scheme, err := simcluster.NewScheme()
	g.Expect(err).NotTo(HaveOccurred())

	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	crd := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "simmachinetemplates." + infrav1.GroupVersion.Group,
		Labels: map[string]string{clusterv1.GroupVersion.String(): infrav1.GroupVersion.Version}}}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	management := []client.Object{cluster}
	var nodes []client.Object
	for _, group := range []struct {
		name     string
		machines int
		// marked: its Machines are marked for removal by the autoscaler.
		marked bool
	}{{"md-zero", 0, false}, {"md-two", 2, false}, {"md-marked", 1, true}} {
		ng := simcluster.NodeGroup{Namespace: "ns", Name: group.name, Cluster: "c", MaxSize: 5, Replicas: ptr.To(int32(group.machines)),
			CPU: "4", Memory: "16Gi", Pods: "110", Annotations: map[string]string{template.LabelsAnnotation: "pool=" + group.name}}
		infraTemplate := ng.MachineTemplate()
		infraTemplate.Status.Capacity = infraTemplate.Spec.Template.Spec.Capacity
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(infraTemplate)
		g.Expect(err).NotTo(HaveOccurred())
		infra := &unstructured.Unstructured{Object: content}
		infra.SetGroupVersionKind(infrav1.GroupVersion.WithKind("SimMachineTemplate"))
		md := ng.MachineDeployment()
		md.UID = types.UID("uid-" + md.Name)
		md.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}}
		ms := &clusterv1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: md.Name + "-0", UID: types.UID("uid-" + md.Name + "-0"),
				Labels:          map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment", Name: md.Name, UID: md.UID, Controller: ptr.To(true)}}},
			Spec: clusterv1.MachineSetSpec{ClusterName: "c", Replicas: md.Spec.Replicas},
		}
		management = append(management, infra, md, ms)
		for i := range group.machines {
			name := fmt.Sprintf("%s-m%d", md.Name, i)
			providerID := "sim://" + name
			machine := &clusterv1.Machine{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
					Labels:          map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name, clusterv1.ClusterNameLabel: "c"},
					OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineSet", Name: ms.Name, UID: ms.UID, Controller: ptr.To(true)}}},
				Spec: clusterv1.MachineSpec{ClusterName: "c", ProviderID: providerID},
			}
			if group.marked {
				// A removal the autoscaler asked for earlier, to cancel.
				now := st.Now.Format(time.RFC3339)
				machine.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: now, scalable.MarkedAnnotation: ownership.Stamp(ownUID, now)}
			}
			management = append(management, machine)
			node := st.Node(name, "4", "16Gi")
			node.Spec.ProviderID = providerID
			nodes = append(nodes, node)
		}
	}
	// The API server has what the cache has; writes go there.
	var written []client.Object
	for _, obj := range management {
		obj.SetResourceVersion("999") // the fake API server's first
		written = append(written, obj.DeepCopyObject().(client.Object))
	}
	apiServer := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(written...).Build(), interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return nil
		},
	})
	cache := newCacheReader(scheme, append(management, crd)...)
	before := map[client.Object]runtime.Object{}
	for _, objects := range cache.objects {
		for _, obj := range objects {
			before[obj] = obj.DeepCopyObject()
		}
	}

	provider := NewProvider(Options{Management: &cachedClient{Client: apiServer, cache: cache}, ManagementAPIReader: apiServer,
		Workload: newCacheReader(scheme, nodes...), Cluster: types.NamespacedName{Namespace: "ns", Name: "c"}, Owner: ownUID})
	list, err := provider.NodeGroups(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(list.Problems).To(BeEmpty())
	g.Expect(list.Groups).To(HaveLen(3))
	zero, two, marked := list.Groups[0], list.Groups[1], list.Groups[2]
	g.Expect(zero.ID()).To(Equal("MachineDeployment/ns/md-zero"))
	g.Expect(two.Instances()).To(HaveLen(2))
	g.Expect(marked.Instances()).To(HaveLen(1))

	node, err := zero.TemplateNode(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Labels).To(HaveKeyWithValue("pool", "md-zero"))
	g.Expect(node.Status.Capacity.Cpu().String()).To(Equal("4"))
	g.Expect(zero.IncreaseSize(ctx, 1)).To(Succeed())
	g.Expect(two.DeleteNodes(ctx, []*corev1.Node{nodes[0].(*corev1.Node)})).To(Succeed())
	g.Expect(marked.CancelDeletion(ctx, []*corev1.Node{nodes[2].(*corev1.Node)})).To(Succeed())

	machine := &clusterv1.Machine{}
	g.Expect(apiServer.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "md-two-m0"}, machine)).To(Succeed())
	g.Expect(machine.Annotations).To(HaveKey(clusterv1.DeleteMachineAnnotation), "the removal marked the Machine at the API server")
	g.Expect(apiServer.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "md-marked-m0"}, machine)).To(Succeed())
	g.Expect(machine.Annotations).NotTo(HaveKey(clusterv1.DeleteMachineAnnotation), "the cancellation removed the mark at the API server")
	for obj, was := range before {
		g.Expect(obj).To(Equal(was), "%T %s changed in the cache", obj, client.ObjectKeyFromObject(obj))
	}
}
