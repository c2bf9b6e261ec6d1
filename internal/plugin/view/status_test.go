package view

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/clusterapi"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// healthyCluster runs well: every condition True, a group with nodes being
// scaled down and a group at zero.
func healthyCluster(namespace string) plugintest.Fixture {
	mdGeneral, mpLarge := scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-0"), scalable.ID(scalable.KindMachinePool, namespace, "prod-mp-0")
	return plugintest.Fixture{
		CA: plugintest.NewClusterAutoscaler(namespace, "prod", autoscalingv1alpha1.ClusterAutoscalerStatus{
			Conditions:     plugintest.HealthyConditions(),
			NodeGroupCount: 2,
			NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
				{ID: mdGeneral, MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](6), TargetSize: 3, Registered: 3, Ready: 3,
					Price: "0.192", PriceSource: autoscalingv1alpha1.NodeGroupPriceSource},
				{ID: mpLarge, MinSize: ptr.To[int32](0), MaxSize: ptr.To[int32](2), Price: "0.407664", PriceSource: autoscalingv1alpha1.DefaultPriceSource},
			},
			Nodes: 4, ReadyNodes: 4,
			LastScaleUpTime:   plugintest.At(-25 * time.Minute),
			LastScaleDownTime: plugintest.At(-2 * time.Minute),
			LastLoopTime:      plugintest.At(-5 * time.Second),
		}),
		Explanation: &autoscalingv1alpha1.Explanation{
			LoopTime: *plugintest.At(-5 * time.Second),
			Nodes: []autoscalingv1alpha1.NodeExplanation{
				plugintest.Node("prod-md-0-a", mdGeneral, plugintest.Percent(72), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotUnderutilized), "utilization 0.72 is not below the threshold 0.50"),
				{Name: "prod-md-0-b", NodeGroup: mdGeneral, UtilizationPercent: plugintest.Percent(31), ScaleDown: autoscalingv1alpha1.NodeKept,
					Reason: string(scaledown.ReasonNotUnneededLongEnough), Message: "unneeded since 09:58:00, removable at 10:08:00", UnneededSince: plugintest.At(-2 * time.Minute)},
				plugintest.Node("prod-md-0-c", mdGeneral, plugintest.Percent(0), autoscalingv1alpha1.NodeRemoving, "", ""),
				plugintest.Node("prod-control-plane-x", "", nil, autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotAutoscaled), "node belongs to no autoscaled node group"),
			},
		},
		Events: []*eventsv1.Event{
			plugintest.Event(cli.ClusterAutoscalerKind, "prod", "Normal", "AutoscalingStarted", "Started autoscaling Cluster "+namespace+"/prod", -time.Hour),
			plugintest.Event("MachineDeployment", "prod-md-0", "Normal", autoscaler.EventScaledUpGroup, "Scale-up: setting group "+mdGeneral+" size to 4 instead of 3 (max: 6)", -25*time.Minute),
			plugintest.Event("MachineDeployment", "prod-md-0", "Normal", autoscaler.EventScaledUpGroup, "Scale-up: setting group "+mdGeneral+" size to 3 instead of 2 (max: 6)", -40*time.Minute),
			// Events of other objects are no decision of this Cluster's,
			// and Cluster API's events none of the autoscaler's.
			plugintest.Event("MachineDeployment", "other-md-0", "Normal", autoscaler.EventScaledUpGroup, "Scale-up of another Cluster", -time.Minute),
			fromClusterAPI(plugintest.Event("MachineDeployment", "prod-md-0", "Normal", "SuccessfulScale", "Scaled up MachineSet prod-md-0-x7k2p: 3 -> 4", -25*time.Minute)),
		},
	}
}

// failingCluster cannot reach its workload cluster and has published no
// explanation.
func failingCluster(namespace string) plugintest.Fixture {
	return plugintest.Fixture{
		CA: plugintest.NewClusterAutoscaler(namespace, "edge", autoscalingv1alpha1.ClusterAutoscalerStatus{
			Conditions: []metav1.Condition{
				plugintest.Condition(autoscalingv1alpha1.ReadyCondition, metav1.ConditionFalse, autoscalingv1alpha1.LoopFailedReason,
					`listing nodes: Get "https://edge.example:6443/api/v1/nodes": dial tcp 10.0.0.7:6443: connect: connection refused`),
				plugintest.Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.WorkloadClusterUnreachableReason,
					"The workload cluster cannot be reached"),
				plugintest.Condition(autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "The current spec is applied"),
			},
			NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
				{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "edge-md-0"), MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](3), TargetSize: 1, Registered: 1, Ready: 1},
			},
			Nodes: 1, ReadyNodes: 1,
			LastLoopTime: plugintest.At(-12 * time.Minute),
		}),
		Events: []*eventsv1.Event{
			plugintest.Event(cli.ClusterAutoscalerKind, "edge", "Warning", autoscalingv1alpha1.WorkloadClusterUnreachableReason, "Cannot reach the workload cluster of Cluster "+namespace+"/edge", -10*time.Minute),
		},
	}
}

