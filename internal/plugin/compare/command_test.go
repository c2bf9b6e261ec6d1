package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// The compare tests use the test API server as both the management and
// the workload cluster: the other autoscaler's events and status ConfigMap
// are in it, as the ClusterAutoscalers are. So that no test sees the
// events of another, each test has a time of its own, a day or more from
// the others': TestNow, TestNow and a day, and the time the latency test
// runs at.

// createObject creates obj, and its namespace if needed.
func createObject(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if namespace := obj.GetNamespace(); namespace != "" {
		if err := plugintest.API.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); client.IgnoreAlreadyExists(err) != nil {
			t.Fatal(err)
		}
	}
	if err := plugintest.API.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// createStatusConfigMap creates the other autoscaler's status ConfigMap,
// written at TestNow less 10s, unless it exists.
func createStatusConfigMap(t *testing.T, namespace string) {
	t.Helper()
	configMap := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cluster-autoscaler-status", Annotations: map[string]string{
			"cluster-autoscaler.kubernetes.io/last-updated": "2030-01-02 09:59:50.123456789 +0000 UTC",
		}},
		Data: map[string]string{"status": strings.ReplaceAll(yamlStatus, "clusters/", namespace+"/")},
	}
	if err := plugintest.API.Client.Create(context.Background(), configMap); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
}

// theirEvent is an event the other autoscaler records, as client-go's
// recorder does, on the object, first at.
func theirEvent(object corev1.ObjectReference, reason, message string, first time.Time) *corev1.Event {
	namespace := object.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: namespace, GenerateName: strings.ToLower(object.Name) + "."},
		InvolvedObject: object,
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: otherAutoscalerComponent},
		FirstTimestamp: metav1.Time{Time: first},
		LastTimestamp:  metav1.Time{Time: first},
		Count:          1,
	}
}

func podRef(namespace, name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: namespace, Name: name, UID: types.UID("uid-" + name)}
}

func nodeRef(name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: name}
}

var statusConfigMapRef = corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: "kube-system", Name: "cluster-autoscaler-status"}

// dryRunClusterAutoscaler is a DryRun ClusterAutoscaler of Cluster prod
// with decisions, and the Cluster API kubeconfig Secret of the Cluster,
// which reaches the test API server.
func dryRunClusterAutoscaler(t *testing.T, namespace, name string, mode autoscalingv1alpha1.Mode, decisions []autoscalingv1alpha1.DryRunDecision) {
	t.Helper()
	ca := plugintest.NewClusterAutoscaler(namespace, "prod", autoscalingv1alpha1.ClusterAutoscalerStatus{
		Conditions: plugintest.HealthyConditions(),
		NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
			{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-0"), MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](8), TargetSize: 7},
			{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-1"), MinSize: ptr.To[int32](0), MaxSize: ptr.To[int32](3), TargetSize: 0},
		},
		LastLoopTime:    plugintest.At(-5 * time.Second),
		DryRunDecisions: decisions,
	})
	ca.Name = name
	ca.Spec.Mode = mode
	plugintest.Fixture{CA: ca}.Create(t)
}

// kubeconfigSecret is the Cluster API kubeconfig Secret of Cluster prod in
// namespace, reaching the test API server.
func kubeconfigSecret(t *testing.T, namespace string) {
	t.Helper()
	kubeconfig, err := os.ReadFile(plugintest.API.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	createObject(t, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "prod-kubeconfig"},
		Data:       map[string][]byte{"value": kubeconfig},
	})
}

