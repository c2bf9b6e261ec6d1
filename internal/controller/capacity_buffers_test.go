package controller

import (
	"context"
	"path/filepath"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	. "github.com/onsi/gomega/gstruct"
	"github.com/onsi/gomega/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/cluster-api/util/secret"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
)

// The envtest API server serves as the workload cluster, with the
// CapacityBuffer CRD installed.
var _ = Describe("Capacity buffers", func() {
	var (
		namespace string
		clock     *clocktesting.FakeClock
		lister    *capacityBuffers
	)
	webSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
	}}}}
	createBuffer := func(name string, spec capacitybufferv1beta1.CapacityBufferSpec) *capacitybufferv1beta1.CapacityBuffer {
		GinkgoHelper()
		buffer := &capacitybufferv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Spec: spec}
		Expect(k8sClient.Create(ctx, buffer)).To(Succeed())
		// The API server is the workload cluster of every spec of the
		// suite, and envtest deletes nothing with a namespace: a buffer
		// left behind would have the engines of later specs keep room for
		// it, and scale up for it.
		DeferCleanup(func(ctx context.Context) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, buffer))).To(Succeed())
		})
		return buffer
	}
	bufferStatus := func(name string) capacitybufferv1beta1.CapacityBufferStatus {
		GinkgoHelper()
		buffer := &capacitybufferv1beta1.CapacityBuffer{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, buffer)).To(Succeed())
		return buffer.Status
	}
	listBuffers := func() []buffers.Buffer {
		GinkgoHelper()
		list, err := lister.ListBuffers(ctx)
		Expect(err).NotTo(HaveOccurred())
		// As the engine's Active actuation does once the loop is planned,
		// with the windows of the scheduled buffers at the default lead
		// time of 15m.
		windows := map[string]buffers.Window{}
		for _, buffer := range list {
			if buffer.Schedule != nil {
				windows[buffer.Key()] = buffer.Schedule.At(clock.Now(), 15*time.Minute)
			}
		}
		lister.WriteStatus(ctx, windows)
		return list
	}

	BeforeEach(func() {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "buffers-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		namespace = ns.Name
		clock = clocktesting.NewFakeClock(time.Now())
		lister = newCapacityBuffers(client.NewNamespacedClient(k8sClient, namespace),
			func(context.Context) (client.Client, error) { return k8sClient, nil }, clock)
	})

	It("keeps room for the pods of a PodTemplate, and says so in the buffer's status", func() {
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: webSpec}})).To(Succeed())
		createBuffer("warm", capacitybufferv1beta1.CapacityBufferSpec{
			PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](2),
		})

		list := listBuffers()

		Expect(list).To(HaveLen(1))
		Expect(list[0].Replicas).To(Equal(int32(2)))
		Expect(list[0].Template.Labels).To(HaveKeyWithValue("app", "web"))
		status := bufferStatus("warm")
		Expect(status.Replicas).To(HaveValue(Equal(int32(2))))
		Expect(status.PodTemplateRef).To(HaveValue(HaveField("Name", "web")))
		Expect(status.ProvisioningStrategy).To(HaveValue(Equal(capacitybufferv1beta1.ActiveCapacityProvisioningStrategy)))
		Expect(meta.IsStatusConditionTrue(status.Conditions, capacitybufferv1beta1.ReadyForProvisioningCondition)).To(BeTrue())
		Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ProvisioningCondition)).To(HaveValue(SatisfyAll(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", capacitybufferv1beta1.FakePodsInjectedReason))))
	})

	It("limits the replicas of buffers by their namespace's ResourceQuotas, the oldest buffer first, and says so", func() {
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Template: corev1.PodTemplateSpec{Spec: webSpec}})).To(Succeed())
		// Created in the same second, the buffers are served by name.
		createBuffer("a-old", capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](3)})
		createBuffer("b-young", capacitybufferv1beta1.CapacityBufferSpec{PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](3)})
		quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "compute"},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse("4")}}}
		Expect(k8sClient.Create(ctx, quota)).To(Succeed())
		// No quota controller runs here: the spec writes what it would.
		setQuotaUse := func(used string) {
			GinkgoHelper()
			Eventually(func() error {
				current := &corev1.ResourceQuota{}
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(quota), current); err != nil {
					return err
				}
				current.Status = corev1.ResourceQuotaStatus{Hard: current.Spec.Hard, Used: corev1.ResourceList{corev1.ResourceRequestsCPU: resource.MustParse(used)}}
				return k8sClient.Status().Update(ctx, current)
			}).Should(Succeed())
		}
		replicasOf := func(list []buffers.Buffer) map[string]int32 {
			out := map[string]int32{}
			for _, b := range list {
				out[b.Name] = b.Replicas
			}
			return out
		}
		limitedByQuotas := func(name string) *metav1.Condition {
			return meta.FindStatusCondition(bufferStatus(name).Conditions, capacitybufferv1beta1.LimitedByQuotasCondition)
		}

		By("2 of the quota's 4 cpus used: room for 4 pods of 500m")
		setQuotaUse("2")
		Expect(replicasOf(listBuffers())).To(Equal(map[string]int32{"a-old": 3, "b-young": 1}))
		Expect(bufferStatus("b-young").Replicas).To(HaveValue(Equal(int32(1))))
		Expect(limitedByQuotas("b-young")).To(HaveValue(SatisfyAll(
			HaveField("Status", metav1.ConditionTrue), HaveField("Reason", capacitybufferv1beta1.ResourceQuotasAllocatedReason),
			HaveField("Message", "Buffer replicas limited from 3 to 1 due to quotas: compute"))))
		Expect(limitedByQuotas("a-old")).To(HaveValue(HaveField("Status", metav1.ConditionFalse)))

		By("3 cpus used, read once the quotas are read again: the older buffer takes what is left")
		setQuotaUse("3")
		clock.Step(quotaReadInterval)
		Expect(replicasOf(listBuffers())).To(Equal(map[string]int32{"a-old": 2}))
		Expect(bufferStatus("a-old").Replicas).To(HaveValue(Equal(int32(2))))
		Expect(bufferStatus("b-young").Replicas).To(HaveValue(Equal(int32(0))))
		Expect(meta.FindStatusCondition(bufferStatus("b-young").Conditions, capacitybufferv1beta1.ProvisioningCondition)).To(HaveValue(SatisfyAll(
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", capacitybufferv1beta1.BufferIsEmptyReason),
			HaveField("Message", ContainSubstring("ResourceQuotas")))))
	})

	It("keeps a percentage of a Deployment's replicas, rounded up and within limits, from a PodTemplate written for it", func() {
		deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](10),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: webSpec},
		}}
		Expect(k8sClient.Create(ctx, deployment)).To(Succeed())
		createBuffer("web-headroom", capacitybufferv1beta1.CapacityBufferSpec{
			ScalableRef: &capacitybufferv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"},
			Percentage:  ptr.To[int32](25),
		})

		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(3))), "25% of 10 replicas, rounded up")
		template := &corev1.PodTemplate{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "capacitybuffer-web-headroom-pod-template"}, template)).To(Succeed())
		Expect(template.OwnerReferences).To(ConsistOf(HaveField("Kind", "CapacityBuffer")))
		Expect(bufferStatus("web-headroom").PodTemplateRef).To(HaveValue(HaveField("Name", template.Name)))

		By("following the Deployment's replicas, once the buffer is resolved again")
		deployment.Spec.Replicas = ptr.To[int32](20)
		Expect(k8sClient.Update(ctx, deployment)).To(Succeed())
		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(3))), "not read again within the resolve interval")
		clock.Step(bufferResolveInterval)
		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(5))))
		Expect(bufferStatus("web-headroom").Replicas).To(HaveValue(Equal(int32(5))))

		By("within limits")
		buffer := &capacitybufferv1beta1.CapacityBuffer{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: namespace, Name: "web-headroom"}, buffer)).To(Succeed())
		buffer.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		Expect(k8sClient.Update(ctx, buffer)).To(Succeed())
		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(2))), "a new generation is resolved at once")
	})

	It("says where a scheduled buffer stands in its schedule, when its window changes, and why a bad schedule is ignored", func() {
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Template: corev1.PodTemplateSpec{Spec: webSpec}})).To(Succeed())
		buffer := createBuffer("office-hours", capacitybufferv1beta1.CapacityBufferSpec{
			PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](2),
		})
		paris, err := time.LoadLocation("Europe/Paris")
		Expect(err).NotTo(HaveOccurred())
		// Ten seconds before the lead time of the Monday window.
		clock.SetTime(time.Date(2026, time.December, 7, 7, 44, 50, 0, paris))
		annotate := func(annotations map[string]string) {
			GinkgoHelper()
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(buffer), buffer)).To(Succeed())
			buffer.Annotations = annotations
			Expect(k8sClient.Update(ctx, buffer)).To(Succeed())
		}
		annotate(map[string]string{
			buffers.ScheduleAnnotation: "0 8 * * 1-5", buffers.ScheduleTimeZoneAnnotation: "Europe/Paris", buffers.ScheduleDurationAnnotation: "10h",
		})
		conditions := func() []metav1.Condition { GinkgoHelper(); return bufferStatus("office-hours").Conditions }
		condition := func(conditionType string, status metav1.ConditionStatus, reason, message string) types.GomegaMatcher {
			return ContainElement(SatisfyAll(HaveField("Type", conditionType), HaveField("Status", status),
				HaveField("Reason", reason), HaveField("Message", ContainSubstring(message))))
		}

		Eventually(listBuffers).Should(ConsistOf(HaveField("Schedule", Not(BeNil()))))
		Expect(conditions()).To(SatisfyAll(
			condition(scheduleWindowCondition, metav1.ConditionFalse, windowClosedReason, "the next opens at 2026-12-07T08:00:00+01:00 and closes at 2026-12-07T18:00:00+01:00"),
			condition(capacitybufferv1beta1.ProvisioningCondition, metav1.ConditionFalse, windowClosedReason, "outside the buffer's schedule windows"),
		))

		By("holding the room from the lead time before the window, though the buffer is not resolved again")
		clock.Step(20 * time.Second)
		listBuffers()
		Expect(conditions()).To(SatisfyAll(
			condition(scheduleWindowCondition, metav1.ConditionTrue, leadTimeReason, "holds its room from 15m0s before"),
			condition(capacitybufferv1beta1.ProvisioningCondition, metav1.ConditionTrue, capacitybufferv1beta1.FakePodsInjectedReason, "room for 2 pod(s)"),
		))

		By("ignoring a bad schedule: the room is held as without one")
		annotate(map[string]string{
			buffers.ScheduleAnnotation: "0 8 * * 1-5", buffers.ScheduleTimeZoneAnnotation: "Europe/Pariss", buffers.ScheduleDurationAnnotation: "10h",
		})
		Eventually(listBuffers).Should(ConsistOf(HaveField("ScheduleProblem", ContainSubstring(`unknown time zone "Europe/Pariss"`))))
		Expect(conditions()).To(SatisfyAll(
			condition(scheduleWindowCondition, metav1.ConditionUnknown, invalidScheduleReason, `holds its room at all times as without one: unknown time zone "Europe/Pariss"`),
			condition(capacitybufferv1beta1.ProvisioningCondition, metav1.ConditionTrue, capacitybufferv1beta1.FakePodsInjectedReason, "room for 2 pod(s)"),
		))

		By("saying nothing of a schedule once the annotations are gone")
		annotate(nil)
		Eventually(listBuffers).Should(ConsistOf(HaveField("ScheduleProblem", "")))
		Expect(meta.FindStatusCondition(conditions(), scheduleWindowCondition)).To(BeNil())
	})

	It("reports a buffer it cannot resolve, and keeps no room for it", func() {
		createBuffer("broken", capacitybufferv1beta1.CapacityBufferSpec{
			PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "missing"}, Replicas: ptr.To[int32](1),
		})
		createBuffer("unsupported", capacitybufferv1beta1.CapacityBufferSpec{
			ScalableRef: &capacitybufferv1beta1.ScalableRef{APIGroup: "example.com", Kind: "Widget", Name: "w"}, Replicas: ptr.To[int32](1),
		})

		Expect(listBuffers()).To(BeEmpty())

		for name, message := range map[string]string{
			"broken":      `reading PodTemplate missing: podtemplates "missing" not found`,
			"unsupported": `scalableRef kind Widget in group "example.com" is not supported`,
		} {
			status := bufferStatus(name)
			Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ReadyForProvisioningCondition)).To(HaveValue(SatisfyAll(
				HaveField("Status", metav1.ConditionFalse), HaveField("Message", ContainSubstring(message)))), name)
			Expect(meta.FindStatusCondition(status.Conditions, capacitybufferv1beta1.ProvisioningCondition)).To(HaveValue(
				HaveField("Reason", capacitybufferv1beta1.NotReadyForProvisioningReason)), name)
		}
	})

	It("keeps the room of a resolved buffer while the API server fails to read its PodTemplate", func() {
		Expect(k8sClient.Create(ctx, &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web"},
			Template: corev1.PodTemplateSpec{Spec: webSpec}})).To(Succeed())
		createBuffer("warm", capacitybufferv1beta1.CapacityBufferSpec{
			PodTemplateRef: &capacitybufferv1beta1.LocalObjectRef{Name: "web"}, Replicas: ptr.To[int32](2),
		})
		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(2))))
		resolvedStatus := bufferStatus("warm")

		withWatch, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
		Expect(err).NotTo(HaveOccurred())
		failing := interceptor.NewClient(withWatch, interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				if _, ok := obj.(*corev1.PodTemplate); ok {
					return apierrors.NewServiceUnavailable("etcd is down")
				}
				return c.Get(ctx, key, obj, opts...)
			},
		})
		lister.live = func(context.Context) (client.Client, error) { return failing, nil }
		clock.Step(bufferResolveInterval)

		Expect(listBuffers()).To(ConsistOf(HaveField("Replicas", int32(2))), "the room stays as last resolved")
		Expect(bufferStatus("warm")).To(Equal(resolvedStatus), "the status does not flap to not ready")
	})

	It("leaves alone a buffer of another provisioning strategy", func() {
		createBuffer("standby", capacitybufferv1beta1.CapacityBufferSpec{
			ProvisioningStrategy: ptr.To("example.com/standby-capacity"),
			PodTemplateRef:       &capacitybufferv1beta1.LocalObjectRef{Name: "missing"}, Replicas: ptr.To[int32](1),
		})

		Expect(listBuffers()).To(BeEmpty())
		Expect(bufferStatus("standby")).To(Equal(capacitybufferv1beta1.CapacityBufferStatus{}))
	})
})

