package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/helmchart"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/kustomize"
)

// defaultRelease installs the names and namespace of the release manifests.
var defaultRelease = helmchart.Release{Name: "capi-autoscaler", Namespace: "capi-autoscaler-system"}

// namespaceScoped are non-default values: a manager serving one namespace
// of ClusterAutoscalers with a watch filter, in a release of another name,
// with monitoring and without the CRD.
const namespaceScoped = `
watchNamespace: tenant-a
watchFilter: team-a
extraArgs: [--workload-client-qps=40, --sync-period=5m]
logVerbosity: 4
goMemoryLimitPercent: 80
replicaCount: 2
image: {repository: registry.example.com/capi-autoscaler, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: pull}]
resources: {requests: {cpu: 200m, memory: 512Mi}, limits: {memory: 2Gi}}
nodeSelector: {node-role.kubernetes.io/control-plane: ""}
tolerations: [{key: node-role.kubernetes.io/control-plane, effect: NoSchedule}]
affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app.kubernetes.io/instance: tenant-a}}}}]}}
priorityClassName: system-cluster-critical
podAnnotations: {example.com/team: a}
podLabels: {example.com/tier: control}
rbac:
  extraRules:
  - apiGroups: [infrastructure.example.com]
    resources: ["*"]
    verbs: [get, list, watch]
crds: {install: false}
serviceMonitor: {enabled: true, labels: {release: prometheus}}
prometheusRule: {enabled: true, labels: {release: prometheus}}
grafanaDashboard: {enabled: true, labels: {dashboards: capi}, namespace: grafana}
`

var namespaceScopedRelease = helmchart.Release{Name: "tenant-a", Namespace: "tenant-a-system"}

// chartLabels are the labels the chart gives in place of config/'s
// (cluster.x-k8s.io/provider and the app.kubernetes.io labels).
var chartLabels = []string{
	"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/part-of",
	"app.kubernetes.io/version", "app.kubernetes.io/managed-by", "cluster.x-k8s.io/provider",
}