// compareFixture is the other autoscaler's doings in the hour before
// TestNow and shift, and a DryRun ClusterAutoscaler's decisions, which
// agree on one scale-up and one node and differ on the rest.
func compareFixture(t *testing.T, namespace string, shift time.Duration) {
	t.Helper()
	md0 := scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-0")
	md1 := scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-1")
	ms2 := scalable.ID(scalable.KindMachineSet, namespace, "prod-gpu")
	shop := namespace + "-shop"
	pod := func(name string) string { return shop + "/" + name }
	dryRunClusterAutoscaler(t, namespace, "prod-dryrun", autoscalingv1alpha1.DryRunMode, []autoscalingv1alpha1.DryRunDecision{
		// Out of the window.
		ourUp(shift-90*time.Minute, shift-91*time.Minute, []string{pod("old-0")}, delta(md0, 1)),
		ourDown(shift-29*time.Minute-20*time.Second, "prod-md-0-a"),
		ourDown(shift-20*time.Minute, "prod-md-1-c"),
		ourUp(shift-17*time.Minute-55*time.Second, shift-18*time.Minute-15*time.Second, []string{pod("web-0"), pod("web-1")}, delta(md0, 2)),
		ourUp(shift-9*time.Minute-40*time.Second, shift-10*time.Minute-30*time.Second, []string{pod("db-0")}, delta(md1, 1)),
		ourUp(shift-2*time.Minute, shift-3*time.Minute, []string{pod("gpu-0")}, delta(ms2, 1)),
	})
	kubeconfigSecret(t, namespace)

	now := plugintest.TestNow.Add(shift)
	grow := func(from, to int32) string { return scaleUpMessage([4]any{md0, from, to, 8}) }
	for _, e := range []*corev1.Event{
		theirEvent(podRef(shop, "web-0"), "TriggeredScaleUp", grow(1, 3), now.Add(-17*time.Minute-50*time.Second)),
		theirEvent(podRef(shop, "web-1"), "TriggeredScaleUp", grow(1, 3), now.Add(-17*time.Minute-50*time.Second)),
		theirEvent(podRef(shop, "db-0"), "TriggeredScaleUp", grow(3, 4), now.Add(-10*time.Minute)),
		theirEvent(podRef(shop, "odd-0"), "TriggeredScaleUp", "pod triggered scale-up: [something new]", now.Add(-8*time.Minute)),
		theirEvent(podRef(shop, "batch-0"), "TriggeredScaleUp", grow(4, 7), now.Add(-5*time.Minute)),
		theirEvent(podRef(shop, "batch-1"), "TriggeredScaleUp", grow(4, 7), now.Add(-5*time.Minute)),
		theirEvent(podRef(shop, "batch-2"), "TriggeredScaleUp", grow(4, 7), now.Add(-5*time.Minute+time.Second)),
		theirEvent(podRef(shop, "web-0"), "ScaleDown", "deleting pod for node scale down", now.Add(-29*time.Minute)),
		theirEvent(nodeRef("prod-md-0-a"), "ScaleDown", "marked the node as toBeDeleted/unschedulable", now.Add(-29*time.Minute)),
		theirEvent(statusConfigMapRef, "ScaleDownEmpty", `Scale-down: removing empty node "prod-md-0-b"`, now.Add(-28*time.Minute)),
		theirEvent(statusConfigMapRef, "ScaleDown", "Scale-down: something new", now.Add(-27*time.Minute)),
	} {
		createObject(t, e)
	}
	createStatusConfigMap(t, namespace)
}

