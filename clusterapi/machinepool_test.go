package clusterapi

import (
	"context"
	"errors"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
	"github.com/capi-autoscaler/capi-autoscaler/template"
)

// recordedEvent is an event a node group recorded on its object.
type recordedEvent struct {
	GroupID, Type, Reason, Message string
}

type fakeRecorder struct{ events []recordedEvent }

func (r *fakeRecorder) Event(groupID, eventType, reason, message string) {
	r.events = append(r.events, recordedEvent{GroupID: groupID, Type: eventType, Reason: reason, Message: message})
}

var _ = Describe("MachinePool node groups", func() {
	var (
		ctx      context.Context
		f        *envtest.Fixture
		recorder *fakeRecorder
	)

	BeforeEach(func() {
		ctx = testContext()
		f = envtest.NewFixture(ctx, k8sClient)
		recorder = &fakeRecorder{}
	})

	id := func(name string) string { return scalable.ID(scalable.KindMachinePool, f.Namespace, name) }
	discover := func() nodegroups.List {
		GinkgoHelper()
		list, err := NewProvider(Options{
			Management: k8sClient,
			Workload:   k8sClient,
			Cluster:    types.NamespacedName{Namespace: f.Namespace, Name: f.Cluster.Name},
			Clock:      clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
			Recorder:   recorder,
			Owner:      ownUID,
		}).NodeGroups(ctx)
		Expect(err).NotTo(HaveOccurred())
		return list
	}
	groupOf := func(mp *clusterv1.MachinePool) nodegroups.NodeGroup {
		GinkgoHelper()
		for _, group := range discover().Groups {
			if group.ID() == id(mp.Name) {
				return group
			}
		}
		Fail("no node group " + id(mp.Name))
		return nil
	}
	providerID := func(name string) string { return "test:///" + f.NodeName(name) }
	// instance creates the Node of an instance of the pool, registered under
	// its provider ID, and lists the instance in spec.providerIDList as the
	// MachinePool controller does.
	instance := func(mp *clusterv1.MachinePool, name string) *corev1.Node {
		GinkgoHelper()
		node := f.Node(name, providerID(name))
		f.Create(ctx, node)
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(mp), mp)).To(Succeed())
		mp.Spec.ProviderIDList = append(mp.Spec.ProviderIDList, providerID(name))
		Expect(k8sClient.Update(ctx, mp)).To(Succeed())
		return node
	}
	// poolMachine creates the MachinePool Machine of an instance.
	poolMachine := func(mp *clusterv1.MachinePool, name string) *clusterv1.Machine {
		GinkgoHelper()
		machine := f.PoolMachine(name, mp)
		machine.Spec.ProviderID = providerID(name)
		f.Create(ctx, machine)
		return machine
	}
	replicasOf := func(mp *clusterv1.MachinePool) int32 {
		GinkgoHelper()
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(mp), mp)).To(Succeed())
		return *mp.Spec.Replicas
	}
	markedMachines := func() []string {
		GinkgoHelper()
		machines := &clusterv1.MachineList{}
		Expect(k8sClient.List(ctx, machines, client.InNamespace(f.Namespace))).To(Succeed())
		var marked []string
		for _, machine := range machines.Items {
			if _, ok := machine.Annotations[clusterv1.DeleteMachineAnnotation]; ok {
				marked = append(marked, machine.Name)
			}
		}
		return marked
	}

	It("finds the Cluster's annotated MachinePools, and reports a wrong annotation on one of them only", func() {
		otherCluster := f.MachinePool("mp-other", 1, sizeAnnotations(0, 5))
		otherCluster.Spec.ClusterName = "other"
		f.Create(ctx,
			f.MachinePool("mp-0", 1, sizeAnnotations(1, 5)),
			f.MachinePool("mp-plain", 1, nil),
			f.MachinePool("mp-bad", 1, map[string]string{scalable.MinSizeAnnotation: "4", scalable.MaxSizeAnnotation: "3"}),
			otherCluster,
		)

		list := discover()
		Expect(list.Groups).To(ConsistOf(HaveField("ID()", id("mp-0"))))
		Expect(list.Groups[0].MinSize()).To(Equal(1))
		Expect(list.Groups[0].MaxSize()).To(Equal(5))
		Expect(list.Groups[0].TargetSize()).To(Equal(1))
		Expect(list.Problems).To(ConsistOf(And(
			HaveField("ID", id("mp-bad")),
			HaveField("Reason", ReasonInvalidAnnotation),
			HaveField("Message", ContainSubstring(scalable.MinSizeAnnotation)),
		)))
	})

	It("finds its instances through its MachinePool Machines and spec.providerIDList, each once", func() {
		mp := f.MachinePool("mp-0", 4, sizeAnnotations(0, 5))
		f.Create(ctx, mp)
		withMachine := instance(mp, "with-machine")
		poolMachine(mp, "with-machine")
		// The MachinePool controller has not created its Machine yet.
		withoutMachine := instance(mp, "without-machine")
		// Listed, but its Node has not registered yet.
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(mp), mp)).To(Succeed())
		mp.Spec.ProviderIDList = append(mp.Spec.ProviderIDList, providerID("unregistered"))
		Expect(k8sClient.Update(ctx, mp)).To(Succeed())

		group := groupOf(mp)
		Expect(group.TargetSize()).To(Equal(4))
		Expect(group.Instances()).To(ConsistOf(
			And(HaveField("ID", providerID("with-machine")), HaveField("NodeName", withMachine.Name), HaveField("State", nodegroups.InstanceRunning),
				HaveField("Removable", BeTrue())),
			And(HaveField("ID", providerID("without-machine")), HaveField("NodeName", withoutMachine.Name), HaveField("State", nodegroups.InstanceRunning)),
			And(HaveField("ID", providerID("unregistered")), HaveField("NodeName", ""), HaveField("State", nodegroups.InstanceCreating),
				HaveField("Removable", BeFalse()), HaveField("Error", BeNil())),
		))
	})

	It("removes the instances it is given only when they have MachinePool Machines, which it tells the engine", func() {
		withMachines := f.MachinePool("mp-machines", 1, sizeAnnotations(0, 5))
		withoutMachines := f.MachinePool("mp-machineless", 1, sizeAnnotations(0, 5))
		atZero := f.MachinePool("mp-zero", 0, sizeAnnotations(0, 5))
		f.Create(ctx, withMachines, withoutMachines, atZero)
		instance(withMachines, "a")
		poolMachine(withMachines, "a")
		instance(withoutMachines, "b")

		Expect(groupOf(withMachines).RemovesChosenInstances()).To(BeTrue())
		Expect(groupOf(withMachines).Instances()).To(ConsistOf(HaveField("Owner", "MachinePool/mp-machines")))
		Expect(groupOf(withoutMachines).RemovesChosenInstances()).To(BeFalse(), "the provider chooses which instances go")
		Expect(groupOf(atZero).RemovesChosenInstances()).To(BeFalse(), "it cannot tell before it has instances")
	})

	Describe("with MachinePool Machines", func() {
		It("marks the Machine of the chosen node and lowers the replicas through /scale", func() {
			mp := f.MachinePool("mp-0", 3, sizeAnnotations(1, 5))
			f.Create(ctx, mp)
			a := instance(mp, "a")
			instance(mp, "b")
			instance(mp, "c")
			for _, name := range []string{"a", "b", "c"} {
				poolMachine(mp, name)
			}

			Expect(groupOf(mp).DeleteNodes(ctx, []*corev1.Node{a})).To(Succeed())
			Expect(markedMachines()).To(ConsistOf("a"))
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
			Expect(recorder.events).To(BeEmpty())
		})

		It("refuses a node whose Machine is still to come rather than let the provider choose", func() {
			mp := f.MachinePool("mp-0", 2, sizeAnnotations(0, 5))
			f.Create(ctx, mp)
			instance(mp, "a")
			poolMachine(mp, "a")
			waiting := instance(mp, "b")

			Expect(groupOf(mp).DeleteNodes(ctx, []*corev1.Node{waiting})).To(MatchError(ContainSubstring("no MachinePool Machine yet")))
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
			Expect(markedMachines()).To(BeEmpty())
		})

		It("gives up only replicas that have no instance yet", func() {
			mp := f.MachinePool("mp-0", 4, sizeAnnotations(0, 5))
			f.Create(ctx, mp)
			instance(mp, "a")
			poolMachine(mp, "a")
			// An instance whose Machine is still to come counts too.
			instance(mp, "b")
			group := groupOf(mp)

			Expect(group.DecreaseTargetSize(ctx, 2)).To(Succeed())
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
			Expect(group.DecreaseTargetSize(ctx, 1)).To(MatchError(ContainSubstring("2 instances exist")))
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
		})
	})

	Describe("without MachinePool Machines", func() {
		It("lowers the replicas for the chosen node, as upstream does, and warns that the provider chooses the instance", func() {
			mp := f.MachinePool("mp-0", 3, sizeAnnotations(1, 5))
			f.Create(ctx, mp)
			a := instance(mp, "a")
			instance(mp, "b")
			instance(mp, "c")

			Expect(groupOf(mp).DeleteNodes(ctx, []*corev1.Node{a})).To(Succeed())
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
			Expect(recorder.events).To(ConsistOf(recordedEvent{
				GroupID: id("mp-0"),
				Type:    corev1.EventTypeWarning,
				Reason:  ReasonDeletedWithoutMachine,
				Message: "Lowered the replicas by 1 for node(s) " + a.Name + ", which have no Machine to mark for deletion: " +
					"the infrastructure provider chooses which instance(s) to remove, as with the upstream cluster-autoscaler, and may remove others",
			}))
		})

		It("refuses while instances are still to be created, which lowering the replicas would cancel instead", func() {
			mp := f.MachinePool("mp-0", 3, sizeAnnotations(0, 5))
			f.Create(ctx, mp)
			a := instance(mp, "a")
			instance(mp, "b")

			Expect(groupOf(mp).DeleteNodes(ctx, []*corev1.Node{a})).To(MatchError(ContainSubstring("retry once replicas and instances agree")))
			Expect(replicasOf(mp)).To(BeEquivalentTo(3))
			Expect(recorder.events).To(BeEmpty())
		})

		It("refuses a node whose instance left spec.providerIDList since discovery", func() {
			mp := f.MachinePool("mp-0", 2, sizeAnnotations(0, 5))
			f.Create(ctx, mp)
			a := instance(mp, "a")
			instance(mp, "b")
			group := groupOf(mp)
			mp.Spec.ProviderIDList = []string{providerID("b")}
			Expect(k8sClient.Update(ctx, mp)).To(Succeed())

			Expect(group.DeleteNodes(ctx, []*corev1.Node{a})).To(MatchError(ContainSubstring("no longer in spec.providerIDList")))
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
		})

		It("never goes below min size", func() {
			mp := f.MachinePool("mp-0", 2, sizeAnnotations(2, 5))
			f.Create(ctx, mp)
			a := instance(mp, "a")
			instance(mp, "b")

			var outOfBounds *scalable.OutOfBoundsError
			Expect(errors.As(groupOf(mp).DeleteNodes(ctx, []*corev1.Node{a}), &outOfBounds)).To(BeTrue())
			Expect(replicasOf(mp)).To(BeEquivalentTo(2))
			Expect(recorder.events).To(BeEmpty())
		})

		It("cannot delete an instance that never registered, which only its provider can remove", func() {
			mp := f.MachinePool("mp-0", 1, sizeAnnotations(0, 5))
			mp.Spec.ProviderIDList = []string{providerID("unregistered")}
			f.Create(ctx, mp)
			group := groupOf(mp)

			Expect(group.DeleteInstances(ctx, group.Instances())).To(MatchError(ContainSubstring("no Machine to delete")))
			Expect(replicasOf(mp)).To(BeEquivalentTo(1))
		})
	})

	It("does without MachinePools where the API server does not serve them", func() {
		f.Create(ctx, f.MachineDeployment("md-0", 1, sizeAnnotations(0, 3)))
		watching, err := client.NewWithWatch(testEnv.Config, client.Options{Scheme: testEnv.Scheme})
		Expect(err).NotTo(HaveOccurred())
		withoutPools := interceptor.NewClient(watching, interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if _, ok := list.(*clusterv1.MachinePoolList); ok {
					return &meta.NoKindMatchError{GroupKind: clusterv1.GroupVersion.WithKind("MachinePool").GroupKind(), SearchedVersions: []string{"v1beta2"}}
				}
				return c.List(ctx, list, opts...)
			},
		})

		list, err := NewProvider(Options{
			Management: withoutPools,
			Workload:   k8sClient,
			Cluster:    types.NamespacedName{Namespace: f.Namespace, Name: f.Cluster.Name},
			Owner:      ownUID,
		}).NodeGroups(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Groups).To(ConsistOf(HaveField("ID()", scalable.ID(scalable.KindMachineDeployment, f.Namespace, "md-0"))))
	})

	It("scales from zero with what the infrastructure machine pool publishes, the annotations winning", func() {
		annotations := sizeAnnotations(0, 5)
		annotations[template.MemoryAnnotation] = "8Gi"
		mp := f.MachinePool("mp-0", 0, annotations)
		f.Create(ctx, mp)
		infra := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"capacity": map[string]any{"cpu": "4", "memory": "16Gi"},
			"nodeInfo": map[string]any{"architecture": "arm64", "operatingSystem": "linux"},
		}}}
		infra.SetGroupVersionKind(envtest.InfrastructureMachinePool)
		infra.SetNamespace(f.Namespace)
		infra.SetName(mp.Name)
		Expect(k8sClient.Create(ctx, infra)).To(Succeed())

		node, err := groupOf(mp).TemplateNode(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(node.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceCPU, BeComparableTo(resource.MustParse("4"))))
		Expect(node.Status.Capacity).To(HaveKeyWithValue(corev1.ResourceMemory, BeComparableTo(resource.MustParse("8Gi"))))
		Expect(node.Labels).To(HaveKeyWithValue(corev1.LabelArchStable, "arm64"))
	})
})
