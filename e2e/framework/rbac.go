package framework

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	capacitybufferv1beta1 "github.com/capi-autoscaler/capi-autoscaler/api/capacitybuffer/v1beta1"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/localstack"
)

// WorkloadServiceAccount is who the autoscaler is in the workload cluster
// during the suite: the ServiceAccount config/workload-rbac binds its roles
// to.
var WorkloadServiceAccount = client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "capi-autoscaler"}

// rbacKinds are the kinds of the shipped manifests that grant the manager
// its permissions; the suite installs these and nothing else of them.
var rbacKinds = sets.New("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

// InstallManagerRBAC creates the manager's ServiceAccount and RBAC exactly
// as config/default installs them, and returns a kubeconfig with a token
// of that ServiceAccount, through the management cluster's fault proxy.
func InstallManagerRBAC(ctx context.Context, stack *localstack.Stack, repoRoot string) string {
	objects, err := kustomize.Build(filepath.Join(repoRoot, "config", "default"))
	Expect(err).NotTo(HaveOccurred())
	serviceAccount := InstallRBAC(ctx, stack.Management.Client, objects)
	grantSimulatedProviderRead(ctx, stack.Management.Client, serviceAccount)
	kubeconfig, err := stack.ServiceAccountKubeconfig(ctx, serviceAccount.Namespace, serviceAccount.Name)
	Expect(err).NotTo(HaveOccurred())
	return kubeconfig
}

// InstallRBAC creates the Namespaces, the ServiceAccount and the RBAC
// among objects (the manifests of an installation: kustomize's, a Helm
// chart's), and nothing else of them, and returns the ServiceAccount.
func InstallRBAC(ctx context.Context, c client.Client, objects []*unstructured.Unstructured) client.ObjectKey {
	GinkgoHelper()
	objects = slices.Clone(objects)
	// Namespaces first: the rest lives in them.
	slices.SortStableFunc(objects, func(a, b *unstructured.Unstructured) int {
		return cmp.Compare(kindOrder(a), kindOrder(b))
	})
	var serviceAccount client.ObjectKey
	for _, obj := range objects {
		if !rbacKinds.Has(obj.GetKind()) {
			continue
		}
		Expect(c.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
		if obj.GetKind() == "ServiceAccount" {
			Expect(serviceAccount.Name).To(BeEmpty(), "two ServiceAccounts: %s and %s", serviceAccount, obj.GetName())
			serviceAccount = client.ObjectKeyFromObject(obj)
		}
	}
	Expect(serviceAccount.Name).NotTo(BeEmpty(), "the manifests have no ServiceAccount")
	return serviceAccount
}

// grantSimulatedProviderRead lets the manager read the simulated
// provider's templates, as a user of a provider whose API group is not
// infrastructure.cluster.x-k8s.io (which the shipped role covers) must.
func grantSimulatedProviderRead(ctx context.Context, c client.Client, serviceAccount client.ObjectKey) {
	name := "capi-autoscaler-simulated-provider-reader"
	Expect(c.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{infrav1.GroupVersion.Group},
			Resources: []string{"*"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	})).To(Succeed())
	Expect(c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: serviceAccount.Namespace, Name: serviceAccount.Name}},
	})).To(Succeed())
}

func kindOrder(obj *unstructured.Unstructured) int {
	if obj.GetKind() == "Namespace" {
		return 0
	}
	return 1
}

// InstallWorkloadRBAC creates config/workload-rbac, WorkloadServiceAccount
// and its roles, in the workload cluster, as docs/howto/workload-identity.md tells users to, and
// returns a kubeconfig with a token of the ServiceAccount: what the suite's
// ClusterAutoscalers reach the workload cluster with (see
// CreateSimulatedCluster).
func InstallWorkloadRBAC(ctx context.Context, stack *localstack.Stack, repoRoot string) []byte {
	objects, err := kustomize.Build(filepath.Join(repoRoot, "config", "workload-rbac"))
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objects {
		Expect(stack.Workload.Client.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
	}
	kubeconfig, err := stack.WorkloadServiceAccountKubeconfig(ctx, WorkloadServiceAccount.Namespace, WorkloadServiceAccount.Name)
	Expect(err).NotTo(HaveOccurred())
	return kubeconfig
}

// InstallWorkloadCRDs creates config/workload-crd, the CRDs of the
// CapacityBuffer and ProvisioningRequest APIs, in the workload cluster, as
// the release's workload-components.yaml does, and waits until they are
// served.
func InstallWorkloadCRDs(ctx context.Context, stack *localstack.Stack, repoRoot string) {
	objects, err := kustomize.Build(filepath.Join(repoRoot, "config", "workload-crd"))
	Expect(err).NotTo(HaveOccurred())
	for _, obj := range objects {
		Expect(stack.Workload.Client.Create(ctx, obj)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
	}
	Eventually(func(g Gomega) {
		g.Expect(stack.Workload.Client.List(ctx, &capacitybufferv1beta1.CapacityBufferList{})).To(Succeed())
	}, time.Minute, time.Second).Should(Succeed(), "the CapacityBuffer CRD is served")
}

// ExpectNoForbiddenRequests fails when the API servers refused the
// autoscaler a request during the suite, as its shipped RBAC misses a
// permission, or when the autoscaler used a client certificate, that is the
// admin kubeconfig of a Cluster, rather than its ServiceAccount tokens. It
// writes the rules the autoscaler used to rbac-used.txt in the stack's log
// directory, to find permissions it no longer needs.
func ExpectNoForbiddenRequests(stack *localstack.Stack) {
	GinkgoHelper()
	report := &strings.Builder{}
	forbidden := map[string][]string{}
	withCertificates := map[string][]string{}
	for _, cluster := range clustersOf(stack) {
		stats := cluster.Proxy.Stats()
		report.WriteString("# " + cluster.Name + "\n")
		for _, rule := range sets.List(stats.Used) {
			report.WriteString(rule + "\n")
		}
		if stats.Forbidden.Len() > 0 {
			forbidden[cluster.Name] = sets.List(stats.Forbidden)
		}
		if stats.CertificateRequests.Len() > 0 {
			withCertificates[cluster.Name] = sets.List(stats.CertificateRequests)
		}
	}
	Expect(os.WriteFile(filepath.Join(stack.LogDir(), "rbac-used.txt"), []byte(report.String()), 0o600)).To(Succeed())
	Expect(forbidden).To(BeEmpty(), "the API servers refused the autoscaler these requests: its RBAC misses them")
	Expect(withCertificates).To(BeEmpty(), "the autoscaler made these requests with a Cluster's admin kubeconfig, not with the workload kubeconfig its ClusterAutoscaler names")
}

// clustersOf are the stack's distinct API servers.
func clustersOf(stack *localstack.Stack) []*localstack.Cluster {
	return slices.Compact([]*localstack.Cluster{stack.Management, stack.Workload})
}
