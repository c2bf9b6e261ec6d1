package controllers

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

var _ = Describe("SimMachinePoolReconciler", func() {
	var (
		mp         *clusterv1.MachinePool
		pool       *infrav1.SimMachinePool
		reconciler *SimMachinePoolReconciler
	)

	BeforeEach(func() {
		ctx := testContext()
		namespace := "pool-" + rand.String(6)
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
		mp = &clusterv1.MachinePool{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pool"},
			Spec: clusterv1.MachinePoolSpec{
				ClusterName: "test",
				Replicas:    ptr.To[int32](2),
				Template: clusterv1.MachineTemplateSpec{Spec: clusterv1.MachineSpec{
					ClusterName:       "test",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachinePool", Name: "pool"},
				}},
			},
		}
		Expect(k8sClient.Create(ctx, mp)).To(Succeed())
		// The MachinePool controller owns the infrastructure machine pool.
		pool = &infrav1.SimMachinePool{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       namespace,
				Name:            "pool",
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(mp, clusterv1.GroupVersion.WithKind("MachinePool"))},
			},
			Spec: infrav1.SimMachinePoolSpec{Template: infrav1.SimMachineSpec{Capacity: capacity, Provisioning: infrav1.ProvisioningHang}},
		}
		Expect(k8sClient.Create(ctx, pool)).To(Succeed())
		reconciler = &SimMachinePoolReconciler{Client: k8sClient}
	})

	reconcile := func() {
		GinkgoHelper()
		ctx := testContext()
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(pool)})
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pool), pool)).To(Succeed())
	}
	instances := func() []infrav1.SimMachine {
		GinkgoHelper()
		list := &infrav1.SimMachineList{}
		Expect(k8sClient.List(testContext(), list, client.InNamespace(pool.Namespace), client.MatchingLabels{
			clusterv1.ClusterNameLabel: "test", clusterv1.MachinePoolNameLabel: mp.Name,
		})).To(Succeed())
		return list.Items
	}
	// adopt does what Cluster API does for an instance: it creates its
	// MachinePool Machine, which becomes the instance's controller, and
	// the instance provisions.
	adopt := func(simMachine *infrav1.SimMachine) *clusterv1.Machine {
		GinkgoHelper()
		ctx := testContext()
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       simMachine.Namespace,
				Name:            simMachine.Name,
				Labels:          simMachine.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(mp, clusterv1.GroupVersion.WithKind("MachinePool"))},
			},
			Spec: clusterv1.MachineSpec{
				ClusterName:       "test",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachine", Name: simMachine.Name},
			},
		}
		Expect(k8sClient.Create(ctx, machine)).To(Succeed())
		simMachine.OwnerReferences = append(simMachine.OwnerReferences, *metav1.NewControllerRef(machine, clusterv1.GroupVersion.WithKind("Machine")))
		simMachine.Spec.ProviderID = infrav1.ProviderIDPrefix + simMachine.Namespace + "/" + simMachine.Name
		Expect(k8sClient.Update(ctx, simMachine)).To(Succeed())
		simMachine.Status.Initialization.Provisioned = ptr.To(true)
		Expect(k8sClient.Status().Update(ctx, simMachine)).To(Succeed())
		return machine
	}

	It("runs as many instances as the replicas, publishes them and removes the marked one first", func() {
		ctx := testContext()
		By("creating an instance per replica from the template")
		reconcile()
		created := instances()
		Expect(created).To(HaveLen(2))
		for _, instance := range created {
			Expect(instance.Spec.Capacity).To(Equal(capacity))
			Expect(instance.Spec.Provisioning).To(Equal(infrav1.ProvisioningHang))
			Expect(instance.OwnerReferences).To(ContainElement(HaveField("Name", pool.Name)))
		}
		Expect(pool.Status.Ready).To(BeTrue())
		Expect(pool.Status.InfrastructureMachineKind).To(Equal("SimMachine"))
		Expect(pool.Status.Capacity).To(Equal(capacity))
		Expect(pool.Spec.ProviderIDList).To(BeEmpty(), "no instance is provisioned yet")

		By("publishing the provider IDs of the provisioned instances")
		kept := adopt(&created[0])
		marked := adopt(&created[1])
		reconcile()
		Expect(pool.Spec.ProviderIDList).To(ConsistOf(created[0].Spec.ProviderID, created[1].Spec.ProviderID))
		Expect(pool.Status.Replicas).To(BeEquivalentTo(2))

		By("deleting the Machine marked for deletion when the replicas go down")
		marked.Annotations = map[string]string{clusterv1.DeleteMachineAnnotation: "now"}
		Expect(k8sClient.Update(ctx, marked)).To(Succeed())
		mp.Spec.Replicas = ptr.To[int32](1)
		Expect(k8sClient.Update(ctx, mp)).To(Succeed())
		reconcile()
		Expect(apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKeyFromObject(marked), &clusterv1.Machine{}))).To(BeTrue(), "the marked Machine must go")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(kept), &clusterv1.Machine{})).To(Succeed())
	})
})