// backoffCluster has a group backing off after failed scale-ups and a
// group with a bad annotation.
func backoffCluster(namespace string) plugintest.Fixture {
	return plugintest.Fixture{
		CA: plugintest.NewClusterAutoscaler(namespace, "gpu", autoscalingv1alpha1.ClusterAutoscalerStatus{
			// A rollback of an atomic scale-up that gave up.
			Conditions: append(plugintest.HealthyConditions(), plugintest.Condition(autoscalingv1alpha1.AtomicScaleUpsRolledBackCondition, metav1.ConditionFalse,
				autoscalingv1alpha1.RollbackIncompleteReason, "ProvisioningRequest default/train: the rollback could not remove gpu-md-a100-x7k2p-abcde of "+
					scalable.ID(scalable.KindMachineDeployment, namespace, "gpu-md-a100")+" within 10m0s (MachineDeployment is rolling out)")),
			NodeGroupCount: 1,
			NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
				{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "gpu-md-a100"), MinSize: ptr.To[int32](0), MaxSize: ptr.To[int32](4), TargetSize: 1, Upcoming: 1,
					BackoffUntil: plugintest.At(7 * time.Minute), BackoffReason: "1 instance(s) of " + scalable.ID(scalable.KindMachineDeployment, namespace, "gpu-md-a100") + " failed: no capacity for a100 in zone b"},
				{ID: scalable.ID(scalable.KindMachineSet, namespace, "gpu-ms-legacy"),
					Problem: `annotation cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size="two" is not a number`},
			},
			Nodes: 2, ReadyNodes: 2,
			LastScaleUpTime: plugintest.At(-8 * time.Minute),
			LastLoopTime:    plugintest.At(-3 * time.Second),
		}),
		Explanation: &autoscalingv1alpha1.Explanation{
			LoopTime: *plugintest.At(-3 * time.Second),
			Nodes: []autoscalingv1alpha1.NodeExplanation{
				plugintest.Node("gpu-control-plane-a", "", nil, autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotAutoscaled), "node belongs to no autoscaled node group"),
				plugintest.Node("gpu-ms-legacy-q", "", nil, autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotAutoscaled), "node belongs to no autoscaled node group"),
			},
		},
		Events: []*eventsv1.Event{
			plugintest.WithCount(plugintest.Event("MachineDeployment", "gpu-md-a100", "Warning", autoscaler.EventFailedToScaleUpGroup,
				"1 instance(s) of "+scalable.ID(scalable.KindMachineDeployment, namespace, "gpu-md-a100")+" failed: no capacity for a100 in zone b", -2*time.Minute), 3, -8*time.Minute),
			plugintest.Event("MachineSet", "gpu-ms-legacy", "Warning", clusterapi.ReasonInvalidAnnotation,
				`annotation cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size="two" is not a number`, -30*time.Minute),
		},
	}
}

// sleepingCluster has a development group asleep for the night, and a
// group warmed up for office hours tomorrow.
func sleepingCluster(namespace string) plugintest.Fixture {
	f := healthyCluster(namespace)
	f.CA.Status.Conditions = append(f.CA.Status.Conditions, plugintest.Condition(autoscalingv1alpha1.ScheduledMinimumsValidCondition, metav1.ConditionFalse,
		autoscalingv1alpha1.InvalidScheduledMinimumReason, `scheduled minimum mars is ignored: unknown time zone "Mars/Olympus_Mons"`))
	f.CA.Status.NodeGroups = []autoscalingv1alpha1.NodeGroupStatus{
		{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "md-dev"), MinSize: ptr.To[int32](0), MaxSize: ptr.To[int32](5), TargetSize: 1, Registered: 1, Ready: 1,
			ScheduledMinimum: &autoscalingv1alpha1.NodeGroupScheduledMinimum{AnnotatedMinSize: 2,
				Active: []autoscalingv1alpha1.ScheduledWindow{{Name: "night", Opens: *plugintest.At(-2 * time.Hour), Closes: *plugintest.At(9 * time.Hour)}}}},
		{ID: scalable.ID(scalable.KindMachineDeployment, namespace, "md-web"), MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](10), TargetSize: 1, Registered: 1, Ready: 1,
			ScheduledMinimum: &autoscalingv1alpha1.NodeGroupScheduledMinimum{AnnotatedMinSize: 1,
				Next: &autoscalingv1alpha1.ScheduledWindow{Name: "office-hours", MinSize: 5, Opens: *plugintest.At(12 * time.Hour), Closes: *plugintest.At(22 * time.Hour)}}},
	}
	return f
}

