package clusterapi

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/ownership"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/trim"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/benchmark"
	infrav1 "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/infrastructure/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/e2e/framework/simcluster"
)

// workloadReader is a workload cluster of nodes and the pods on them, as
// the manager's cache serves them (autoscaler.PodLister); the other kinds
// are empty.
type workloadReader struct {
	*cacheReader
	pods []*snapshot.Pod
}

func (w *workloadReader) ListPods(context.Context) ([]*snapshot.Pod, error) { return w.pods, nil }

// groupsCluster is a Cluster of the management cluster with groups
// MachineDeployments at zero, as hack/perf --groups makes them (zones ×
// sizes × teams, scaling from zero with the labels in the capacity
// annotation and the capacity in their SimMachineTemplates' status), each
// with its MachineSet, and md-burst at zero, whose nodes alone have
// pool=burst; and its workload cluster, of nodes static nodes running 30
// pods each. The management objects carry the managed fields an API
// server gives them, as the manager's cache holds them.
func groupsCluster(tb testing.TB, groups, nodes int) (management *cacheReader, workload *workloadReader) {
	tb.Helper()
	scheme, err := simcluster.NewScheme()
	if err != nil {
		tb.Fatal(err)
	}
	cluster := &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}}
	crd := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "simmachinetemplates." + infrav1.GroupVersion.Group,
		Labels: map[string]string{clusterv1.GroupVersion.String(): infrav1.GroupVersion.Version}}}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	objects := []client.Object{cluster, crd}
	add := func(g simcluster.NodeGroup) {
		var capacityLabels []string
		for _, k := range slices.Sorted(maps.Keys(g.NodeLabels)) {
			capacityLabels = append(capacityLabels, k+"="+g.NodeLabels[k])
		}
		g.Annotations = map[string]string{"capacity.cluster-autoscaler.kubernetes.io/labels": strings.Join(capacityLabels, ",")}
		template := g.MachineTemplate()
		template.Status.Capacity = template.Spec.Template.Spec.Capacity
		content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(template)
		if err != nil {
			tb.Fatal(err)
		}
		infra := &unstructured.Unstructured{Object: content}
		infra.SetGroupVersionKind(infrav1.GroupVersion.WithKind("SimMachineTemplate"))
		infra.SetManagedFields(managedFields("perf", "capi-sim"))
		md := g.MachineDeployment()
		md.UID = types.UID("uid-" + md.Name)
		md.Spec.Selector = metav1.LabelSelector{MatchLabels: map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name}}
		md.ManagedFields = managedFields("perf", "manager")
		ms := &clusterv1.MachineSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: md.Namespace, Name: md.Name + "-0", UID: types.UID("uid-" + md.Name + "-0"),
				Labels:          map[string]string{clusterv1.MachineDeploymentNameLabel: md.Name},
				Annotations:     md.Annotations,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: clusterv1.GroupVersion.String(), Kind: "MachineDeployment", Name: md.Name, UID: md.UID, Controller: ptr.To(true)}},
				ManagedFields:   managedFields("manager"),
			},
			Spec: clusterv1.MachineSetSpec{ClusterName: md.Spec.ClusterName, Replicas: ptr.To[int32](0), Template: md.Spec.Template},
		}
		objects = append(objects, infra, md, ms)
	}
	zones, sizes := []string{"zone-a", "zone-b", "zone-c"}, []int{4, 8, 16, 32, 64}
	for i := range groups {
		zone, cores := zones[i%len(zones)], sizes[i/len(zones)%len(sizes)]
		add(simcluster.NodeGroup{Namespace: "ns", Name: fmt.Sprintf("c-g%04d-%s-%dc", i, zone, cores), Cluster: "c", MaxSize: 20, Replicas: ptr.To[int32](0),
			CPU: fmt.Sprint(cores), Memory: fmt.Sprintf("%dGi", 4*cores), Pods: "110",
			NodeLabels: map[string]string{corev1.LabelTopologyZone: zone, "perf.capi-autoscaler.io/team": fmt.Sprintf("t%02d", i/15)}})
	}
	add(simcluster.NodeGroup{Namespace: "ns", Name: "md-burst", Cluster: "c", MaxSize: 100, Replicas: ptr.To[int32](0),
		CPU: "4", Memory: "16Gi", Pods: "110", NodeLabels: map[string]string{"pool": "burst"}})
	management = newCacheReader(scheme, objects...)

	var nodeObjects []client.Object
	var pods []*snapshot.Pod
	transform := trim.NewTransformer()
	for n := range nodes {
		name := fmt.Sprintf("static-%03d", n)
		nodeObjects = append(nodeObjects, st.Node(name, "16", "64Gi"))
		for p := range 30 {
			pods = append(pods, transform.Pod(st.Pod(fmt.Sprintf("%s-pod-%02d", name, p), "100m", "256Mi", st.OwnedBy(fmt.Sprintf("app-%d", n)), st.OnNode(name))))
		}
	}
	return management, &workloadReader{cacheReader: newCacheReader(scheme, nodeObjects...), pods: pods}
}

