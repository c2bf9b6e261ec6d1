package framework

import (
	"context"
	"fmt"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// nodeAgent stands in for what runs on a real Node beside its kubelet (a
// CSI node-driver-registrar, a DRA kubelet plugin): kwok's Nodes have
// none. As each selected Node registers, the agent publishes the Node's
// objects, then removes the Node's startup taint, if it has one, which
// keeps pods off the Node until kube-scheduler sees what the agent
// published.
type nodeAgent struct {
	// name says who the agent is in the spec's log.
	name string
	// client talks to the workload cluster.
	client client.Client
	// nodeLabels select the Nodes the agent runs on.
	nodeLabels map[string]string
	// startupTaint, when set, is removed once the Node's objects are
	// published.
	startupTaint string
	// delay is how long after the Node is Ready the agent publishes, as an
	// agent that starts on the Node with it takes a while.
	delay time.Duration
	// publish returns the objects to create for a Node.
	publish func(node *corev1.Node) []client.Object
}

// startNodeAgent runs agent until the spec ends, then deletes the objects
// it published.
func startNodeAgent(ctx context.Context, agent nodeAgent) {
	agentCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	published := map[string][]client.Object{}
	go func() {
		defer close(done)
		ticker := time.NewTicker(PollInterval)
		defer ticker.Stop()
		for {
			// Failures are retried at the next tick, as a node agent
			// would; the spec fails if the pods never run.
			if err := agent.reconcile(agentCtx, published); err != nil && agentCtx.Err() == nil {
				fmt.Fprintf(GinkgoWriter, "%s: %v\n", agent.name, err)
			}
			select {
			case <-agentCtx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	DeferCleanup(func(ctx context.Context) {
		stop()
		<-done
		for _, objects := range published {
			for _, obj := range objects {
				Expect(client.IgnoreNotFound(agent.client.Delete(ctx, obj))).To(Succeed())
			}
		}
	})
}

// reconcile publishes the objects of the selected Nodes that have none
// yet, recording them in published, and removes the startup taint of the
// Nodes whose objects were published at an earlier tick.
func (a nodeAgent) reconcile(ctx context.Context, published map[string][]client.Object) error {
	nodes := &corev1.NodeList{}
	if err := a.client.List(ctx, nodes, client.MatchingLabels(a.nodeLabels)); err != nil {
		return err
	}
	for i := range nodes.Items {
		node := &nodes.Items[i]
		if node.DeletionTimestamp != nil {
			continue
		}
		if _, ok := published[node.Name]; !ok {
			if !readyFor(node, a.delay) {
				continue
			}
			objects := a.publish(node)
			for _, obj := range objects {
				if err := a.client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
					return err
				}
			}
			published[node.Name] = objects
			// The taint goes at the next tick: kube-scheduler must see the
			// objects before it sees the Node schedulable.
			continue
		}
		if a.startupTaint == "" || !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == a.startupTaint }) {
			continue
		}
		before := node.DeepCopy()
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == a.startupTaint })
		if err := a.client.Patch(ctx, node, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
	}
	return nil
}

// ownedByNode makes an object go with its Node, as the objects a kubelet
// or a node agent creates for its Node do.
func ownedByNode(node *corev1.Node) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
}

// readyFor tells whether the kubelet has reported node Ready for at least
// d.
func readyFor(node *corev1.Node, d time.Duration) bool {
	for _, condition := range node.Status.Conditions {
		if condition.Type == corev1.NodeReady {
			return condition.Status == corev1.ConditionTrue && time.Since(condition.LastTransitionTime.Time) >= d
		}
	}
	return false
}
