package main

import (
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/helmchart"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
)

// grant is a role an install binds to the manager's ServiceAccount.
type grant struct {
	// Binding is the binding's kind and name, Role the role's name.
	Binding, Role string
	// Namespace is where the rules hold; empty for every namespace.
	Namespace string
	Rules     []rbacv1.PolicyRule
}

// grantsToManager resolves the bindings among objects that name the
// manager's ServiceAccount (the only one of an install) to their roles.
func grantsToManager(g Gomega, objects []*unstructured.Unstructured) []grant {
	var serviceAccount *unstructured.Unstructured
	roles := map[string]*unstructured.Unstructured{}
	for _, obj := range objects {
		switch obj.GetKind() {
		case "ServiceAccount":
			g.Expect(serviceAccount).To(BeNil(), "two ServiceAccounts")
			serviceAccount = obj
		case "ClusterRole", "Role":
			roles[obj.GetKind()+" "+obj.GetNamespace()+"/"+obj.GetName()] = obj
		}
	}
	g.Expect(serviceAccount).NotTo(BeNil())
	var grants []grant
	for _, obj := range objects {
		if obj.GetKind() != "ClusterRoleBinding" && obj.GetKind() != "RoleBinding" {
			continue
		}
		var binding rbacv1.RoleBinding
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &binding)).To(Succeed())
		if !slices.ContainsFunc(binding.Subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == serviceAccount.GetName() && s.Namespace == serviceAccount.GetNamespace()
		}) {
			continue
		}
		roleNamespace := ""
		if binding.RoleRef.Kind == "Role" {
			roleNamespace = binding.Namespace
		}
		role := roles[binding.RoleRef.Kind+" "+roleNamespace+"/"+binding.RoleRef.Name]
		g.Expect(role).NotTo(BeNil(), "%s %s binds %s %s, which the install lacks", obj.GetKind(), obj.GetName(), binding.RoleRef.Kind, binding.RoleRef.Name)
		grants = append(grants, grant{
			Binding: obj.GetKind() + " " + obj.GetName(), Role: role.GetName(),
			Namespace: binding.Namespace, Rules: rulesOf(g, role),
		})
	}
	return grants
}

// everywhere are the grants that hold in every namespace.
func everywhere(grants []grant) []grant {
	return slices.DeleteFunc(slices.Clone(grants), func(gr grant) bool { return gr.Namespace != "" })
}

// readVerbs are what the manager's caches need: whatever holds cluster-wide
// beyond them must be for a reason (see narrowable).
var readVerbs = sets.New("get", "list", "watch")

// actsInNamespace says whether rule grants what the manager needs only in
// the namespaces it autoscales: Secrets, ConfigMaps or Leases at all, or
// any write but those of its ClusterAutoscalers (finalizer, status) and
// events (one resource, served by the core and the events.k8s.io APIs),
// which it needs wherever a ClusterAutoscaler is, to say why it cannot act
// there.
func actsInNamespace(rule rbacv1.PolicyRule) bool {
	for _, group := range rule.APIGroups {
		for _, resource := range rule.Resources {
			switch group + "/" + resource {
			case "/secrets", "/configmaps", "coordination.k8s.io/leases":
				return true
			case "autoscaling.cluster.x-k8s.io/clusterautoscalers", "autoscaling.cluster.x-k8s.io/clusterautoscalers/status",
				"/events", "events.k8s.io/events", "authentication.k8s.io/tokenreviews", "authorization.k8s.io/subjectaccessreviews":
				continue
			}
			if !readVerbs.HasAll(rule.Verbs...) {
				return true
			}
		}
	}
	return false
}

// expectNarrowable checks an install that serves every namespace: the
// manager's rights to act in a namespace (Secrets, ConfigMaps, Leases,
// writes to Cluster API objects) all come from the namespace role, so that
// binding it in some namespaces alone leaves none of them elsewhere; what
// holds everywhere otherwise is reads and the manager's own objects.
func expectNarrowable(g Gomega, grants []grant, prefix string) {
	namespaceRole := prefix + namespaceRole
	var namespaceGrants []grant
	for _, gr := range everywhere(grants) {
		if gr.Role == namespaceRole {
			continue
		}
		for _, rule := range gr.Rules {
			g.Expect(actsInNamespace(rule)).To(BeFalse(), "%s grants %s in every namespace: only %s may, so that a narrower install can bind it per namespace",
				gr.Binding, rule.String(), namespaceRole)
		}
	}
	for _, gr := range grants {
		if gr.Role == namespaceRole {
			namespaceGrants = append(namespaceGrants, gr)
		}
	}
	g.Expect(namespaceGrants).NotTo(BeEmpty(), "no binding of %s", namespaceRole)
	g.Expect(namespaceGrants[0].Rules).To(ContainElement(And(
		HaveField("Resources", ConsistOf("secrets")), HaveField("Verbs", ConsistOf("get")))), "%s grants the kubeconfig Secrets", namespaceRole)
}