// TestCompareCommand compares a DryRun ClusterAutoscaler with the other
// autoscaler's events and status in the test API server.
func TestCompareCommand(t *testing.T) {
	g := NewWithT(t)
	const namespace = "compare-prod"
	compareFixture(t, namespace, 0)

	out, _, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred())
	plugintest.Golden(t, "compare/report.txt", out)
	// docs/operations.md shows this report.
	docs, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operations.md"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(docs)).To(ContainSubstring("$ kubectl capi-autoscaler compare prod-dryrun -n compare-prod\n"+out+"```"),
		"docs/operations.md shows another report than testdata/compare/report.txt")

	// The same with a kubeconfig file of the workload cluster.
	fromFile, _, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "--workload-kubeconfig", plugintest.API.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fromFile).To(Equal(out))

	// A narrower window leaves the older doings out.
	narrow, _, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "--since", "12m")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(narrow).To(ContainSubstring("Scale-ups: 0 agree, 1 differ, 2 only theirs, 1 only ours"))
	g.Expect(narrow).To(ContainSubstring("Scale-downs: none"))

	// Within a tolerance of 10s, the scale-ups for db-0, 20s apart, are two.
	strict, _, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "--tolerance", "10s")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strict).To(ContainSubstring("Scale-ups: 1 agree, 0 differ, 3 only theirs, 2 only ours"))
	// Within 5m, the burst of batch pods and the GPU scale-up, 3m apart,
	// are still two: they share no pods and no node groups.
	wide, _, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "--tolerance", "5m")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wide).To(ContainSubstring("Scale-ups: 1 agree, 1 differ, 2 only theirs, 1 only ours"))

	out, _, err = plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	var report Report
	g.Expect(json.Unmarshal([]byte(out), &report)).To(Succeed())
	g.Expect(report.Mode).To(Equal("DryRun"))
	g.Expect(report.Summary).To(Equal(Summary{
		ScaleUps:    Counts{Agree: 1, Differ: 1, OnlyTheirs: 2, OnlyOurs: 1},
		ScaleDowns:  Counts{Agree: 1, OnlyTheirs: 1, OnlyOurs: 1},
		Differences: 6,
	}))
	g.Expect(report.ScaleUps[0].Result).To(Equal(Agree))
	g.Expect(report.ScaleUps[0].Ours.Latency.Duration).To(Equal(20 * time.Second))
	g.Expect(report.ScaleUps[0].Theirs.Latency).To(BeNil(), "the pods do not exist")
	g.Expect(report.TheirStatus.NodeGroups).To(HaveLen(2))
	g.Expect(report.Notes).To(ContainElement(ContainSubstring(`1 scale-down event of the other autoscaler not understood, e.g. ScaleDown event "Scale-down: something new" names no node`)))

	_, stderr, err := plugintest.RunPlugin(t, "compare", "prod-dryrun", "-n", namespace, "--fail-on-difference")
	var exit *cli.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "error %v", err)
	g.Expect(exit.Code).To(Equal(2))
	g.Expect(exit.Message).To(Equal("the autoscalers differ: 6 differences"))
	g.Expect(stderr).To(BeEmpty())
}

// TestCompareReachesTheWorkloadClusterAsTheManagerDoes: compare reads the
// kubeconfig the manager uses, the Secret spec.workloadKubeconfigSecretRef
// names before the Cluster's own, and never runs a credential plugin that
// a Secret holds: whoever may write Secrets in the namespace would run a
// command on the operator's machine.
func TestCompareReachesTheWorkloadClusterAsTheManagerDoes(t *testing.T) {
	g := NewWithT(t)
	const namespace = "compare-kubeconfig"
	day := 3 * 24 * time.Hour
	now := plugintest.TestNow.Add(day)
	compareFixture(t, namespace, day)
	reaching, err := os.ReadFile(plugintest.API.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	marker := filepath.Join(t.TempDir(), "ran")
	running := fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: workload, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: plugin, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/sh, args: ["-c", "touch %s"], interactiveMode: Never}}}]
contexts: [{name: workload, context: {cluster: workload, user: plugin}}]
current-context: workload
`, marker)
	named := func(ns, secretName, key string, kubeconfig []byte) {
		createObject(t, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName, Labels: map[string]string{clusterv1.ClusterNameLabel: "prod"}},
			Type:       clusterv1.ClusterSecretType,
			Data:       map[string][]byte{key: kubeconfig},
		})
		ca := plugintest.NewClusterAutoscaler(ns, "prod", autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: plugintest.HealthyConditions(), LastLoopTime: plugintest.At(-5 * time.Second)})
		ca.Name = "prod-dryrun"
		ca.Spec.Mode = autoscalingv1alpha1.DryRunMode
		ca.Spec.WorkloadKubeconfigSecretRef = &autoscalingv1alpha1.WorkloadKubeconfigSecretReference{Name: secretName, Key: key}
		plugintest.Fixture{CA: ca}.Create(t)
	}

	// The Cluster's own Secret in the namespace runs a command; the one
	// the ClusterAutoscaler names reaches the cluster.
	named(namespace+"-ref", "narrow", "config", reaching)
	createObject(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace + "-ref", Name: "prod-kubeconfig"}, Data: map[string][]byte{"value": running}})
	out, _, err := plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace+"-ref")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("ClusterAutoscaler %s-ref/prod-dryrun", namespace))

	// The manager's identity there may not list events: compare says
	// what to pass instead.
	narrowUser, err := plugintest.API.Env.AddUser(envtest.User{Name: "compare-narrow-manager"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	narrowKubeconfig, err := narrowUser.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	named(namespace+"-narrow", "narrow", "value", narrowKubeconfig)
	_, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace+"-narrow")
	plugintest.RequireExitError(t, err, "the kubeconfig of Secret compare-kubeconfig-narrow/narrow, which the manager uses, may not read it: pass one that may with --workload-kubeconfig FILE")

	named(namespace+"-exec", "narrow", "value", running)
	_, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace+"-exec")
	plugintest.RequireExitError(t, err, "the kubeconfig Secret compare-kubeconfig-exec/narrow holds no usable kubeconfig: it runs a credential plugin (exec or auth-provider), which is never run from a Secret")
	g.Expect(marker).NotTo(BeAnExistingFile(), "the Secret's command did not run")
}