// backlogCluster runs well with more pending pods than a loop plans for:
// the last loop left some for the next.
func backlogCluster(namespace string) plugintest.Fixture {
	f := healthyCluster(namespace)
	f.CA.Status.UnschedulablePods, f.CA.Status.PodsLeftForNextLoop = 50000, 40000
	meta.SetStatusCondition(&f.CA.Status.Conditions, plugintest.Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionTrue,
		autoscalingv1alpha1.RunningReason, "40000 pending pod(s) left for the next loop: more than spec.maxPendingPodsPerLoop were pending"))
	return f
}

// pendingCluster has pods that triggered a scale-up, pods that wait for a
// node and pods no group can help, and a capacity buffer.
func pendingCluster(namespace string) plugintest.Fixture {
	md0, md1 := scalable.ID(scalable.KindMachineDeployment, namespace, "shop-md-0"), scalable.ID(scalable.KindMachineDeployment, namespace, "shop-md-1")
	return plugintest.Fixture{
		CA: plugintest.NewClusterAutoscaler(namespace, "shop", autoscalingv1alpha1.ClusterAutoscalerStatus{
			Conditions:     plugintest.HealthyConditions(),
			NodeGroupCount: 2,
			NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
				{ID: md0, MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](3), TargetSize: 3, Registered: 2, Ready: 2, Upcoming: 1},
				{ID: md1, MinSize: ptr.To[int32](0), MaxSize: ptr.To[int32](2)},
			},
			Nodes: 2, ReadyNodes: 2,
			UnschedulablePods: 6,
			NotTriggerScaleUpReasons: []autoscalingv1alpha1.PodReasonCount{
				{Reason: "pod didn't trigger scale-up: 1 max node group size reached", Pods: 2},
				{Reason: "pod didn't trigger scale-up: 2 Insufficient nvidia.com/gpu", Pods: 2},
			},
			CapacityBuffers: []autoscalingv1alpha1.CapacityBufferRoom{
				{Name: "shop/warm-pool", Replicas: 3, Held: 2, Upcoming: 1},
			},
			LastScaleUpTime: plugintest.At(-20 * time.Second),
			LastLoopTime:    plugintest.At(-2 * time.Second),
		}),
		Explanation: &autoscalingv1alpha1.Explanation{
			LoopTime: *plugintest.At(-2 * time.Second),
			PendingPods: []autoscalingv1alpha1.PendingPodsExplanation{
				{Pods: []string{"shop/web-0", "shop/web-1", "shop/web-2"}, Count: 5, Outcome: autoscalingv1alpha1.PendingPodsTriggeredScaleUp, NodeGroup: md0},
				{Pods: []string{"shop/api-0"}, Count: 1, Outcome: autoscalingv1alpha1.PendingPodsWaitForNode, NodeGroup: md0, Node: "shop-md-0-new"},
				{Pods: []string{"shop/train-0", "shop/train-1"}, Count: 2, Outcome: autoscalingv1alpha1.PendingPodsNotTriggerScaleUp,
					NodeGroupReasons: []autoscalingv1alpha1.NodeGroupReasons{
						{NodeGroup: md0, Reasons: []string{"max node group size reached"}},
						{NodeGroup: md1, Reasons: []string{"Insufficient nvidia.com/gpu", "node(s) didn't match Pod's node affinity/selector"}},
					}},
			},
			Nodes: []autoscalingv1alpha1.NodeExplanation{
				plugintest.Node("shop-md-0-a", md0, plugintest.Percent(95), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNotUnderutilized), "utilization 0.95 is not below the threshold 0.50"),
				plugintest.Node("shop-md-0-b", md0, plugintest.Percent(40), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonAwaitingPendingPods), "1 pending pods fit on the node and wait to be bound to it"),
			},
			OmittedPods: 2,
		},
		Events: []*eventsv1.Event{
			plugintest.Event("MachineDeployment", "shop-md-0", "Normal", autoscaler.EventScaledUpGroup, "Scale-up: setting group "+md0+" size to 3 instead of 2 (max: 3)", -20*time.Second),
		},
	}
}

