package view

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	autoscalingv1alpha1 "github.com/capi-autoscaler/capi-autoscaler/api/v1alpha1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/scaledown"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/cli"
	"github.com/capi-autoscaler/capi-autoscaler/internal/plugin/plugintest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

// engineReasons are the values of every constant of type scaledown.Reason
// in the engine's source: what a Kept node of an explanation can say.
func engineReasons(t *testing.T) []scaledown.Reason {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "autoscaler", "scaledown", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []scaledown.Reason
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				value := spec.(*ast.ValueSpec)
				if typ, ok := value.Type.(*ast.Ident); !ok || typ.Name != "Reason" {
					continue
				}
				for _, v := range value.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a Reason that is no string literal: the test must learn to read it", fset.Position(v.Pos()))
					}
					reason, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					reasons = append(reasons, scaledown.Reason(reason))
				}
			}
		}
	}
	if len(reasons) < 10 {
		t.Fatalf("found only %d Reasons in the scaledown package: has it moved?", len(reasons))
	}
	slices.Sort(reasons)
	return reasons
}

func TestEveryReasonHasAHint(t *testing.T) {
	for _, reason := range engineReasons(t) {
		if keptHints[reason] == "" {
			t.Errorf("scale-down keeps nodes for reason %s, but keptHints says nothing of what the user can do about it", reason)
		}
	}
}

// explainSource is where the explanations of the table tests come from.
var explainSource = source{namespace: "clusters", cluster: "prod", clusterAutoscaler: "prod"}

// TestExplainNode explains a node kept for each reason the engine gives,
// and one being removed.
func TestExplainNode(t *testing.T) {
	group := scalable.ID(scalable.KindMachineDeployment, "clusters", "prod-md-0")
	cases := []struct {
		reason  scaledown.Reason
		message string
		// unneeded nodes say since when.
		unneeded bool
	}{
		{reason: scaledown.ReasonNotAutoscaled, message: "node belongs to no autoscaled node group"},
		{reason: scaledown.ReasonScaleDownDisabledAnnotation, message: "node is annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true"},
		{reason: scaledown.ReasonNotStarted, message: "node has not started yet: it is not ready or still carries a startup taint"},
		{reason: scaledown.ReasonAwaitingPendingPods, message: "2 pending pods fit on the node and wait to be bound to it"},
		{reason: scaledown.ReasonCurrentlyBeingDeleted, message: "node is being removed"},
		{reason: scaledown.ReasonNodeGroupScaleDownBlocked, message: "node group MachineDeployment/clusters/prod-md-0: rolling out"},
		{reason: scaledown.ReasonNotUnderutilized, message: "utilization 0.81 is not below the threshold 0.50"},
		{reason: scaledown.ReasonNodeGroupMinSizeReached, message: "node group MachineDeployment/clusters/prod-md-0 is at its min size 2"},
		{reason: scaledown.ReasonMinimalResourceLimitExceeded, message: "removing it would leave 6 cores, below the minimum 8"},
		{reason: scaledown.ReasonBlockedByPod, message: "pod shop/db-0: NotSafeToEvictAnnotation: pod is annotated cluster-autoscaler.kubernetes.io/safe-to-evict=false"},
		{reason: scaledown.ReasonNoPlaceToMovePods, message: "pod shop/cache-1 fits on no other node"},
		{reason: scaledown.ReasonNotUnneededLongEnough, message: "unneeded for 4m, removable at 10:06:00", unneeded: true},
		{reason: scaledown.ReasonNotUnreadyLongEnough, message: "unready and unneeded for 5m, removable at 10:15:00", unneeded: true},
		{reason: scaledown.ReasonScaleDownInCooldown, message: "scale-down paused until 2030-01-02T10:08:00Z after a scale-up"},
		{reason: scaledown.ReasonParallelismLimitReached, message: "as many nodes as allowed are being removed"},
		{reason: scaledown.ReasonAwaitingReplacement, message: "consolidation: replacing nodes prod-md-0-a, prod-md-0-b with 1 × MachineDeployment/clusters/prod-md-large saves 0.1/h: waiting for the new nodes to be Ready (0 of 1)"},
		{reason: scaledown.ReasonReplacementUnderWay, message: "the node is a new node of a replacement under way"},
		{reason: scaledown.ReasonConsolidationBudget, message: `consolidation is held by the disruption budget spec.consolidation.budgets[0] (nodes 0, schedule "0 9 * * 1-5" for 8h0m0s, window 2030-01-02T09:00:00Z to 2030-01-02T17:00:00Z)`},
	}
	var covered []scaledown.Reason
	var all bytes.Buffer
	explanation := &autoscalingv1alpha1.Explanation{LoopTime: *plugintest.At(-3 * time.Second)}
	for _, c := range cases {
		covered = append(covered, c.reason)
		t.Run(string(c.reason), func(t *testing.T) {
			nodeGroup := group
			if c.reason == scaledown.ReasonNotAutoscaled {
				nodeGroup = ""
			}
			node := plugintest.Node("prod-md-0-"+strings.ToLower(string(c.reason)), nodeGroup, plugintest.Percent(23), autoscalingv1alpha1.NodeKept, string(c.reason), c.message)
			if c.unneeded {
				node.UnneededSince = plugintest.At(-4 * time.Minute)
			}
			var out bytes.Buffer
			writeNodeExplanation(&out, explainSource, explanation, &node, cli.Palette{}, plugintest.TestNow)
			want := []string{"is kept: " + string(c.reason) + ".", c.message, "utilization:    23%", keptHints[c.reason]}
			if nodeGroup != "" {
				want = append(want, "node group:     MachineDeployment prod-md-0")
			}
			for _, want := range want {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the explanation lacks %q:\n%s", want, out.String())
				}
			}
			if got := strings.Contains(out.String(), "unneeded since: 09:56:00 (4m ago)"); got != c.unneeded {
				t.Errorf("the explanation shows since when the node is unneeded: %v, want %v:\n%s", got, c.unneeded, out.String())
			}
			all.Write(out.Bytes())
			all.WriteString("\n")
		})
	}
	slices.Sort(covered)
	if reasons := engineReasons(t); !slices.Equal(covered, reasons) {
		t.Errorf("the cases cover reasons %v; the engine gives %v", covered, reasons)
	}

	removing := plugintest.Node("prod-md-0-empty", group, plugintest.Percent(0), autoscalingv1alpha1.NodeRemoving, "", "")
	var out bytes.Buffer
	writeNodeExplanation(&out, explainSource, explanation, &removing, cli.Palette{}, plugintest.TestNow)
	if !strings.Contains(out.String(), "Node prod-md-0-empty is being removed.") || !strings.Contains(out.String(), "what to do:") {
		t.Errorf("the explanation of a node being removed:\n%s", out.String())
	}
	all.Write(out.Bytes())
	plugintest.Golden(t, "explain/nodes.txt", all.String())
}

