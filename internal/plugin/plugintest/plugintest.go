// Package plugintest is what the tests of the plugin's commands share: an
// API server with the ClusterAutoscaler CRD, the objects the manager
// publishes, a clock, and running a command as kubectl would.
package plugintest

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

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
)

// Update rewrites the golden files under testdata with what the commands print.
var Update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestNow is the clock of the commands under test: the fixtures' times are
// relative to it, so that the ages printed stay the same.
var TestNow = time.Date(2030, time.January, 2, 10, 0, 0, 0, time.UTC)

// MD0 and MD1 are node groups of the fixtures' Clusters.
const (
	MD0 = "MachineDeployment/clusters/prod-md-0"
	MD1 = "MachineDeployment/clusters/prod-md-1"
)

// API is the envtest API server the tests share: Kubeconfig is an
// administrator's kubeconfig file of it.
var API struct {
	Env        *envtest.Environment
	Client     client.Client
	Kubeconfig string
}

// commands are the commands of the package under test.
var commands []func(*cli.Options) *cobra.Command

// Main runs the tests of a package of the plugin, whose commands are
// newCommands, against an API server: TestMain calls it.
func Main(m *testing.M, newCommands ...func(*cli.Options) *cobra.Command) {
	flag.Parse()
	// The golden files hold times of day in UTC.
	time.Local = time.UTC
	commands = newCommands
	os.Exit(runWithAPIServer(m))
}

// runWithAPIServer runs the tests against a kube-apiserver and etcd with the
// ClusterAutoscaler CRD installed.
func runWithAPIServer(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "..", "bin", "k8s")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		fmt.Fprintf(os.Stderr, "The plugin's tests need kube-apiserver and etcd in %s: run `make envtest-binaries`, or set KUBEBUILDER_ASSETS.\n", assets)
		return 1
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              []string{filepath.Join("..", "..", "..", "config", "crd", "bases")},
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
	defer os.RemoveAll(filepath.Dir(API.Kubeconfig))
	return m.Run()
}

// connect makes the tests' client and kubeconfig file.
func connect(env *envtest.Environment) error {
	API.Env = env
	scheme, err := cli.NewScheme()
	if err != nil {
		return err
	}
	admin, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the administrator: %w", err)
	}
	if API.Client, err = client.New(admin.Config(), client.Options{Scheme: scheme}); err != nil {
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
	API.Kubeconfig = filepath.Join(dir, "kubeconfig")
	return os.WriteFile(API.Kubeconfig, kubeconfig, 0o600)
}

// RunPlugin runs the plugin with args against the test API server as an
// administrator, without colour unless args ask for it, and returns what it
// printed.
func RunPlugin(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithKubeconfig(API.Kubeconfig, args...)
}

// RunPluginAs runs the plugin as a user with no permissions but those RBAC
// grants its name.
func RunPluginAs(t *testing.T, user string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	authenticated, err := API.Env.AddUser(envtest.User{Name: user}, nil)
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

// RunPluginAt runs the plugin as RunPlugin does, with its clock at now.
func RunPluginAt(t *testing.T, now time.Time, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return runWithKubeconfigAt(API.Kubeconfig, now, args...)
}

// runWithKubeconfig runs the plugin with the kubeconfig file.
func runWithKubeconfig(kubeconfig string, args ...string) (stdout, stderr string, err error) {
	return runWithKubeconfigAt(kubeconfig, TestNow, args...)
}

// runWithKubeconfigAt runs the plugin with the kubeconfig file and its
// clock at now.
func runWithKubeconfigAt(kubeconfig string, now time.Time, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := cli.NewRootCommand(cli.Streams{Out: &out, ErrOut: &errOut}, func() time.Time { return now }, commands...)
	cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig, "--color", "never"}, args...))
	err = cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