// twoClusters are two Clusters in one namespace.
func twoClusters() []plugintest.Fixture {
	alpha := healthyCluster("two")
	alpha.CA = plugintest.NewClusterAutoscaler("two", "alpha", autoscalingv1alpha1.ClusterAutoscalerStatus{
		Conditions: plugintest.HealthyConditions(),
		NodeGroups: []autoscalingv1alpha1.NodeGroupStatus{
			{ID: "MachineDeployment/two/alpha-md-0", MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](2), TargetSize: 1, Registered: 1, Ready: 1},
		},
		Nodes: 1, ReadyNodes: 1, LastLoopTime: plugintest.At(-4 * time.Second),
	})
	alpha.Explanation = &autoscalingv1alpha1.Explanation{LoopTime: *plugintest.At(-4 * time.Second), Nodes: []autoscalingv1alpha1.NodeExplanation{
		plugintest.Node("alpha-md-0-a", "MachineDeployment/two/alpha-md-0", plugintest.Percent(55), autoscalingv1alpha1.NodeKept, string(scaledown.ReasonNodeGroupMinSizeReached), "node group MachineDeployment/two/alpha-md-0 is at its min size 1"),
	}}
	alpha.Events = nil
	beta := failingCluster("two")
	beta.CA = plugintest.NewClusterAutoscaler("two", "beta", autoscalingv1alpha1.ClusterAutoscalerStatus{
		Conditions: []metav1.Condition{
			plugintest.Condition(autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The autoscaling loop runs"),
			plugintest.Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.NoNodeGroupsReason,
				"No MachineDeployment, MachineSet or MachinePool of Cluster two/beta has the autoscaler's size annotations"),
			plugintest.Condition(autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason, "0 of 1 nodes unready"),
			plugintest.Condition(autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "The current spec is applied"),
		},
		Nodes: 1, ReadyNodes: 1, LastLoopTime: plugintest.At(-40 * time.Second),
	})
	beta.Events = nil
	return []plugintest.Fixture{beta, alpha}
}

// dryRunCluster runs in DryRun mode beside another autoscaler: it scales
// nothing and shows what it would have done.
func dryRunCluster(namespace string) plugintest.Fixture {
	md0 := scalable.ID(scalable.KindMachineDeployment, namespace, "prod-md-0")
	f := plugintest.Fixture{CA: plugintest.NewClusterAutoscaler(namespace, "prod", autoscalingv1alpha1.ClusterAutoscalerStatus{
		Conditions: []metav1.Condition{
			plugintest.Condition(autoscalingv1alpha1.ReadyCondition, metav1.ConditionTrue, autoscalingv1alpha1.RunningReason, "The autoscaling loop runs"),
			plugintest.Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.DryRunReason,
				"DryRun mode: every loop plans, and what it would do is published in status.dryRunDecisions and in events; nothing in the cluster is changed"),
			plugintest.Condition(autoscalingv1alpha1.ClusterHealthyCondition, metav1.ConditionTrue, autoscalingv1alpha1.HealthyReason, "0 of 2 nodes unready"),
			plugintest.Condition(autoscalingv1alpha1.ConfigurationAppliedCondition, metav1.ConditionTrue, autoscalingv1alpha1.AppliedReason, "The current spec is applied"),
		},
		NodeGroupCount: 1,
		NodeGroups:     []autoscalingv1alpha1.NodeGroupStatus{{ID: md0, MinSize: ptr.To[int32](1), MaxSize: ptr.To[int32](6), TargetSize: 2, Registered: 2, Ready: 2}},
		Nodes:          2, ReadyNodes: 2, UnschedulablePods: 3,
		LastLoopTime: plugintest.At(-5 * time.Second),
		DryRunDecisions: []autoscalingv1alpha1.DryRunDecision{
			{Time: *plugintest.At(-3 * time.Minute), Kind: autoscalingv1alpha1.ScaleDownDecision,
				NodeGroups: []autoscalingv1alpha1.NodeGroupDelta{{ID: md0, Delta: -1}}, Nodes: []string{"prod-md-0-c"}},
			{Time: *plugintest.At(-20 * time.Second), Kind: autoscalingv1alpha1.ScaleUpDecision,
				NodeGroups: []autoscalingv1alpha1.NodeGroupDelta{{ID: md0, Delta: 2}}, Pods: []string{"shop/web-0", "shop/web-1", "shop/web-2"}, PodCount: 3,
				OldestPodCreationTime: plugintest.At(-25 * time.Second)},
			{Time: *plugintest.At(-20 * time.Second), Kind: autoscalingv1alpha1.ScaleUpDecision,
				NodeGroups: []autoscalingv1alpha1.NodeGroupDelta{{ID: md0, Delta: 3}}, ProvisioningRequest: "shop/batch"},
			{Time: *plugintest.At(-10 * time.Second), Kind: autoscalingv1alpha1.AnswerDecision, ProvisioningRequest: "shop/check",
				Answer: &autoscalingv1alpha1.ProvisioningRequestAnswer{ConditionType: "Provisioned", Status: metav1.ConditionTrue,
					Reason: "CapacityIsFound", Message: "The pods fit in the cluster as it is; the capacity is booked for them"}},
		},
	})}
	f.CA.Spec.Mode = autoscalingv1alpha1.DryRunMode
	return f
}