// TestExplainPod explains a pod of each outcome of the pending pods.
func TestExplainPod(t *testing.T) {
	md0, md1 := scalable.ID(scalable.KindMachineDeployment, "clusters", "prod-md-0"), scalable.ID(scalable.KindMachineDeployment, "clusters", "prod-md-1")
	cases := []struct {
		outcome autoscalingv1alpha1.PendingPodsOutcome
		dryRun  bool
		group   autoscalingv1alpha1.PendingPodsExplanation
		want    []string
	}{
		{
			outcome: autoscalingv1alpha1.PendingPodsTriggeredScaleUp,
			group:   autoscalingv1alpha1.PendingPodsExplanation{Pods: []string{"shop/web-0", "shop/web-1"}, Count: 4, NodeGroup: md0},
			want:    []string{"Pod shop/web-0 triggered a scale-up of MachineDeployment prod-md-0.", "same outcome:   3 others: shop/web-1 and 2 more"},
		},
		{
			outcome: autoscalingv1alpha1.PendingPodsTriggeredScaleUp,
			dryRun:  true,
			group:   autoscalingv1alpha1.PendingPodsExplanation{Pods: []string{"shop/web-0"}, Count: 1, NodeGroup: md0},
			want:    []string{"Pod shop/web-0 would trigger a scale-up (DryRun mode) of MachineDeployment prod-md-0."},
		},
		{
			outcome: autoscalingv1alpha1.PendingPodsWaitForNode,
			group:   autoscalingv1alpha1.PendingPodsExplanation{Pods: []string{"shop/web-0"}, Count: 1, NodeGroup: md0, Node: "prod-md-0-x7k2p"},
			want:    []string{"Pod shop/web-0 waits for a node: it fits on node prod-md-0-x7k2p of MachineDeployment prod-md-0, which exists or is on its way.", "what to do:"},
		},
		{
			outcome: autoscalingv1alpha1.PendingPodsNotTriggerScaleUp,
			group: autoscalingv1alpha1.PendingPodsExplanation{Pods: []string{"shop/web-0", "shop/web-1"}, Count: 2, NodeGroupReasons: []autoscalingv1alpha1.NodeGroupReasons{
				{NodeGroup: md0, Reasons: []string{"max node group size reached"}},
				{NodeGroup: md1, Reasons: []string{"Insufficient cpu", "node(s) had untolerated taint {gpu: true}"}},
			}},
			want: []string{
				"Pod shop/web-0 triggered no scale-up: no node group can help it.",
				"    MachineDeployment prod-md-0: max node group size reached",
				"    MachineDeployment prod-md-1: Insufficient cpu; node(s) had untolerated taint {gpu: true}",
				"same outcome:   1 other: shop/web-1",
			},
		},
	}
	var all bytes.Buffer
	for _, c := range cases {
		t.Run(string(c.outcome), func(t *testing.T) {
			c.group.Outcome = c.outcome
			explanation := &autoscalingv1alpha1.Explanation{LoopTime: *plugintest.At(-3 * time.Second), DryRun: c.dryRun, PendingPods: []autoscalingv1alpha1.PendingPodsExplanation{c.group}}
			var out bytes.Buffer
			if err := explainPod(&out, "shop/web-0", []published{{source: explainSource, explanation: explanation}}, cli.Palette{}, plugintest.TestNow); err != nil {
				t.Fatal(err)
			}
			for _, want := range append(c.want, "cluster:        Cluster clusters/prod (ClusterAutoscaler prod), loop at 09:59:57 (3s ago)") {
				if !strings.Contains(out.String(), want) {
					t.Errorf("the explanation lacks %q:\n%s", want, out.String())
				}
			}
			all.Write(out.Bytes())
			all.WriteString("\n")
		})
	}
	plugintest.Golden(t, "explain/pods.txt", all.String())
}