// render renders the chart of the repository with values written as a
// values file, failing on a template that reads a value values.yaml does
// not have.
func render(t *testing.T, release helmchart.Release, values string) *helmchart.Rendered {
	t.Helper()
	parsed, err := helmchart.ParseValues(values)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := helmchart.Render(filepath.Join(repoRoot, helmchart.Dir), release, helmchart.Options{Values: parsed, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	return rendered
}

// chartValues are the chart's values.yaml and Chart.yaml.
func chartValues(t *testing.T) (values map[string]any, appVersion string) {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(repoRoot, helmchart.Dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if values, err = helmchart.ParseValues(string(content)); err != nil {
		t.Fatal(err)
	}
	content, err = os.ReadFile(filepath.Join(repoRoot, helmchart.Dir, chartFile))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(content, &chart); err != nil {
		t.Fatal(err)
	}
	return values, chart.AppVersion
}

func manager(g Gomega, rendered *helmchart.Rendered, name string) (*appsv1.Deployment, corev1.Container) {
	obj := rendered.Find("Deployment", name)
	g.Expect(obj).NotTo(BeNil(), "no Deployment %s", name)
	deployment := &appsv1.Deployment{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, deployment)).To(Succeed())
	for _, container := range deployment.Spec.Template.Spec.Containers {
		if container.Name == managerContainer {
			return deployment, container
		}
	}
	g.Expect(deployment.Spec.Template.Spec.Containers).To(ContainElement(HaveField("Name", managerContainer)))
	return nil, corev1.Container{}
}

func managerArgs(g Gomega, rendered *helmchart.Rendered) []string {
	for _, obj := range rendered.Objects {
		if obj.GetKind() == "Deployment" {
			_, container := manager(g, rendered, obj.GetName())
			return container.Args
		}
	}
	g.Expect(rendered.Objects).To(ContainElement(HaveField("Object", HaveKeyWithValue("kind", "Deployment"))))
	return nil
}

func rulesOf(g Gomega, role *unstructured.Unstructured) []rbacv1.PolicyRule {
	var typed rbacv1.Role
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(role.Object, &typed)).To(Succeed())
	return typed.Rules
}

func ruleResources(g Gomega, role *unstructured.Unstructured) []string {
	var resources []string
	for _, rule := range rulesOf(g, role) {
		resources = append(resources, rule.Resources...)
	}
	return resources
}

// clusterctlDefault is a clusterctl variable with its default.
var clusterctlDefault = regexp.MustCompile(`\$\{[A-Z0-9_]+:=([^}]*)\}`)

// withDefaults replaces the clusterctl variables of obj with their
// defaults, and the release's image with the chart's default.
func withDefaults(obj *unstructured.Unstructured, image, version string) *unstructured.Unstructured {
	var walk func(value any) any
	walk = func(value any) any {
		switch v := value.(type) {
		case string:
			v = clusterctlDefault.ReplaceAllString(v, "$1")
			return strings.NewReplacer("RELEASE_IMAGE", image, "RELEASE_VERSION", version).Replace(v)
		case map[string]any:
			for key, item := range v {
				v[key] = walk(item)
			}
		case []any:
			for i, item := range v {
				v[i] = walk(item)
			}
		}
		return value
	}
	walk(obj.Object)
	return obj
}

// comparable is obj without the labels the chart replaces, in its JSON
// form.
func comparable(t *testing.T, obj *unstructured.Unstructured) map[string]any {
	t.Helper()
	content, err := json.Marshal(obj.Object)
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]any{}
	if err := json.Unmarshal(content, &fields); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{
		{"metadata", "labels"}, {"spec", "selector", "matchLabels"}, {"spec", "template", "metadata", "labels"}, {"spec", "selector"},
	} {
		labels, _, _ := unstructured.NestedFieldNoCopy(fields, path...)
		if labels, ok := labels.(map[string]any); ok {
			for _, label := range chartLabels {
				delete(labels, label)
			}
		}
	}
	return fields
}

func key(obj *unstructured.Unstructured) string {
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}

// expectSameObjects compares the chart's objects with kustomize's.
func expectSameObjects(t *testing.T, chart, kustomized []*unstructured.Unstructured) {
	t.Helper()
	want, got := map[string]map[string]any{}, map[string]map[string]any{}
	for _, obj := range kustomized {
		want[key(obj)] = comparable(t, obj)
	}
	for _, obj := range chart {
		got[key(obj)] = comparable(t, obj)
	}
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("the chart installs other objects than kustomize builds (-kustomize +chart):\n%s", diff)
	}
	for name, obj := range want {
		if diff := cmp.Diff(obj, got[name]); diff != "" && got[name] != nil {
			t.Errorf("%s differs (-kustomize +chart):\n%s", name, diff)
		}
	}
}

