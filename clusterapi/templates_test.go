package clusterapi

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// shippedManagerRole holds the manager's ClusterRoles as `make manifests`
// writes them.
const shippedManagerRole = "../config/rbac/role.yaml"

// The ClusterRoles of shippedManagerRole: the one bound everywhere, and the
// one a narrower install binds only in the namespaces it autoscales.
const (
	shippedManagerRoleName   = "manager-role"
	shippedNamespaceRoleName = "manager-namespace-role"
)

var _ = Describe("A node group whose infrastructure template the manager cannot list", func() {
	const templateReadTimeout = 2 * time.Second

	var (
		ctx context.Context
		f   *envtest.Fixture
	)

	BeforeEach(func() {
		ctx = testContext()
		f = envtest.NewFixture(ctx, k8sClient)
	})

	// infrastructureTemplate creates a machine template of the kind that
	// publishes the capacity of a 2-cpu machine, as a provider would.
	infrastructureTemplate := func(kind schema.GroupVersionKind, name string) {
		GinkgoHelper()
		infra := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
			"capacity": map[string]any{"cpu": "2", "memory": "4Gi"},
		}}}
		infra.SetGroupVersionKind(kind)
		infra.SetNamespace(f.Namespace)
		infra.SetName(name)
		Expect(k8sClient.Create(ctx, infra)).To(Succeed())
	}

	It("costs that group only its scale from zero, within the bound and once per retry, while another group scales up in the same loop", func() {
		By("connecting as the manager with the shipped RBAC, plus the reads the README asks for one provider's group and not the other's")
		management, templateReads := managerClient(ctx, f.Namespace)

		By("creating a group of each provider at zero, and a pod either could take")
		healthy := f.MachineDeployment("healthy", 0, sizeAnnotations(0, 3))
		unlisted := f.MachineDeployment("unlisted", 0, sizeAnnotations(0, 3))
		unlisted.Spec.Template.Spec.InfrastructureRef.APIGroup = envtest.OtherProviderMachineTemplate.Group
		unlisted.Spec.Template.Spec.InfrastructureRef.Kind = envtest.OtherProviderMachineTemplate.Kind
		f.Create(ctx, healthy, unlisted)
		infrastructureTemplate(envtest.InfrastructureMachineTemplate, healthy.Name)
		infrastructureTemplate(envtest.OtherProviderMachineTemplate, unlisted.Name)
		unschedulablePod(ctx, f.Namespace)

		clk := clocktesting.NewFakeClock(time.Now())
		recorder := &fakeRecorder{}
		clientset, err := kubernetes.NewForConfig(testEnv.Config)
		Expect(err).NotTo(HaveOccurred())
		settings, err := autoscaler.NewSettings(autoscaler.DefaultConfig(), clk)
		Expect(err).NotTo(HaveOccurred())
		engine, err := autoscaler.New(autoscaler.Options{
			ClusterName: f.Namespace + "/" + f.Cluster.Name,
			Settings:    settings,
			NodeGroups: NewProvider(Options{
				Management:          management,
				Workload:            k8sClient,
				Cluster:             types.NamespacedName{Namespace: f.Namespace, Name: f.Cluster.Name},
				Clock:               clk,
				TemplateReadTimeout: templateReadTimeout,
				Owner:               ownUID,
			}),
			Owner:         ownership.Owner{UID: ownUID},
			Cluster:       k8sClient,
			Clientset:     clientset,
			Recorder:      record.NewFakeRecorder(100),
			GroupRecorder: recorder,
			LoopTimeout:   30 * time.Second,
		})
		Expect(err).NotTo(HaveOccurred())
		unlistedID := scalable.ID(scalable.KindMachineDeployment, f.Namespace, unlisted.Name)
		problem := And(
			ContainSubstring("cannot scale up from zero"),
			ContainSubstring("OtherMachineTemplate "+f.Namespace+"/"+unlisted.Name),
			ContainSubstring("timed out after "+templateReadTimeout.String()),
			ContainSubstring("does the manager have RBAC to list and watch it?"),
		)
		templateUnreadableEvents := func() []recordedEvent {
			var events []recordedEvent
			for _, event := range recorder.events {
				if event.Reason == nodegroups.ReasonTemplateUnreadable {
					events = append(events, event)
				}
			}
			return events
		}

		status := engine.RunOnce(ctx, time.Now())

		Expect(status.Err).NotTo(HaveOccurred(), "the loop ends within the template's bound, not at the loop timeout")
		Expect(get(ctx, healthy).Spec.Replicas).To(HaveValue(BeEquivalentTo(1)), "the healthy group scales up in the same loop")
		Expect(get(ctx, unlisted).Spec.Replicas).To(HaveValue(BeEquivalentTo(0)))
		Expect(row(status, unlistedID).Problem).To(problem)
		Expect(templateUnreadableEvents()).To(ConsistOf(And(
			HaveField("GroupID", unlistedID), HaveField("Type", corev1.EventTypeWarning), HaveField("Message", problem))))
		Expect(templateReads()).To(Equal(1))

		By("not reading the kind again until the retry, with the same problem and no new event")
		status = engine.RunOnce(ctx, time.Now())
		Expect(status.Err).NotTo(HaveOccurred())
		Expect(row(status, unlistedID).Problem).To(problem)
		Expect(templateUnreadableEvents()).To(HaveLen(1))
		Expect(templateReads()).To(Equal(1), "a remembered kind fails at once")

		By("reading it again once the retry is due")
		clk.Step(unansweredKindRetry)
		status = engine.RunOnce(ctx, time.Now())
		Expect(status.Err).NotTo(HaveOccurred())
		Expect(row(status, unlistedID).Problem).To(problem)
		Expect(templateReads()).To(Equal(2))
	})
})