// TestExplainCommands explains pods and nodes of the envtest fixtures,
// searching every namespace or the Cluster of --cluster.
func TestExplainCommands(t *testing.T) {
	pendingCluster("explain-pending").Create(t)
	healthyCluster("explain-healthy").Create(t)
	failingCluster("explain-failing").Create(t)

	out, _, err := plugintest.RunPlugin(t, "explain", "pod", "shop/web-1", "-n", "explain-pending")
	if err != nil {
		t.Fatal(err)
	}
	plugintest.Golden(t, "explain/pod-command.txt", out)
	// Without -n or --cluster, every namespace.
	out, _, err = plugintest.RunPlugin(t, "explain", "pod", "shop/train-1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Cluster explain-pending/shop") {
		t.Errorf("explain without -n or --cluster does not find the pod in namespace explain-pending:\n%s", out)
	}

	out, _, err = plugintest.RunPlugin(t, "explain", "node", "prod-md-0-b", "--cluster", "explain-healthy/prod")
	if err != nil {
		t.Fatal(err)
	}
	plugintest.Golden(t, "explain/node-command.txt", out)

	// -n with a Cluster name.
	if _, _, err := plugintest.RunPlugin(t, "explain", "node", "prod-md-0-b", "-n", "explain-healthy", "--cluster", "prod"); err != nil {
		t.Error(err)
	}

	_, _, err = plugintest.RunPlugin(t, "explain", "pod", "shop/web-4", "-n", "explain-pending")
	plugintest.RequireExitError(t, err, "pod shop/web-4 is in no explanation:\n"+
		"  Cluster explain-pending/shop (ClusterAutoscaler shop): not pending in the loop at 09:59:58 (2s ago), or one of the 2 pods the explanation omits\n"+
		"`kubectl describe pod -n shop web-4` in the workload cluster says what became of it")

	_, _, err = plugintest.RunPlugin(t, "explain", "node", "edge-md-0-a", "--cluster", "explain-failing/edge")
	plugintest.RequireExitError(t, err, "node edge-md-0-a is in no explanation:\n"+
		"  Cluster explain-failing/edge (ClusterAutoscaler edge): no explanation published yet (ConfigMap edge-explanation)")

	_, _, err = plugintest.RunPlugin(t, "explain", "node", "x", "--cluster", "explain-healthy/nothing")
	plugintest.RequireExitError(t, err, "no ClusterAutoscaler for Cluster nothing in namespace explain-healthy")

	_, _, err = plugintest.RunPlugin(t, "explain", "pod", "web-0")
	plugintest.RequireExitError(t, err, "a pod is NAMESPACE/NAME of the workload cluster")
}