// TestStatusGolden prints the status of each kind of Cluster as text, JSON
// and YAML, and its live view, and compares them with the golden files.
func TestStatusGolden(t *testing.T) {
	scenarios := []struct {
		name      string
		fixtures  []plugintest.Fixture
		namespace string
		args      []string
	}{
		{name: "healthy", fixtures: []plugintest.Fixture{healthyCluster("healthy")}, namespace: "healthy"},
		{name: "failing", fixtures: []plugintest.Fixture{failingCluster("failing")}, namespace: "failing"},
		{name: "backoff", fixtures: []plugintest.Fixture{backoffCluster("backoff")}, namespace: "backoff"},
		{name: "pending", fixtures: []plugintest.Fixture{pendingCluster("pending")}, namespace: "pending"},
		{name: "backlog", fixtures: []plugintest.Fixture{backlogCluster("backlog")}, namespace: "backlog"},
		{name: "two-clusters", fixtures: twoClusters(), namespace: "two"},
		{name: "dry-run", fixtures: []plugintest.Fixture{dryRunCluster("dry-run")}, namespace: "dry-run"},
		{name: "sleeping", fixtures: []plugintest.Fixture{sleepingCluster("sleeping")}, namespace: "sleeping"},
		// A Cluster as argument keeps that Cluster only.
		{name: "one-of-two", namespace: "default", args: []string{"two/beta"}},
	}
	for _, s := range scenarios {
		for _, f := range s.fixtures {
			f.Create(t)
		}
		for _, format := range []struct{ suffix, flag string }{{"txt", ""}, {"json", "json"}, {"yaml", "yaml"}} {
			t.Run(s.name+"/"+format.suffix, func(t *testing.T) {
				args := append([]string{"status", "-n", s.namespace, "-o", format.flag}, s.args...)
				out, errOut, err := plugintest.RunPlugin(t, args...)
				if err != nil || errOut != "" {
					t.Fatalf("status failed: %v\n%s", err, errOut)
				}
				plugintest.Golden(t, "status/"+s.name+"."+format.suffix, out)
			})
		}
		t.Run(s.name+"/live", func(t *testing.T) {
			scope := cli.Scope{Namespace: s.namespace}
			if len(s.args) > 0 {
				var err error
				if scope, err = cli.ClusterScope(s.args[0], s.namespace); err != nil {
					t.Fatal(err)
				}
			}
			view, err := Observe(context.Background(), plugintest.API.Client, scope)
			if err != nil {
				t.Fatal(err)
			}
			plugintest.Golden(t, "live/"+s.name+".txt", strings.Join(LiveFrame(view, 100, false, plugintest.TestNow), "\n")+"\n")
		})
	}
}

func TestStatusAllNamespaces(t *testing.T) {
	healthyCluster("all-namespaces-a").Create(t)
	out, _, err := plugintest.RunPlugin(t, "status", "-A")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Cluster all-namespaces-a/prod") {
		t.Errorf("status -A does not show the Cluster of namespace all-namespaces-a:\n%s", out)
	}
}