// With its default values, named capi-autoscaler in capi-autoscaler-system,
// the chart installs what config/release installs with clusterctl's
// defaults: the same objects, names and fields, every argument of the
// manager included; the chart's labels replace config/'s, and it adds
// only the image's pull policy, the Lease's name (the flag's default) and
// the resource policy that keeps the CRD.
func TestDefaultValuesInstallTheReleaseManifests(t *testing.T) {
	g := NewWithT(t)
	values, appVersion := chartValues(t)
	rendered := render(t, defaultRelease, "")
	release, err := kustomize.Build(filepath.Join(repoRoot, releaseDir))
	g.Expect(err).NotTo(HaveOccurred())

	var want []*unstructured.Unstructured
	for _, obj := range release {
		if obj.GetKind() == "Namespace" {
			// `helm install --namespace capi-autoscaler-system --create-namespace`
			g.Expect(obj.GetName()).To(Equal(defaultRelease.Namespace))
			continue
		}
		want = append(want, withDefaults(obj, values["image"].(map[string]any)["repository"].(string), appVersion))
	}

	deployment := rendered.Find("Deployment", "capi-autoscaler-controller-manager")
	g.Expect(deployment).NotTo(BeNil())
	containers, _, _ := unstructured.NestedSlice(deployment.Object, "spec", "template", "spec", "containers")
	container := containers[0].(map[string]any)
	g.Expect(container).To(HaveKeyWithValue("imagePullPolicy", "IfNotPresent"))
	delete(container, "imagePullPolicy")
	args := container["args"].([]any)
	g.Expect(args).To(ContainElement("--leader-election-id=capi-autoscaler-leader"), "the flag's default, the Lease of the release manifests")
	container["args"] = slices.DeleteFunc(args, func(arg any) bool { return arg == "--leader-election-id=capi-autoscaler-leader" })
	g.Expect(unstructured.SetNestedSlice(deployment.Object, containers, "spec", "template", "spec", "containers")).To(Succeed())
	crd := rendered.Find("CustomResourceDefinition", "clusterautoscalers.autoscaling.cluster.x-k8s.io")
	g.Expect(crd).NotTo(BeNil())
	g.Expect(crd.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
	annotations := crd.GetAnnotations()
	delete(annotations, "helm.sh/resource-policy")
	crd.SetAnnotations(annotations)

	expectSameObjects(t, rendered.Objects, want)
	for _, obj := range rendered.Objects {
		g.Expect(obj.GetLabels()).To(And(
			HaveKeyWithValue("app.kubernetes.io/instance", defaultRelease.Name),
			HaveKeyWithValue("app.kubernetes.io/managed-by", "Helm"),
			HaveKeyWithValue("app.kubernetes.io/part-of", "capi-autoscaler"),
			Not(HaveKey("cluster.x-k8s.io/provider")),
		), key(obj))
	}
}

// The monitoring values install config/monitoring-release: the Service and
// ServiceMonitor select this release's manager.
func TestMonitoringValuesInstallTheMonitoringManifests(t *testing.T) {
	g := NewWithT(t)
	rendered := render(t, defaultRelease, "{serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}, grafanaDashboard: {enabled: true}}")
	defaults := render(t, defaultRelease, "")
	monitoring, err := kustomize.Build(filepath.Join(repoRoot, monitoringDir))
	g.Expect(err).NotTo(HaveOccurred())
	added := slices.DeleteFunc(slices.Clone(rendered.Objects), func(obj *unstructured.Unstructured) bool {
		return defaults.Find(obj.GetKind(), obj.GetName()) != nil
	})
	expectSameObjects(t, added, monitoring)

	deployment, _ := manager(g, rendered, "capi-autoscaler-controller-manager")
	service := rendered.Find("Service", "capi-autoscaler-controller-manager-metrics")
	g.Expect(service).NotTo(BeNil())
	selector, _, _ := unstructured.NestedStringMap(service.Object, "spec", "selector")
	g.Expect(selector).To(HaveKeyWithValue("app.kubernetes.io/instance", defaultRelease.Name))
	for label, value := range selector {
		g.Expect(deployment.Spec.Template.Labels).To(HaveKeyWithValue(label, value), "the Service selects the manager's pods")
	}
	monitor := rendered.Find("ServiceMonitor", "capi-autoscaler-controller-manager-metrics")
	g.Expect(monitor).NotTo(BeNil())
	matchLabels, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
	for label, value := range matchLabels {
		g.Expect(service.GetLabels()).To(HaveKeyWithValue(label, value), "the ServiceMonitor selects the Service")
	}

	metricsOnly := render(t, defaultRelease, "{metricsService: {enabled: true}}")
	g.Expect(metricsOnly.Find("Service", "capi-autoscaler-controller-manager-metrics")).NotTo(BeNil())
	g.Expect(metricsOnly.Objects).To(HaveLen(len(defaults.Objects) + 1))
}

// The values reach the manager's Deployment and RBAC: in namespace-scoped
// mode its permissions are a Role and RoleBinding in the watched
// namespace, but for the cluster-scoped reads.
func TestNamespaceScopedValues(t *testing.T) {
	g := NewWithT(t)
	rendered := render(t, namespaceScopedRelease, namespaceScoped)
	const prefix = "tenant-a-capi-autoscaler-"

	for _, obj := range rendered.Objects {
		g.Expect(obj.GetName()).To(HavePrefix(prefix), key(obj))
		g.Expect(obj.GetKind()).NotTo(Equal("CustomResourceDefinition"), "crds.install is false")
	}
	deployment, container := manager(g, rendered, prefix+"controller-manager")
	g.Expect(deployment.Namespace).To(Equal(namespaceScopedRelease.Namespace))
	g.Expect(container.Args).To(Equal([]string{
		"--leader-elect",
		"--leader-election-id=" + prefix + "leader",
		"--leader-election-namespace=$(POD_NAMESPACE)",
		"--diagnostics-address=:8443",
		"--health-probe-bind-address=:8081",
		"--v=4",
		"--go-memory-limit-percent=80",
		"--namespace=tenant-a",
		"--watch-filter=team-a",
		"--workload-client-qps=40",
		"--sync-period=5m",
	}))
	g.Expect(container.Image).To(Equal("registry.example.com/capi-autoscaler:v9.9.9"))
	g.Expect(container.ImagePullPolicy).To(Equal(corev1.PullAlways))
	g.Expect(container.Resources.Requests.Cpu().String()).To(Equal("200m"))
	g.Expect(container.Resources.Limits.Memory().String()).To(Equal("2Gi"))
	pod := deployment.Spec.Template
	g.Expect(*deployment.Spec.Replicas).To(BeEquivalentTo(2))
	g.Expect(pod.Spec.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "pull"}}))
	g.Expect(pod.Spec.NodeSelector).To(HaveKey("node-role.kubernetes.io/control-plane"))
	g.Expect(pod.Spec.Tolerations).To(HaveLen(1))
	g.Expect(pod.Spec.Affinity.PodAntiAffinity).NotTo(BeNil())
	g.Expect(pod.Spec.PriorityClassName).To(Equal("system-cluster-critical"))
	g.Expect(pod.Spec.ServiceAccountName).To(Equal(prefix + "controller-manager"))
	g.Expect(pod.Annotations).To(And(HaveKeyWithValue("example.com/team", "a"), HaveKeyWithValue("cluster-autoscaler.kubernetes.io/safe-to-evict", "false")))
	g.Expect(pod.Labels).To(And(HaveKeyWithValue("example.com/tier", "control"), HaveKeyWithValue("control-plane", "controller-manager")))
	for label, value := range deployment.Spec.Selector.MatchLabels {
		g.Expect(pod.Labels).To(HaveKeyWithValue(label, value))
	}

	role := rendered.Find("Role", prefix+"manager-role")
	g.Expect(role).NotTo(BeNil())
	g.Expect(role.GetNamespace()).To(Equal("tenant-a"))
	g.Expect(ruleResources(g, role)).To(And(ContainElements("clusterautoscalers", "machines"), Not(ContainElement("customresourcedefinitions"))))
	g.Expect(rulesOf(g, role)).To(ContainElement(HaveField("APIGroups", ConsistOf("infrastructure.example.com"))), "rbac.extraRules")
	namespaceRole := rendered.Find("Role", prefix+"manager-namespace-role")
	g.Expect(namespaceRole).NotTo(BeNil())
	g.Expect(namespaceRole.GetNamespace()).To(Equal("tenant-a"))
	g.Expect(ruleResources(g, namespaceRole)).To(ContainElements("secrets", "configmaps", "leases", "machinedeployments/scale"))
	g.Expect(rendered.Find("ClusterRole", prefix+"manager-namespace-role")).To(BeNil(), "it has no cluster-scoped rules")
	namespaceBinding := rendered.Find("RoleBinding", prefix+"manager-namespace-rolebinding")
	g.Expect(namespaceBinding).NotTo(BeNil())
	g.Expect(namespaceBinding.GetNamespace()).To(Equal("tenant-a"))
	g.Expect(rendered.Find("ClusterRoleBinding", prefix+"manager-namespace-rolebinding")).To(BeNil())
	clusterRole := rendered.Find("ClusterRole", prefix+"manager-role")
	g.Expect(clusterRole).NotTo(BeNil())
	g.Expect(ruleResources(g, clusterRole)).To(ConsistOf("customresourcedefinitions"))
	binding := rendered.Find("RoleBinding", prefix+"manager-rolebinding")
	g.Expect(binding).NotTo(BeNil())
	g.Expect(binding.GetNamespace()).To(Equal("tenant-a"))
	g.Expect(binding.Object).To(HaveKeyWithValue("roleRef", HaveKeyWithValue("kind", "Role")))
	g.Expect(binding.Object).To(HaveKeyWithValue("subjects", ConsistOf(And(
		HaveKeyWithValue("name", prefix+"controller-manager"), HaveKeyWithValue("namespace", namespaceScopedRelease.Namespace)))))
	clusterBinding := rendered.Find("ClusterRoleBinding", prefix+"manager-rolebinding")
	g.Expect(clusterBinding).NotTo(BeNil())
	g.Expect(clusterBinding.Object).To(HaveKeyWithValue("roleRef", HaveKeyWithValue("kind", "ClusterRole")))
	g.Expect(rendered.Find("Role", prefix+"leader-election-role").GetNamespace()).To(Equal(namespaceScopedRelease.Namespace))

	g.Expect(rendered.Find("ServiceMonitor", prefix+"controller-manager-metrics").GetLabels()).To(HaveKeyWithValue("release", "prometheus"))
	g.Expect(rendered.Find("PrometheusRule", prefix+"alerts").GetLabels()).To(HaveKeyWithValue("release", "prometheus"))
	dashboard := rendered.Find("ConfigMap", prefix+"dashboard")
	g.Expect(dashboard.GetNamespace()).To(Equal("grafana"))
	g.Expect(dashboard.GetLabels()).To(And(HaveKeyWithValue("dashboards", "capi"), HaveKeyWithValue("grafana_dashboard", "1")))
	g.Expect(rendered.Notes).To(ContainSubstring("namespace tenant-a only"))

	spread := managerArgs(g, render(t, namespaceScopedRelease, "leaderElection: {spreadClusters: true}"))
	g.Expect(spread).To(ContainElement("--spread-clusters"), "every replica autoscales its share")
	g.Expect(spread).NotTo(ContainElement("--leader-elect"), "the manager refuses both")
	g.Expect(spread).To(ContainElement("--leader-election-id="+prefix+"leader"), "the replicas of the release share the Clusters")

	withoutLeaderElection := render(t, namespaceScopedRelease, "leaderElection: {enabled: false}")
	g.Expect(managerArgs(g, withoutLeaderElection)).NotTo(ContainElement(HavePrefix("--leader-elect")))
	g.Expect(withoutLeaderElection.Find("Role", prefix+"leader-election-role")).To(BeNil())
	g.Expect(withoutLeaderElection.Find("RoleBinding", prefix+"leader-election-rolebinding")).To(BeNil())
}