// managedFields are the entries the API server keeps for the managers
// that wrote an object.
func managedFields(managers ...string) []metav1.ManagedFieldsEntry {
	var entries []metav1.ManagedFieldsEntry
	for _, manager := range managers {
		entries = append(entries, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
			Time: ptr.To(metav1.NewTime(st.Now)), FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:capacity.cluster-autoscaler.kubernetes.io/labels":{}}},` +
				`"f:spec":{".":{},"f:clusterName":{},"f:replicas":{},"f:template":{".":{},"f:spec":{".":{},"f:bootstrap":{},"f:infrastructureRef":{}}}}}`)})
	}
	return entries
}

// BenchmarkGroupsLoop measures a whole loop of the engine over the
// Cluster API node groups (Provider) of a Cluster of 1,000 (or 100)
// MachineDeployments at zero and md-burst, as hack/perf --groups=1000
// --sizes=100 makes them: the management objects come from a cache as the
// manager's (cacheReader), and the workload cluster has 100 nodes of 30
// pods. "idle": no pod is pending, the loop lists the groups and finds
// nothing to do. "scale-up": one pod is pending that only md-burst's nodes
// take: the loop lists the groups, builds the templates of all of them from
// zero, estimates each and chooses md-burst. The engine is in DryRun mode,
// so that every loop plans the same scale-up from the same objects.
func BenchmarkGroupsLoop(b *testing.B) {
	for _, groups := range []int{100, 1000} {
		for _, pending := range []bool{false, true} {
			name := fmt.Sprintf("groups=%d/idle", groups)
			if pending {
				name = fmt.Sprintf("groups=%d/scale-up", groups)
			}
			b.Run(name, func(b *testing.B) { benchmarkGroupsLoop(b, groups, pending) })
		}
	}
}

func benchmarkGroupsLoop(b *testing.B, groups int, pending bool) {
	management, workload := groupsCluster(b, groups, 100)
	var want []autoscaler.Decision
	if pending {
		workload.pods = append(workload.pods, trim.NewTransformer().Pod(st.Pod("pending", "1", "1Gi", st.WithNodeSelector("pool", "burst"), st.OwnedBy("burst"))))
		want = []autoscaler.Decision{{Kind: autoscaler.ScaleUpDecision, Groups: []autoscaler.GroupDelta{{ID: "MachineDeployment/ns/md-burst", Delta: 1}},
			Pods: []types.NamespacedName{{Namespace: "default", Name: "pending"}}}}
	}
	clk := clocktesting.NewFakeClock(st.Now)
	config := autoscaler.DefaultConfig()
	config.DryRun = true
	settings, err := autoscaler.NewSettings(config, clk)
	if err != nil {
		b.Fatal(err)
	}
	owner := ownership.Owner{UID: "5e0e4c4a-0000-4000-8000-000000000001"}
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "ns/c",
		Owner:       owner,
		Settings:    settings,
		NodeGroups: NewProvider(Options{Management: &cachedClient{cache: management}, Workload: workload,
			Cluster: types.NamespacedName{Namespace: "ns", Name: "c"}, Clock: clk, Owner: owner.UID}),
		Cluster:   workload,
		Clientset: kubefake.NewClientset(),
		Recorder:  &record.FakeRecorder{},
		Clock:     clk,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := klog.NewContext(b.Context(), klog.Background().V(1))
	loop := func() autoscaler.Status {
		clk.Step(time.Second)
		status := engine.RunOnce(ctx, clk.Now())
		if status.Err != nil {
			b.Fatal(status.Err)
		}
		return status
	}
	// What a decision is, not when.
	decisions := func(status autoscaler.Status) []autoscaler.Decision {
		var result []autoscaler.Decision
		for _, decision := range status.Decisions {
			decision.Time, decision.OldestPod = time.Time{}, time.Time{}
			result = append(result, decision)
		}
		return result
	}
	status := loop()
	if got := decisions(status); !reflect.DeepEqual(got, want) || len(status.NotTriggerScaleUpReasons) > 0 {
		b.Fatalf("not the loop to measure: decisions %+v, want %+v; pods that triggered no scale-up %+v", got, want, status.NotTriggerScaleUpReasons)
	}
	b.ReportAllocs()
	cpu := benchmark.StartCPU(b)
	for b.Loop() {
		status = loop()
	}
	// CPU time tells the cost of a loop even when other processes share
	// the machine.
	cpu.Report()
	if got := decisions(status); !reflect.DeepEqual(got, want) {
		b.Fatalf("the loops decided otherwise: %+v, want %+v", got, want)
	}
}