func TestStatusErrors(t *testing.T) {
	out, errOut, err := plugintest.RunPlugin(t, "status", "-n", "empty")
	if err != nil || out != "" || !strings.Contains(errOut, "No ClusterAutoscaler in namespace empty.") {
		t.Errorf("status of an empty namespace: err %v, stdout %q, stderr %q", err, out, errOut)
	}
	_, _, err = plugintest.RunPlugin(t, "status", "empty/nothing")
	plugintest.RequireExitError(t, err, "no ClusterAutoscaler for Cluster nothing in namespace empty")
	_, _, err = plugintest.RunPlugin(t, "status", "-o", "wide")
	plugintest.RequireExitError(t, err, "-o must be json or yaml")
}

func TestStatusColor(t *testing.T) {
	failingCluster("color").Create(t)
	t.Setenv("NO_COLOR", "1")
	out, _, err := plugintest.RunPlugin(t, "status", "-n", "color", "--color", "always")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "\x1b[31m✗ Ready\x1b[0m") {
		t.Errorf("--color=always does not colour a failing condition red, whatever NO_COLOR says:\n%q", out)
	}
	out, _, err = plugintest.RunPlugin(t, "status", "-n", "color", "--color", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("--color=auto colours output that is no terminal:\n%q", out)
	}
}

// TestStatusPrintsClusterTextHarmlessly: whoever writes a condition
// message (any writer of the ClusterAutoscaler's status, or text the
// manager copies from a workload cluster) cannot drive the operator's
// terminal through the plugin: escape sequences other than colour, and
// carriage returns, are shown escaped.
func TestStatusPrintsClusterTextHarmlessly(t *testing.T) {
	g := NewWithT(t)
	conditions := plugintest.HealthyConditions()
	conditions[1] = plugintest.Condition(autoscalingv1alpha1.ScalingActiveCondition, metav1.ConditionFalse, autoscalingv1alpha1.DryRunReason,
		"cluster \x1b]0;owned\x07paused\x1b[2J\x1b[Hall good\r\u009b1A\x1b[31mred")
	ca := plugintest.NewClusterAutoscaler("terminal", "prod", autoscalingv1alpha1.ClusterAutoscalerStatus{Conditions: conditions, LastLoopTime: plugintest.At(-5 * time.Second)})
	plugintest.Fixture{CA: ca}.Create(t)

	out, _, err := plugintest.RunPlugin(t, "status", "-n", "terminal", "--color", "never")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring(`cluster \u001b]0;owned\u0007paused\u001b[2J\u001b[Hall good\u000d\u009b1A` + "\x1b[31mred"))
	g.Expect(out).NotTo(ContainSubstring("\x1b]"), "no operating system command reaches the terminal")
	g.Expect(out).NotTo(ContainSubstring("\x1b[2J"), "nor a clear screen")
	g.Expect(out).NotTo(ContainSubstring("\r"), "nor a carriage return")
}

// TestStatusWithNarrowCredentials shows what a user may read, and says what
// it may not.
func TestStatusWithNarrowCredentials(t *testing.T) {
	healthyCluster("narrow").Create(t)
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: "narrow", Name: "clusterautoscaler-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{autoscalingv1alpha1.GroupVersion.Group}, Resources: []string{"clusterautoscalers"}, Verbs: []string{"get", "list"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: "narrow", Name: "clusterautoscaler-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "reader"}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := plugintest.API.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := plugintest.RunPluginAs(t, "reader", "status", "-n", "narrow")
	if err != nil {
		t.Fatal(err)
	}
	// explain searches every namespace, which the reader may not list.
	_, _, explainErr := plugintest.RunPluginAs(t, "reader", "explain", "node", "prod-md-0-a")
	plugintest.RequireExitError(t, explainErr, "is forbidden: User \"reader\" cannot list resource \"clusterautoscalers\" in API group \"autoscaling.cluster.x-k8s.io\" at the cluster scope; name the namespace with -n, or the Cluster with --cluster")
	for _, want := range []string{
		"MachineDeployment prod-md-0  min 1  target 3",
		`cannot show everything: cannot read the explanation, ConfigMap narrow/prod-explanation: configmaps "prod-explanation" is forbidden`,
		`cannot show everything: cannot read events: listing the events of namespace narrow: events.events.k8s.io is forbidden`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the status lacks %q:\n%s", want, out)
		}
	}
}

// fromClusterAPI makes e an event of Cluster API's MachineDeployment
// controller.
func fromClusterAPI(e *eventsv1.Event) *eventsv1.Event {
	e.ReportingController, e.ReportingInstance = "machinedeployment-controller", "capi-controller-manager"
	return e
}