// The rendered objects are valid for a real API server (their schemas, the
// CRDs' included), and the permissions they grant the manager's
// ServiceAccount are those its mode needs: everywhere by default, in the
// watched namespace (and cluster-scoped reads) in namespace-scoped mode,
// and with rbac.namespaces the reads everywhere but Secrets, ConfigMaps,
// Leases and writes to Cluster API objects in those namespaces alone.
func TestRenderedObjectsApplyToAnAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	env, err := testenv.Start(testenv.Options{WithoutProjectCRDs: true, MonitoringCRDs: true})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	c := env.Client

	install := func(release helmchart.Release, rendered *helmchart.Rendered, namespaces ...string) {
		t.Helper()
		for _, namespace := range append([]string{release.Namespace}, namespaces...) {
			g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
		}
		for _, obj := range rendered.Objects {
			g.Expect(c.Create(ctx, obj)).To(Succeed(), key(obj))
			if obj.GetKind() == "CustomResourceDefinition" {
				// As Helm does before the objects of the CRD's kind.
				g.Eventually(func(g Gomega) {
					crd := &apiextensionsv1.CustomResourceDefinition{}
					g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), crd)).To(Succeed())
					g.Expect(crd.Status.Conditions).To(ContainElement(And(
						HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))))
				}, time.Minute, 100*time.Millisecond).Should(Succeed())
			}
		}
	}
	defaults := render(t, defaultRelease, "")
	install(defaultRelease, defaults)
	scoped := render(t, namespaceScopedRelease, namespaceScoped)
	install(namespaceScopedRelease, scoped, "tenant-a", "grafana")
	g.Expect(scoped.Find("ServiceMonitor", "tenant-a-capi-autoscaler-controller-manager-metrics")).NotTo(BeNil())
	narrowRelease := helmchart.Release{Name: "narrow", Namespace: "narrow-system"}
	install(narrowRelease, render(t, narrowRelease, "{crds: {install: false}, rbac: {namespaces: [clusters-a]}}"), "clusters-a")

	allowed := func(release helmchart.Release, attributes authorizationv1.ResourceAttributes) bool {
		t.Helper()
		serviceAccount := fullnameOf(release) + "-controller-manager"
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + release.Namespace + ":" + serviceAccount,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + release.Namespace, "system:authenticated"},
			ResourceAttributes: &attributes,
		}}
		g.Expect(c.Create(ctx, review)).To(Succeed())
		return review.Status.Allowed
	}
	list := func(group, resource, namespace string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Verb: "list", Group: group, Resource: resource, Namespace: namespace}
	}
	for _, tc := range []struct {
		release    helmchart.Release
		attributes authorizationv1.ResourceAttributes
		allowed    bool
	}{
		{defaultRelease, list("autoscaling.cluster.x-k8s.io", "clusterautoscalers", "anywhere"), true},
		{defaultRelease, list("cluster.x-k8s.io", "machines", ""), true},
		{defaultRelease, list("apiextensions.k8s.io", "customresourcedefinitions", ""), true},
		{defaultRelease, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: defaultRelease.Namespace}, true},
		{namespaceScopedRelease, list("autoscaling.cluster.x-k8s.io", "clusterautoscalers", "tenant-a"), true},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "update", Group: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "tenant-a"}, true},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "tenant-a"}, true},
		{namespaceScopedRelease, list("infrastructure.example.com", "examplemachinetemplates", "tenant-a"), true},
		{namespaceScopedRelease, list("apiextensions.k8s.io", "customresourcedefinitions", ""), true},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: namespaceScopedRelease.Namespace}, true},
		{namespaceScopedRelease, list("autoscaling.cluster.x-k8s.io", "clusterautoscalers", "default"), false},
		{namespaceScopedRelease, list("autoscaling.cluster.x-k8s.io", "clusterautoscalers", ""), false},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, false},
		{namespaceScopedRelease, list("infrastructure.cluster.x-k8s.io", "dockermachinetemplates", "default"), false},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "tenant-a"}, true},
		{namespaceScopedRelease, authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps", Namespace: "default"}, false},
		{defaultRelease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "anywhere"}, true},
		{narrowRelease, list("cluster.x-k8s.io", "machines", ""), true},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "patch", Group: "autoscaling.cluster.x-k8s.io", Resource: "clusterautoscalers", Subresource: "status", Namespace: "default"}, true},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "clusters-a"}, true},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases", Namespace: "clusters-a"}, true},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "default"}, false},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "patch", Resource: "configmaps", Namespace: "default"}, false},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "update", Group: "cluster.x-k8s.io", Resource: "machinedeployments", Subresource: "scale", Namespace: "default"}, false},
		{narrowRelease, authorizationv1.ResourceAttributes{Verb: "patch", Group: "cluster.x-k8s.io", Resource: "machines", Namespace: "default"}, false},
	} {
		g.Expect(allowed(tc.release, tc.attributes)).To(Equal(tc.allowed), "%s: %+v", tc.release.Name, tc.attributes)
	}

	// The generator's table of cluster-scoped resources agrees with the API
	// server's discovery: the Roles name namespaced resources only, the
	// manager's ClusterRole of namespace-scoped mode cluster-scoped ones.
	mapper := c.RESTMapper()
	checked := 0
	for _, obj := range scoped.Objects {
		kind := obj.GetKind()
		if kind != "Role" && obj.GetName() != "tenant-a-capi-autoscaler-manager-role" {
			continue
		}
		for _, rule := range rulesOf(g, obj) {
			for _, group := range rule.APIGroups {
				for _, resource := range rule.Resources {
					base, _, _ := strings.Cut(resource, "/")
					gvk, err := mapper.KindFor(schema.GroupVersionResource{Group: group, Resource: base})
					if err != nil {
						// Not served here: a provider's, or a wildcard.
						continue
					}
					mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
					g.Expect(err).NotTo(HaveOccurred())
					namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
					g.Expect(namespaced).To(Equal(kind == "Role"), "%s %s names %s/%s", kind, obj.GetName(), group, resource)
					checked++
				}
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">=", 10))
}

