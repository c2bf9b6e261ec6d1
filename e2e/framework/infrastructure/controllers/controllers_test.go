package controllers

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/secret"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
)

var capacity = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("2"),
	corev1.ResourceMemory: resource.MustParse("4Gi"),
	corev1.ResourcePods:   resource.MustParse("110"),
}

var _ = Describe("SimMachineReconciler", func() {
	var (
		namespace  string
		cluster    *clusterv1.Cluster
		clock      *clocktesting.FakePassiveClock
		reconciler *SimMachineReconciler
	)

	BeforeEach(func() {
		ctx := testContext()
		namespace = "sim-" + rand.String(6)
		Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
		cluster = &clusterv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "test"},
			Spec: clusterv1.ClusterSpec{
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimCluster", Name: "test"},
			},
		}
		Expect(k8sClient.Create(ctx, cluster)).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secret.Name(cluster.Name, secret.Kubeconfig)},
			Data:       map[string][]byte{secret.KubeconfigDataName: workloadKubeconfig},
		})).To(Succeed())
		Expect(k8sClient.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "bootstrap"},
			Data:       map[string][]byte{"value": []byte("#!/bin/true")},
		})).To(Succeed())
		clock = clocktesting.NewFakePassiveClock(time.Now())
		reconciler = &SimMachineReconciler{Client: k8sClient, Workloads: NewWorkloadClients(), Clock: clock}
	})

	// newMachine creates a Machine and its SimMachine with spec.
	newMachine := func(spec infrav1.SimMachineSpec) (*clusterv1.Machine, *infrav1.SimMachine) {
		ctx := testContext()
		name := "m-" + rand.String(6)
		machine := &clusterv1.Machine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: namespace,
				Name:      name,
				Labels: map[string]string{
					clusterv1.ClusterNameLabel:        cluster.Name,
					"node-role.kubernetes.io/worker":  "",
					"not-propagated.example.com/team": "a",
				},
			},
			Spec: clusterv1.MachineSpec{
				ClusterName:       cluster.Name,
				Version:           "v1.36.3",
				FailureDomain:     "zone-a",
				Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To("bootstrap")},
				InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "SimMachine", Name: name},
			},
		}
		Expect(k8sClient.Create(ctx, machine)).To(Succeed())
		simMachine := &infrav1.SimMachine{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:       namespace,
				Name:            name,
				Labels:          map[string]string{clusterv1.ClusterNameLabel: cluster.Name},
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(machine, clusterv1.GroupVersion.WithKind("Machine"))},
			},
			Spec: spec,
		}
		Expect(k8sClient.Create(ctx, simMachine)).To(Succeed())
		// Reconciles happen as the machine is created; the API server
		// truncates creation times to the second, so the clock follows it.
		clock.SetTime(simMachine.CreationTimestamp.Time)
		return machine, simMachine
	}

	reconcile := func(simMachine *infrav1.SimMachine) ctrl.Result {
		ctx := testContext()
		result, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(simMachine)})
		Expect(err).NotTo(HaveOccurred())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(simMachine), simMachine)).To(Succeed())
		return result
	}

	nodeOf := func(simMachine *infrav1.SimMachine) (*corev1.Node, error) {
		node := &corev1.Node{}
		return node, k8sClient.Get(testContext(), client.ObjectKey{Name: simMachine.Name}, node)
	}

	It("turns a SimMachine into a Node with its capacity, provider ID, propagated labels and taints", func() {
		startupTaint := corev1.Taint{Key: "startup-taint.cluster-autoscaler.kubernetes.io/cni", Effect: corev1.TaintEffectNoSchedule}
		_, simMachine := newMachine(infrav1.SimMachineSpec{Capacity: capacity, NodeLabels: map[string]string{"pool": "a"},
			NodeTaints: []corev1.Taint{startupTaint}})
		reconcile(simMachine)

		Expect(simMachine.Spec.ProviderID).To(Equal("sim://" + namespace + "/" + simMachine.Name))
		Expect(simMachine.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		Expect(meta.IsStatusConditionTrue(simMachine.Status.Conditions, infrav1.ReadyCondition)).To(BeTrue())
		Expect(simMachine.Finalizers).To(ContainElement(infrav1.MachineFinalizer))

		node, err := nodeOf(simMachine)
		Expect(err).NotTo(HaveOccurred())
		Expect(node.Spec.ProviderID).To(Equal(simMachine.Spec.ProviderID))
		Expect(node.Annotations).To(HaveKeyWithValue("kwok.x-k8s.io/node", "fake"))
		Expect(node.Labels).To(And(
			HaveKeyWithValue("node-role.kubernetes.io/worker", ""),
			HaveKeyWithValue("pool", "a"),
			HaveKeyWithValue(corev1.LabelTopologyZone, "zone-a"),
			HaveKeyWithValue(corev1.LabelHostname, simMachine.Name),
			HaveKeyWithValue(corev1.LabelArchStable, "amd64"),
			HaveKeyWithValue(corev1.LabelOSStable, "linux"),
			Not(HaveKey("not-propagated.example.com/team")),
		))
		Expect(node.Spec.Taints).To(ContainElement(startupTaint), "next to the not-ready taint the API server adds")
		Expect(node.Status.Allocatable.Cpu().String()).To(Equal("2"))
		Expect(node.Status.Capacity.Memory().String()).To(Equal("4Gi"))

		By("Deleting the SimMachine, which deletes its Node")
		Expect(k8sClient.Delete(testContext(), simMachine)).To(Succeed())
		_, err = reconciler.Reconcile(testContext(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(simMachine)})
		Expect(err).NotTo(HaveOccurred())
		_, err = nodeOf(simMachine)
		Expect(err).To(Satisfy(func(err error) bool { return client.IgnoreNotFound(err) == nil && err != nil }))
		Expect(k8sClient.Get(testContext(), client.ObjectKeyFromObject(simMachine), simMachine)).NotTo(Succeed())
	})

	It("reports a terminal failure when provisioning fails", func() {
		_, simMachine := newMachine(infrav1.SimMachineSpec{Capacity: capacity, Provisioning: infrav1.ProvisioningFail})
		reconcile(simMachine)

		Expect(simMachine.Status.FailureReason).To(HaveValue(Equal("CreateError")))
		Expect(simMachine.Status.FailureMessage).NotTo(BeNil())
		Expect(simMachine.Status.Initialization.Provisioned).To(BeNil())
		ready := meta.FindStatusCondition(simMachine.Status.Conditions, infrav1.ReadyCondition)
		Expect(ready).To(HaveValue(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", infrav1.ProvisioningFailedReason))))
		_, err := nodeOf(simMachine)
		Expect(err).To(HaveOccurred())
	})

	It("never provisions a hanging machine", func() {
		_, simMachine := newMachine(infrav1.SimMachineSpec{Capacity: capacity, Provisioning: infrav1.ProvisioningHang})
		Expect(reconcile(simMachine)).To(Equal(ctrl.Result{}))

		Expect(simMachine.Status.Initialization.Provisioned).To(BeNil())
		Expect(simMachine.Spec.ProviderID).To(BeEmpty())
		Expect(meta.FindStatusCondition(simMachine.Status.Conditions, infrav1.ReadyCondition)).To(HaveValue(HaveField("Reason", infrav1.ProvisioningReason)))
	})

	It("provisions a machine that never registers a Node", func() {
		_, simMachine := newMachine(infrav1.SimMachineSpec{Capacity: capacity, Provisioning: infrav1.ProvisioningNeverRegister})
		reconcile(simMachine)

		Expect(simMachine.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
		Expect(simMachine.Spec.ProviderID).NotTo(BeEmpty())
		_, err := nodeOf(simMachine)
		Expect(err).To(HaveOccurred())
	})

	It("provisions after the provisioning delay", func() {
		_, simMachine := newMachine(infrav1.SimMachineSpec{Capacity: capacity, ProvisioningDelay: metav1.Duration{Duration: time.Minute}})
		Expect(reconcile(simMachine).RequeueAfter).To(Equal(time.Minute))
		Expect(simMachine.Status.Initialization.Provisioned).To(BeNil())

		clock.SetTime(simMachine.CreationTimestamp.Add(time.Minute))
		reconcile(simMachine)
		Expect(simMachine.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
	})
})

var _ = Describe("SimMachineTemplateReconciler", func() {
	It("publishes the capacity and node info for scale from zero", func() {
		ctx := testContext()
		template := &infrav1.SimMachineTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "t-" + rand.String(6)},
			Spec: infrav1.SimMachineTemplateSpec{Template: infrav1.SimMachineTemplateResource{
				Spec: infrav1.SimMachineSpec{Capacity: capacity, Architecture: "arm64"},
			}},
		}
		Expect(k8sClient.Create(ctx, template)).To(Succeed())
		r := &SimMachineTemplateReconciler{Client: k8sClient}
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(template)})
		Expect(err).NotTo(HaveOccurred())

		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(template), template)).To(Succeed())
		Expect(template.Status.Capacity.Cpu().String()).To(Equal("2"))
		Expect(template.Status.NodeInfo).To(HaveValue(Equal(infrav1.NodeInfo{Architecture: "arm64", OperatingSystem: "linux"})))
	})
})