// A workload role from before buffers and provisioning requests cannot list
// them: autoscaling goes on, and the ClusterAutoscaler gets Warning events
// that say why no room is kept for buffers and requests are not answered.
var _ = Describe("Capacity buffers and provisioning requests the workload role cannot read", func() {
	It("autoscales without them and says so in events", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		By("binding a ServiceAccount to the workload role without its rules for autoscaling.x-k8s.io")
		objects, err := kustomize.Build(filepath.Join("..", "..", "config", "workload-rbac"))
		Expect(err).NotTo(HaveOccurred())
		role := &rbacv1.ClusterRole{}
		for _, obj := range objects {
			if obj.GetKind() == "ClusterRole" && obj.GetName() == "capi-autoscaler-workload" {
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role)).To(Succeed())
			}
		}
		Expect(role.Rules).NotTo(BeEmpty())
		role.ObjectMeta = metav1.ObjectMeta{Name: "workload-before-buffers-" + fixture.Namespace}
		role.Rules = slices.DeleteFunc(role.Rules, func(rule rbacv1.PolicyRule) bool {
			return slices.Contains(rule.APIGroups, capacitybufferv1beta1.GroupVersion.Group)
		})
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: fixture.Namespace, Name: "before-buffers"}}
		Expect(k8sClient.Create(ctx, account)).To(Succeed())
		Expect(k8sClient.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: account.Namespace, Name: account.Name}},
		})).To(Succeed())
		kubeconfig := kubeconfigSecretFor(fixture.Cluster.Name, fixture.Namespace, "before-buffers-kubeconfig")
		kubeconfig.Data = map[string][]byte{secret.KubeconfigDataName: serviceAccountKubeconfig(client.ObjectKeyFromObject(account)).kubeconfig}
		Expect(k8sClient.Create(ctx, kubeconfig)).To(Succeed())

		key := createClusterAutoscalerWithKubeconfig(fixture, &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: "before-buffers-kubeconfig"})

		Eventually(func(g Gomega) {
			events := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, events, client.InNamespace(fixture.Namespace))).To(Succeed())
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal(autoscalingv1alpha1.CapacityBuffersUnreadableReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Name": Equal(key.Name)}),
				"Note":      ContainSubstring("listing CapacityBuffers"),
			})))
			g.Expect(events.Items).To(ContainElement(MatchFields(IgnoreExtras, Fields{
				"Type":      Equal(corev1.EventTypeWarning),
				"Reason":    Equal(autoscalingv1alpha1.ProvisioningRequestsUnreadableReason),
				"Regarding": MatchFields(IgnoreExtras, Fields{"Name": Equal(key.Name)}),
				"Note":      ContainSubstring("listing ProvisioningRequests"),
			})))
		}, time.Minute).Should(Succeed())
		// The reconcile records the events before it patches the status.
		Eventually(func(g Gomega) {
			g.Expect(conditions.Get(getClusterAutoscaler(g, key), autoscalingv1alpha1.ReadyCondition)).To(
				haveStatusAndReason(metav1.ConditionTrue, autoscalingv1alpha1.RunningReason), "autoscaling goes on")
		}, waitTimeout).Should(Succeed())
	})
})