// fullnameOf is the chart's name prefix for a release of the chart's name
// or another.
func fullnameOf(release helmchart.Release) string {
	if strings.Contains(release.Name, "capi-autoscaler") {
		return release.Name
	}
	return release.Name + "-capi-autoscaler"
}

// Every value of values.yaml is in the table of docs/helm.md.
func TestEveryValueIsDocumented(t *testing.T) {
	g := NewWithT(t)
	values, _ := chartValues(t)
	docs, err := os.ReadFile(filepath.Join(repoRoot, "docs", "helm.md"))
	g.Expect(err).NotTo(HaveOccurred())
	var leaves []string
	var walk func(prefix string, values map[string]any)
	walk = func(prefix string, values map[string]any) {
		for key, value := range values {
			if nested, ok := value.(map[string]any); ok && len(nested) > 0 && key != "resources" {
				walk(prefix+key+".", nested)
				continue
			}
			leaves = append(leaves, prefix+key)
		}
	}
	walk("", values)
	g.Expect(leaves).To(ContainElement("serviceMonitor.enabled"))
	for _, leaf := range leaves {
		g.Expect(string(docs)).To(ContainSubstring(fmt.Sprintf("| `%s` |", leaf)), "docs/helm.md has no row for %s", leaf)
	}
}

// values.schema.json refuses a value the chart does not have (a typo) and
// a value of the wrong type, as `helm install` does.
func TestValuesSchemaRefusesMistakes(t *testing.T) {
	for _, values := range []string{
		"watchNamepsace: tenant-a",
		"serviceMonitor: {enabled: true, interval: 30s}",
		"replicaCount: two",
		"extraArgs: [v=2]",
		"image: {pullPolicy: Sometimes}",
	} {
		parsed, err := helmchart.ParseValues(values)
		if err != nil {
			t.Fatal(err)
		}
		_, err = helmchart.Render(filepath.Join(repoRoot, helmchart.Dir), defaultRelease, helmchart.Options{Values: parsed})
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("values don't meet the specifications of the schema")), values)
	}
}

// `helm lint` finds nothing to warn about with the default values and with
// the non-default ones (only that an icon is recommended: the project has
// none).
func TestHelmLint(t *testing.T) {
	for _, values := range []string{"", namespaceScoped} {
		parsed, err := helmchart.ParseValues(values)
		if err != nil {
			t.Fatal(err)
		}
		linter := lint.All(filepath.Join(repoRoot, helmchart.Dir), parsed, "capi-autoscaler-system", false)
		g := NewWithT(t)
		for _, message := range linter.Messages {
			g.Expect(message.Severity).To(BeNumerically("<", support.WarningSev), message.Error())
		}
	}
}