var _ = Describe("SimControlPlaneReconciler", func() {
	It("writes the Cluster's kubeconfig Secret and reports the control plane initialized", func() {
		ctx := testContext()
		controlPlane := &infrav1.SimControlPlane{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: metav1.NamespaceDefault,
				Name:      "cp-" + rand.String(6),
				Labels:    map[string]string{clusterv1.ClusterNameLabel: "workload"},
			},
		}
		Expect(k8sClient.Create(ctx, controlPlane)).To(Succeed())
		r := &SimControlPlaneReconciler{Client: k8sClient, Kubeconfig: workloadKubeconfig}
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(controlPlane)})
		Expect(err).NotTo(HaveOccurred())

		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(controlPlane), controlPlane)).To(Succeed())
		Expect(controlPlane.Status.Initialization.ControlPlaneInitialized).To(HaveValue(BeTrue()))
		Expect(controlPlane.Status.ExternalManagedControlPlane).To(HaveValue(BeTrue()))
		Expect(controlPlane.Spec.ControlPlaneEndpoint.IsValid()).To(BeTrue())
		kubeconfigSecret := &corev1.Secret{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "workload-kubeconfig"}, kubeconfigSecret)).To(Succeed())
		Expect(kubeconfigSecret.Data).To(HaveKeyWithValue(secret.KubeconfigDataName, workloadKubeconfig))
		Expect(kubeconfigSecret.Labels).To(HaveKeyWithValue(clusterv1.ClusterNameLabel, "workload"))
	})
})
