package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
)

// update rewrites the golden files under testdata with what the commands print.
var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// testNow is the clock of the commands under test: the fixtures' times are
// relative to it, so that the ages printed stay the same.
var testNow = time.Date(2030, time.January, 2, 10, 0, 0, 0, time.UTC)

// api is the envtest API server the tests share: kubeconfig is an
// administrator's kubeconfig file of it.
var api struct {
	env        *envtest.Environment
	client     client.Client
	kubeconfig string
}

func TestMain(m *testing.M) {
	flag.Parse()
	// The golden files hold times of day in UTC.
	time.Local = time.UTC
	os.Exit(runWithAPIServer(m))
}

// runWithAPIServer runs the tests against a kube-apiserver and etcd with the
// ClusterAutoscaler CRD installed.
func runWithAPIServer(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "The plugin's tests need kube-apiserver and etcd in %s: run `make envtest-binaries`, or set KUBEBUILDER_ASSETS.\n", assets)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join("..", "..", "config", "crd", "bases")},
			ErrorIfPathMissing: true,
		},
		// Two shared cores can make a cold start slow.
		ControlPlaneStartTimeout: 2 * time.Minute,
	}
	if _, err := env.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting envtest: %v\n", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping envtest: %v\n", err)
		}
	}()
	if err := connect(env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(filepath.Dir(api.kubeconfig))
	return m.Run()
}

// connect makes the tests' client and kubeconfig file.
func connect(env *envtest.Environment) error {
	api.env = env
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the administrator: %w", err)
	}
	if api.client, err = client.New(admin.Config(), client.Options{Scheme: scheme}); err != nil {
		return err
	}
	kubeconfig, err := admin.KubeConfig()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kubectl-capi_autoscaler-test-")
	if err != nil {
		return err
	}
	api.kubeconfig = filepath.Join(dir, "kubeconfig")
	return os.WriteFile(api.kubeconfig, kubeconfig, 0o600)
}

// runPlugin runs the plugin with args against the test API server as an
// administrator, without colour unless args ask for it, and returns what it
// printed.
func runPlugin(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithKubeconfig(api.kubeconfig, args...)
}

// runPluginAs runs the plugin as a user with no permissions but those RBAC
// grants its name.
func runPluginAs(t *testing.T, user string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	authenticated, err := api.env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := authenticated.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return runWithKubeconfig(path, args...)
}

// runPluginAt runs the plugin as runPlugin does, with its clock at now.
func runPluginAt(t *testing.T, now time.Time, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithKubeconfigAt(api.kubeconfig, now, args...)
}

func runWithKubeconfig(kubeconfig string, args ...string) (stdout, stderr string, err error) {
	return runWithKubeconfigAt(kubeconfig, testNow, args...)
}

func runWithKubeconfigAt(kubeconfig string, now time.Time, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := newCommand(Streams{Out: &out, ErrOut: &errOut}, func() time.Time { return now })
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "--color", "never"}, args...))
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (go test -run %s -update writes it): %v", t.Name(), err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -run %s -update rewrites it):\n--- got\n%s\n--- want\n%s", path, t.Name(), got, want)
	}
}

// at is testNow moved by d, as an API time.
func at(d time.Duration) *metav1.Time {
	return &metav1.Time{Time: testNow.Add(d)}
}

// fixture is a ClusterAutoscaler with its status, the explanation of its
// last loop and events, to create in the test API server.
type fixture struct {
	ca          *autoscalingv1alpha1.ClusterAutoscaler
	explanation *autoscalingv1alpha1.Explanation
	events      []*eventsv1.Event
}

// create creates the fixture's objects, and its namespace if needed.
func (f fixture) create(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := api.client
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ca.Namespace}}
	if err := c.Create(ctx, namespace); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	status := f.ca.Status
	if err := c.Create(ctx, f.ca); err != nil {
		t.Fatal(err)
	}
	f.ca.Status = status
	if err := c.Status().Update(ctx, f.ca); err != nil {
		t.Fatal(err)
	}
	if f.explanation != nil {
		f.publish(t, f.explanation)
	}
	for _, e := range f.events {
		e.Namespace, e.Regarding.Namespace = f.ca.Namespace, f.ca.Namespace
		if err := c.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

// publish writes explanation as the manager does.
func (f fixture) publish(t *testing.T, explanation *autoscalingv1alpha1.Explanation) {
	t.Helper()
	data, err := json.Marshal(explanation)
	if err != nil {
		t.Fatal(err)
	}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.ca.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(f.ca.Name),
	}}
	ctx := context.Background()
	err = api.client.Get(ctx, client.ObjectKeyFromObject(configMap), configMap)
	configMap.Labels = map[string]string{autoscalingv1alpha1.ExplanationLabel: f.ca.Name}
	configMap.Data = map[string]string{autoscalingv1alpha1.ExplanationDataKey: string(data)}
	switch {
	case err == nil:
		err = api.client.Update(ctx, configMap)
	case client.IgnoreNotFound(err) == nil:
		err = api.client.Create(ctx, configMap)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// newClusterAutoscaler is a ClusterAutoscaler of cluster, named after it.
func newClusterAutoscaler(namespace, cluster string, status autoscalingv1alpha1.ClusterAutoscalerStatus) *autoscalingv1alpha1.ClusterAutoscaler {
	return &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: cluster},
		Status:     status,
	}
}

// healthyConditions are the conditions of a ClusterAutoscaler that runs.
func healthyConditions() []metav1.Condition {
	return []metav1.Condition{
		condition(autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The autoscaling loop runs"),
		condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The cluster may be scaled"),
		condition(autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason, "0 of 4 nodes unready"),
		condition(autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "The current spec is applied"),
	}
}

func condition(conditionType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message, LastTransitionTime: *at(-time.Hour)}
}

// event is an event of the manager about the object of kind and name, in
// the events.k8s.io API that the manager's recorder writes.
func event(kind, name, eventType, reason, note string, when time.Duration) *eventsv1.Event {
	apiVersion := "cluster.x-k8s.io/v1beta2"
	if kind == clusterAutoscalerKind {
		apiVersion = autoscalingv1alpha1.GroupVersion.String()
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: name + "-"},
		EventTime:           metav1.MicroTime{Time: testNow.Add(when)},
		ReportingController: autoscalingv1alpha1.EventSource,
		ReportingInstance:   "capi-autoscaler-test",
		Action:              "Autoscale",
		Reason:              reason,
		Note:                note,
		Type:                eventType,
		Regarding:           corev1.ObjectReference{Kind: kind, Name: name, APIVersion: apiVersion},
	}
}

// withCount makes e a series of count events, the first at first.
func withCount(e *eventsv1.Event, count int32, first time.Duration) *eventsv1.Event {
	e.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: e.EventTime}
	e.EventTime = metav1.MicroTime{Time: testNow.Add(first)}
	return e
}

// node is a node of the explanation.
func node(name, group string, utilization *int32, scaleDown autoscalingv1alpha1.NodeScaleDown, reason, message string) autoscalingv1alpha1.NodeExplanation {
	return autoscalingv1alpha1.NodeExplanation{
		Name: name, NodeGroup: group, UtilizationPercent: utilization, ScaleDown: scaleDown, Reason: reason, Message: message,
	}
}

// percent is a utilization.
func percent(p int32) *int32 { return ptr.To(p) }

// requireExitError checks that a command failed with a message containing want.
func requireExitError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the command succeeded; want an error containing %q", want)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}