// The manager's permissions in the management cluster: an install that
// serves every namespace grants its Cluster API reads everywhere, and what
// it needs to act on the Clusters of a namespace (kubeconfig Secrets, the
// explanation ConfigMaps, Leases, /scale and Machine writes) through one
// role whose binding an operator can replace by RoleBindings (config/,
// clusterctl's components, the chart's default) or the chart's
// rbac.namespaces replaces; a namespace-scoped release grants nothing of a
// namespace outside its own.
func TestManagerPermissionsAreNarrowable(t *testing.T) {
	const prefix = "capi-autoscaler-"
	for _, dir := range []string{releaseBase, releaseDir} {
		t.Run(dir, func(t *testing.T) {
			g := NewWithT(t)
			objects, err := kustomize.Build(filepath.Join(repoRoot, dir))
			g.Expect(err).NotTo(HaveOccurred())
			grants := grantsToManager(g, objects)
			expectNarrowable(g, grants, prefix)
			// The one binding an operator replaces for a narrower install.
			g.Expect(grants).To(ContainElement(And(
				HaveField("Binding", "ClusterRoleBinding "+prefix+"manager-namespace-rolebinding"),
				HaveField("Role", prefix+namespaceRole))))
			var managerRules []rbacv1.PolicyRule
			for _, gr := range grants {
				if gr.Role == prefix+managerRole {
					managerRules = gr.Rules
				}
			}
			g.Expect(managerRules).To(ContainElement(HaveField("Resources", ContainElement("machinedeployments"))))
			for _, rule := range managerRules {
				g.Expect(rule.Resources).NotTo(ContainElements("secrets"), "%s grants Secrets in every namespace", managerRole)
				g.Expect(rule.Resources).NotTo(ContainElements("configmaps"), "%s grants ConfigMaps in every namespace", managerRole)
			}
		})
	}

	t.Run("chart, every namespace", func(t *testing.T) {
		g := NewWithT(t)
		expectNarrowable(g, grantsToManager(g, render(t, defaultRelease, "").Objects), prefix)
	})

	t.Run("chart, rbac.namespaces", func(t *testing.T) {
		g := NewWithT(t)
		grants := grantsToManager(g, render(t, defaultRelease, "rbac: {namespaces: [clusters-a, clusters-b]}").Objects)
		expectNarrowable(g, grants, prefix)
		for _, gr := range everywhere(grants) {
			g.Expect(gr.Role).NotTo(Equal(prefix+namespaceRole), "%s grants it in every namespace", gr.Binding)
		}
		var namespaces []string
		for _, gr := range grants {
			if gr.Role == prefix+namespaceRole {
				g.Expect(gr.Binding).To(Equal("RoleBinding " + prefix + "manager-namespace-rolebinding"))
				namespaces = append(namespaces, gr.Namespace)
			}
		}
		g.Expect(namespaces).To(ConsistOf("clusters-a", "clusters-b"))
	})

	t.Run("chart, watchNamespace", func(t *testing.T) {
		g := NewWithT(t)
		grants := grantsToManager(g, render(t, namespaceScopedRelease, namespaceScoped).Objects)
		secrets := false
		for _, gr := range grants {
			for _, rule := range gr.Rules {
				for _, group := range rule.APIGroups {
					for _, resource := range rule.Resources {
						if gr.Namespace == "" {
							g.Expect(clusterScoped.Has(group+"/"+resource)).To(BeTrue(),
								"%s grants %s/%s in every namespace: a namespace-scoped release grants namespaced resources in its namespaces alone", gr.Binding, group, resource)
						}
						secrets = secrets || resource == "secrets"
					}
				}
			}
			if gr.Namespace != "" {
				g.Expect(gr.Namespace).To(BeElementOf("tenant-a", namespaceScopedRelease.Namespace), gr.Binding)
			}
		}
		g.Expect(secrets).To(BeTrue(), "the kubeconfig Secrets of tenant-a")

		values, err := helmchart.ParseValues(namespaceScoped)
		g.Expect(err).NotTo(HaveOccurred())
		values["rbac"].(map[string]any)["namespaces"] = []any{"clusters-a"}
		_, err = helmchart.Render(filepath.Join(repoRoot, helmchart.Dir), namespaceScopedRelease, helmchart.Options{Values: values})
		g.Expect(err).To(MatchError(ContainSubstring("rbac.namespaces is for a release that serves every namespace")))
	})
}