// managerClient returns a client of the management cluster that reads
// through a cache, as the manager's does (internal/manager), as a user with the
// shipped manager role and the reads of envtest.InfrastructureMachineTemplate's
// group, which the README asks to add for a provider outside
// infrastructure.cluster.x-k8s.io; and a counter of its reads of
// envtest.OtherProviderMachineTemplate, whose group it cannot read.
func managerClient(ctx context.Context, namespace string) (client.Client, func() int) {
	GinkgoHelper()
	user := "manager-" + namespace
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}
	// The manager role everywhere, the namespace role in the Cluster's
	// namespace alone, as a narrower install binds them.
	roles := shippedRoles()
	role, namespaceRole := roles[shippedManagerRoleName], roles[shippedNamespaceRoleName]
	Expect(role).NotTo(BeNil())
	Expect(namespaceRole).NotTo(BeNil())
	role.Name, namespaceRole.Name = user, user+"-namespace"
	role.Rules = append(role.Rules, rbacv1.PolicyRule{
		APIGroups: []string{envtest.InfrastructureMachineTemplate.Group}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"},
	})
	objects := []client.Object{role, namespaceRole,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   subjects,
		},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: namespaceRole.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespaceRole.Name},
			Subjects:   subjects,
		},
	}
	for _, obj := range objects {
		Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	}
	DeferCleanup(func(ctx context.Context) {
		for _, obj := range objects {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj))).To(Succeed())
		}
	})
	config, err := testEnv.AddUser(user)
	Expect(err).NotTo(HaveOccurred())
	waitForRBAC(ctx, config)

	informers, err := cache.New(config, cache.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	cacheCtx, stop := context.WithCancel(ctx)
	DeferCleanup(stop)
	go func() {
		defer GinkgoRecover()
		Expect(informers.Start(cacheCtx)).To(Succeed())
	}()
	cached, err := client.NewWithWatch(config, client.Options{Scheme: testEnv.Scheme, Cache: &client.CacheOptions{
		Reader: informers, DisableFor: []client.Object{&corev1.Secret{}}, Unstructured: true,
	}})
	Expect(err).NotTo(HaveOccurred())
	reads := 0
	counting := interceptor.NewClient(cached, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if obj.GetObjectKind().GroupVersionKind().GroupKind() == envtest.OtherProviderMachineTemplate.GroupKind() {
				reads++
			}
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return counting, func() int { return reads }
}

// shippedRoles reads the manager's ClusterRoles from config/rbac, by name.
func shippedRoles() map[string]*rbacv1.ClusterRole {
	GinkgoHelper()
	content, err := os.Open(shippedManagerRole)
	Expect(err).NotTo(HaveOccurred())
	defer content.Close()
	roles := map[string]*rbacv1.ClusterRole{}
	decoder := utilyaml.NewYAMLOrJSONDecoder(content, 4096)
	for {
		role := &rbacv1.ClusterRole{}
		err := decoder.Decode(role)
		if errors.Is(err, io.EOF) {
			return roles
		}
		Expect(err).NotTo(HaveOccurred())
		roles[role.Name] = role
	}
}

// waitForRBAC waits until the API server lets the user of config list
// MachineDeployments and InfrastructureMachineTemplates: a binding takes a
// moment to apply, and an informer refused meanwhile backs off.
func waitForRBAC(ctx context.Context, config *rest.Config) {
	GinkgoHelper()
	direct, err := client.New(config, client.Options{Scheme: testEnv.Scheme})
	Expect(err).NotTo(HaveOccurred())
	templates := &unstructured.UnstructuredList{}
	templates.SetGroupVersionKind(envtest.InfrastructureMachineTemplate.GroupVersion().WithKind(envtest.InfrastructureMachineTemplate.Kind + "List"))
	Eventually(func(g Gomega) {
		g.Expect(direct.List(ctx, &clusterv1.MachineDeploymentList{})).To(Succeed())
		g.Expect(direct.List(ctx, templates)).To(Succeed())
	}).Should(Succeed())
}

// unschedulablePod creates a pod of 1 cpu that the scheduler found no node
// for.
func unschedulablePod(ctx context.Context, namespace string) {
	GinkgoHelper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "pending"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:      "app",
			Image:     "registry.example.com/app:v1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}},
	}
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
}

// get reads obj again.
func get[T client.Object](ctx context.Context, obj T) T {
	GinkgoHelper()
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	return obj
}

// row is the status row of the node group id.
func row(status autoscaler.Status, id string) autoscaler.NodeGroupStatus {
	GinkgoHelper()
	for _, group := range status.NodeGroups {
		if group.ID == id {
			return group
		}
	}
	Fail("no status row for " + id)
	return autoscaler.NodeGroupStatus{}
}
