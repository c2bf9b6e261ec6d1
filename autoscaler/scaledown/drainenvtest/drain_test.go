// Package drainenvtest drains a node through a real API server: the
// Eviction API, PodDisruptionBudgets and graceful deletion behave as they
// do in a cluster. No kubelet or controllers run: the test finishes the
// pods' termination and plays the disruption controller.
package drainenvtest_test

import (
	"context"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodefacts"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

func TestDrainThroughTheEvictionAPI(t *testing.T) {
	g := NewWithT(t)
	_, ctx := ktesting.NewTestContext(t)
	config := startAPIServer(t)
	client := kubernetes.NewForConfigOrDie(config)
	// The actuator's own client, whose lists of pods are recorded.
	lists := &podLists{}
	actuatorConfig := rest.CopyConfig(config)
	actuatorConfig.Wrap(lists.record)

	n := create(ctx, g, client, st.Node("n", "4", "16Gi"))
	create(ctx, g, client, st.Node("other", "4", "16Gi"))
	for _, name := range []string{"web-0", "web-1"} {
		runningPod(ctx, g, client, name, "n", "ReplicaSet", "web")
	}
	runningPod(ctx, g, client, "agent", "n", "DaemonSet", "agent")
	budget := create(ctx, g, client, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
	})
	allowDisruptions(ctx, g, client, budget, 1)

	clock := clocktesting.NewFakeClock(time.Now())
	actuator, err := scaledown.NewActuator(kubernetes.NewForConfigOrDie(actuatorConfig), record.NewFakeRecorder(100), ownership.Owner{UID: "5e0e4c4a-0000-4000-8000-000000000001"}, scaledown.ActuatorOptions{
		MaxPodEvictionTime: 2 * time.Minute, MaxGracefulTermination: 20 * time.Second, NodeDeletionTimeout: 5 * time.Minute, Clock: clock,
	})
	g.Expect(err).NotTo(HaveOccurred())
	group := &st.NodeGroup{Name: "ng", Max: 10, Target: 2, Nodes: []string{"n", "other"}}

	actuator.Start(ctx, &scaledown.Plan{Drain: []scaledown.Removal{{Node: n, Group: group}}}, cache(ctx, g, client))

	node, err := client.CoreV1().Nodes().Get(ctx, "n", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(node.Spec.Taints).To(ContainElement(And(HaveField("Key", nodefacts.ToBeDeletedTaint), HaveField("Effect", corev1.TaintEffectNoSchedule))))
	terminating := terminatingPods(ctx, g, client)
	g.Expect(terminating).To(HaveLen(1), "the PDB lets one web pod go")
	g.Expect(terminating[0].DeletionGracePeriodSeconds).To(HaveValue(BeEquivalentTo(20)), "the grace period is capped")
	finishTermination(ctx, g, client, terminating)

	clock.Step(30 * time.Second)
	actuator.Continue(ctx, scaledown.View{Pods: cache(ctx, g, client), Groups: []nodegroups.NodeGroup{group}})
	g.Expect(terminatingPods(ctx, g, client)).To(BeEmpty(), "the PDB refuses the second eviction")
	g.Expect(group.Deleted).To(BeEmpty())

	// The disruption controller sees the replacement pod running.
	allowDisruptions(ctx, g, client, budget, 1)
	clock.Step(30 * time.Second)
	actuator.Continue(ctx, scaledown.View{Pods: cache(ctx, g, client), Groups: []nodegroups.NodeGroup{group}})
	terminating = terminatingPods(ctx, g, client)
	g.Expect(terminating).To(HaveLen(1))
	g.Expect(group.Deleted).To(BeEmpty(), "the node stays while a pod terminates")
	finishTermination(ctx, g, client, terminating)

	clock.Step(30 * time.Second)
	g.Expect(lists.queries()).To(BeEmpty(), "while the cache has pods on the node, the API server is not asked")
	actuator.Continue(ctx, scaledown.View{Pods: cache(ctx, g, client), Groups: []nodegroups.NodeGroup{group}})
	g.Expect(group.Deleted).To(Equal([]string{"n"}))
	queries := lists.queries()
	g.Expect(queries).To(HaveLen(1), "the API server is read once, before the deletion")
	g.Expect(queries[0].Get("fieldSelector")).To(Equal("spec.nodeName=n"))
	g.Expect(queries[0].Get("resourceVersionMatch")).To(Equal(string(metav1.ResourceVersionMatchNotOlderThan)), "served from the watch cache")
	g.Expect(queries[0].Get("resourceVersion")).NotTo(BeEmpty())
	agent, err := client.CoreV1().Pods("default").Get(ctx, "agent", metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(agent.DeletionTimestamp).To(BeNil(), "DaemonSet pods are not evicted")
}

// podLists records the queries of the requests that list pods.
type podLists struct {
	mu   sync.Mutex
	seen []url.Values
}

func (l *podLists) record(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && req.URL.Path == "/api/v1/pods" {
			l.mu.Lock()
			l.seen = append(l.seen, req.URL.Query())
			l.mu.Unlock()
		}
		return next.RoundTrip(req)
	})
}