// TestCompareCommandStates compares ClusterAutoscalers that are not DryRun,
// have no decisions, or whose workload cluster cannot be reached.
func TestCompareCommandStates(t *testing.T) {
	g := NewWithT(t)
	const namespace = "compare-states"
	day := 24 * time.Hour
	now := plugintest.TestNow.Add(day)
	compareFixture(t, namespace, day)
	decision := []autoscalingv1alpha1.DryRunDecision{ourDown(day-20*time.Minute, "prod-md-1-c")}
	dryRunClusterAutoscaler(t, namespace, "active", autoscalingv1alpha1.ActiveMode, nil)
	dryRunClusterAutoscaler(t, namespace, "was-dryrun", autoscalingv1alpha1.ActiveMode, decision)
	dryRunClusterAutoscaler(t, namespace, "new", autoscalingv1alpha1.DryRunMode, nil)

	_, _, err := plugintest.RunPluginAt(t, now, "compare", "active", "-n", namespace)
	plugintest.RequireExitError(t, err, "ClusterAutoscaler compare-states/active is Active, not DryRun: it records no decisions to compare")

	out, _, err := plugintest.RunPluginAt(t, now, "compare", "was-dryrun", "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("ClusterAutoscaler compare-states/was-dryrun (Active)"))
	g.Expect(out).To(ContainSubstring("ClusterAutoscaler was-dryrun is Active, not DryRun: it records no new decisions; comparing the 1 decision it recorded before"))
	g.Expect(out).To(ContainSubstring("Scale-downs: 0 agree, 2 only theirs, 1 only ours"))
	// The status ConfigMap was written a day ago.
	g.Expect(out).To(ContainSubstring("the other autoscaler last wrote its status at 2030-01-02 09:59:50 (24h ago): it may not be running"))

	out, _, err = plugintest.RunPluginAt(t, now, "compare", "new", "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("ClusterAutoscaler new records no decisions yet"))
	g.Expect(out).To(ContainSubstring("Scale-ups: 0 agree, 0 differ, 4 only theirs, 0 only ours"))

	_, _, err = plugintest.RunPluginAt(t, now, "compare", "missing", "-n", namespace)
	plugintest.RequireExitError(t, err, "no ClusterAutoscaler missing in namespace compare-states")

	// Without the Cluster's kubeconfig Secret, the error says what to pass.
	dryRunClusterAutoscaler(t, namespace+"-nosecret", "prod-dryrun", autoscalingv1alpha1.DryRunMode, decision)
	_, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace+"-nosecret")
	plugintest.RequireExitError(t, err, "cannot reach the workload cluster: kubeconfig not found: Secret compare-states-nosecret/prod-kubeconfig does not exist; "+
		"pass the workload cluster's kubeconfig with --workload-kubeconfig FILE (`clusterctl get kubeconfig prod -n compare-states-nosecret > FILE` writes it)")
	out, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace+"-nosecret", "--workload-kubeconfig", plugintest.API.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("Scale-downs: 0 agree, 2 only theirs, 1 only ours"))

	// A user who may read the ClusterAutoscaler but not the Secret is told
	// the same.
	createObject(t, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "compare-viewer"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{autoscalingv1alpha1.GroupVersion.Group}, Resources: []string{"clusterautoscalers"}, Verbs: []string{"get"},
		}},
	})
	createObject(t, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "compare-viewer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "compare-viewer"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "compare-viewer"}},
	})
	g.Eventually(func(g Gomega) {
		_, _, err = plugintest.RunPluginAs(t, "compare-viewer", "compare", "prod-dryrun", "-n", namespace)
		g.Expect(err).To(MatchError(And(
			ContainSubstring(`cannot reach the workload cluster: reading Secret compare-states/prod-kubeconfig: secrets "prod-kubeconfig" is forbidden`),
			ContainSubstring("pass the workload cluster's kubeconfig with --workload-kubeconfig FILE"))))
	}).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// A workload user who may list events, but not read pods or the status
	// ConfigMap, gets what the events say, and notes on the rest.
	createObject(t, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "compare-events-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list"}}},
	})
	createObject(t, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "compare-events-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "compare-events-reader"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "compare-events-reader"}},
	})
	eventsReader, err := plugintest.API.Env.AddUser(envtest.User{Name: "compare-events-reader"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := eventsReader.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	eventsReaderKubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(eventsReaderKubeconfig, kubeconfig, 0o600)).To(Succeed())
	g.Eventually(func(g Gomega) {
		out, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace, "--workload-kubeconfig", eventsReaderKubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	g.Expect(out).To(ContainSubstring("Scale-ups: 1 agree, 1 differ, 2 only theirs, 1 only ours"))
	g.Expect(out).To(ContainSubstring(`cannot read the pods of namespaces compare-states-shop, so the other autoscaler's latency for them is unknown: pods is forbidden`))
	g.Expect(out).To(ContainSubstring(`cannot read the other autoscaler's status ConfigMap kube-system/cluster-autoscaler-status: configmaps "cluster-autoscaler-status" is forbidden`))
	g.Expect(out).NotTo(ContainSubstring("Their status"))

	_, _, err = plugintest.RunPluginAt(t, now, "compare", "prod-dryrun", "-n", namespace, "--status-configmap", "cluster-autoscaler-status")
	plugintest.RequireExitError(t, err, `--status-configmap: want NAMESPACE/NAME, not "cluster-autoscaler-status"`)
}

// TestCompareLatencyOfExistingPods measures the other autoscaler's latency
// from the creation of the pods its scale-up was for, which still exist.
func TestCompareLatencyOfExistingPods(t *testing.T) {
	g := NewWithT(t)
	const namespace = "compare-latency"
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "web-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web"}}},
	}
	createObject(t, pod)
	g.Expect(plugintest.API.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
	created := pod.CreationTimestamp.Time
	md0 := scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-0")

	dryRunClusterAutoscaler(t, namespace, "prod-dryrun", autoscalingv1alpha1.DryRunMode, []autoscalingv1alpha1.DryRunDecision{{
		Time: metav1.Time{Time: created.Add(20 * time.Second)}, Kind: autoscalingv1alpha1.ScaleUpDecision,
		NodeGroups: []autoscalingv1alpha1.NodeGroupDelta{delta(md0, 1)}, Pods: []string{namespace + "/web-0"}, PodCount: 1,
		OldestPodCreationTime: &metav1.Time{Time: created},
	}})
	kubeconfigSecret(t, namespace)
	ref := podRef(namespace, "web-0")
	ref.UID = pod.UID
	createObject(t, theirEvent(ref, "TriggeredScaleUp", scaleUpMessage([4]any{md0, 1, 2, 5}), created.Add(15*time.Second)))

	out, _, err := plugintest.RunPluginAt(t, created.Add(time.Minute), "compare", "prod-dryrun", "-n", namespace, "-o", "json")
	g.Expect(err).NotTo(HaveOccurred())
	var report Report
	g.Expect(json.Unmarshal([]byte(out), &report)).To(Succeed())
	g.Expect(report.ScaleUps).To(HaveLen(1))
	g.Expect(report.ScaleUps[0].Result).To(Equal(Agree))
	g.Expect(report.ScaleUps[0].Theirs.Latency.Duration).To(Equal(15 * time.Second))
	g.Expect(report.ScaleUps[0].Ours.Latency.Duration).To(Equal(20 * time.Second))

	out, _, err = plugintest.RunPluginAt(t, created.Add(time.Minute), "compare", "prod-dryrun", "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(MatchRegexp(`agree +\S+ +\S+ +MachineDeployment prod-md-0 \+1 +1/1/1 +15s/20s\n`))
}

func TestParseObjectKeyWantsNamespaceSlashName(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    types.NamespacedName
		wantErr bool
	}{
		{value: "kube-system/cluster-autoscaler-status", want: types.NamespacedName{Namespace: "kube-system", Name: "cluster-autoscaler-status"}},
		{value: "cluster-autoscaler-status", wantErr: true},
		{value: "", wantErr: true},
		{value: "/cluster-autoscaler-status", wantErr: true},
		{value: "kube-system/", wantErr: true},
		{value: "kube-system/a/b", wantErr: true},
	} {
		t.Run(tt.value, func(t *testing.T) {
			g := NewWithT(t)
			key, err := parseObjectKey(tt.value)
			if tt.wantErr {
				g.Expect(err).To(MatchError(`want NAMESPACE/NAME, not "` + tt.value + `"`))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(key).To(Equal(tt.want))
		})
	}
}