// Golden compares got with testdata/name, or rewrites it with -update.
func Golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *Update {
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

// At is TestNow moved by d, as an API time.
func At(d time.Duration) *metav1.Time {
	return &metav1.Time{Time: TestNow.Add(d)}
}

// Fixture is a ClusterAutoscaler with its status, the explanation of its
// last loop and events, to create in the test API server.
type Fixture struct {
	CA          *autoscalingv1alpha1.ClusterAutoscaler
	Explanation *autoscalingv1alpha1.Explanation
	Events      []*eventsv1.Event
}

// Create creates the Fixture's objects, and its namespace if needed.
func (f Fixture) Create(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	c := API.Client
	namespace := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.CA.Namespace}}
	if err := c.Create(ctx, namespace); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	status := f.CA.Status
	if err := c.Create(ctx, f.CA); err != nil {
		t.Fatal(err)
	}
	f.CA.Status = status
	if err := c.Status().Update(ctx, f.CA); err != nil {
		t.Fatal(err)
	}
	if f.Explanation != nil {
		f.Publish(t, f.Explanation)
	}
	for _, e := range f.Events {
		e.Namespace, e.Regarding.Namespace = f.CA.Namespace, f.CA.Namespace
		if err := c.Create(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

// Publish writes explanation as the manager does.
func (f Fixture) Publish(t *testing.T, explanation *autoscalingv1alpha1.Explanation) {
	t.Helper()
	data, err := json.Marshal(explanation)
	if err != nil {
		t.Fatal(err)
	}
	configMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.CA.Namespace, Name: autoscalingv1alpha1.ExplanationConfigMapName(f.CA.Name),
	}}
	ctx := context.Background()
	err = API.Client.Get(ctx, client.ObjectKeyFromObject(configMap), configMap)
	configMap.Labels = map[string]string{autoscalingv1alpha1.ExplanationLabel: f.CA.Name}
	configMap.Data = map[string]string{autoscalingv1alpha1.ExplanationDataKey: string(data)}
	switch {
	case err == nil:
		err = API.Client.Update(ctx, configMap)
	case client.IgnoreNotFound(err) == nil:
		err = API.Client.Create(ctx, configMap)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// NewClusterAutoscaler is a ClusterAutoscaler of cluster, named after it.
func NewClusterAutoscaler(namespace, cluster string, status autoscalingv1alpha1.ClusterAutoscalerStatus) *autoscalingv1alpha1.ClusterAutoscaler {
	return &autoscalingv1alpha1.ClusterAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: cluster},
		Spec:       autoscalingv1alpha1.ClusterAutoscalerSpec{ClusterName: cluster},
		Status:     status,
	}
}

// HealthyConditions are the conditions of a ClusterAutoscaler that runs.
func HealthyConditions() []metav1.Condition {
	return []metav1.Condition{
		Condition(autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The autoscaling loop runs"),
		Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The cluster may be scaled"),
		Condition(autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason, "0 of 4 nodes unready"),
		Condition(autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "The current spec is applied"),
	}
}

func Condition(conditionType string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: conditionType, Status: status, Reason: reason, Message: message, LastTransitionTime: *At(-time.Hour)}
}

// Event is an event of the manager about the object of kind and name, as
// the events.k8s.io API serves it.
func Event(kind, name, eventType, reason, note string, when time.Duration) *eventsv1.Event {
	apiVersion := "cluster.x-k8s.io/v1beta2"
	if kind == cli.ClusterAutoscalerKind {
		apiVersion = autoscalingv1alpha1.GroupVersion.String()
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{GenerateName: name + "-"},
		EventTime:           metav1.MicroTime{Time: TestNow.Add(when)},
		ReportingController: autoscalingv1alpha1.EventSource,
		ReportingInstance:   "capi-autoscaler-test",
		Action:              "Autoscale",
		Reason:              reason,
		Note:                note,
		Type:                eventType,
		Regarding:           corev1.ObjectReference{Kind: kind, Name: name, APIVersion: apiVersion},
	}
}

// WithCount makes e a series of count events, the first at first.
func WithCount(e *eventsv1.Event, count int32, first time.Duration) *eventsv1.Event {
	e.Series = &eventsv1.EventSeries{Count: count, LastObservedTime: e.EventTime}
	e.EventTime = metav1.MicroTime{Time: TestNow.Add(first)}
	return e
}

// Node is a node of the explanation.
func Node(name, group string, utilization *int32, scaleDown autoscalingv1alpha1.NodeScaleDown, reason, message string) autoscalingv1alpha1.NodeExplanation {
	return autoscalingv1alpha1.NodeExplanation{
		Name: name, NodeGroup: group, UtilizationPercent: utilization, ScaleDown: scaleDown, Reason: reason, Message: message,
	}
}

// Percent is a utilization.
func Percent(p int32) *int32 { return ptr.To(p) }

// RequireExitError checks that a command failed with a message containing want.
func RequireExitError(t *testing.T, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the command succeeded; want an error containing %q", want)
	}
	if !bytes.Contains([]byte(err.Error()), []byte(want)) {
		t.Fatalf("error %q does not contain %q", err, want)
	}
}