func (l *podLists) queries() []url.Values {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// cache is what an up-to-date cache of the cluster has of its nodes and
// their pods.
func cache(ctx context.Context, g Gomega, client kubernetes.Interface) *snapshot.Snapshot {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	in := snapshot.Input{}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	for i := range pods.Items {
		in.Pods = append(in.Pods, &pods.Items[i])
	}
	return snapshot.New(in)
}

func startAPIServer(t *testing.T) *rest.Config {
	env := &envtest.Environment{
		// Used when KUBEBUILDER_ASSETS is unset, e.g. under a plain go test.
		BinaryAssetsDirectory: filepath.Join("..", "..", "..", "bin", "k8s"),
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest; run 'make test' to build kube-apiserver and etcd into bin/k8s: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return cfg
}

func create[T interface {
	*corev1.Node | *corev1.Pod | *policyv1.PodDisruptionBudget
}](ctx context.Context, g Gomega, client kubernetes.Interface, obj T) T {
	var created any
	var err error
	switch o := any(obj).(type) {
	case *corev1.Node:
		created, err = client.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Pod:
		created, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *policyv1.PodDisruptionBudget:
		created, err = client.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	}
	g.Expect(err).NotTo(HaveOccurred())
	return created.(T)
}

// runningPod creates a ready pod labelled app on the node, controlled by
// an object of the given kind. Ready, because the Eviction API lets
// unready pods go whatever the PDB says.
func runningPod(ctx context.Context, g Gomega, client kubernetes.Interface, name, nodeName, controllerKind, app string) {
	pod := create(ctx, g, client, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", Labels: map[string]string{"app": app},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: controllerKind, Name: "owner", UID: types.UID("uid-owner"), Controller: ptr.To(true)}},
		},
		Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	})
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err := client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

// allowDisruptions sets the budget's status as the disruption controller
// would with two healthy pods.
func allowDisruptions(ctx context.Context, g Gomega, client kubernetes.Interface, budget *policyv1.PodDisruptionBudget, allowed int32) {
	current, err := client.PolicyV1().PodDisruptionBudgets(budget.Namespace).Get(ctx, budget.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	current.Status = policyv1.PodDisruptionBudgetStatus{
		ObservedGeneration: current.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1 + allowed, DesiredHealthy: 1, ExpectedPods: 1 + allowed,
	}
	_, err = client.PolicyV1().PodDisruptionBudgets(budget.Namespace).UpdateStatus(ctx, current, metav1.UpdateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
}

func terminatingPods(ctx context.Context, g Gomega, client kubernetes.Interface) []corev1.Pod {
	pods, err := client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	var terminating []corev1.Pod
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil {
			terminating = append(terminating, pod)
		}
	}
	return terminating
}

// finishTermination deletes the pods for good, as their kubelet would.
func finishTermination(ctx context.Context, g Gomega, client kubernetes.Interface, pods []corev1.Pod) {
	for _, pod := range pods {
		g.Expect(client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})).To(Succeed())
	}
}
