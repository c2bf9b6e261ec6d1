package controller

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	testenv "github.com/capi-autoscaler/capi-autoscaler/e2e/framework/envtest"
	"github.com/capi-autoscaler/capi-autoscaler/scalable"
)

var _ = Describe("The events of a ClusterAutoscaler", func() {
	It("are recorded with their messages cut to what the events API accepts", func() {
		fixture := newWorkloadCluster(env.Config.Host)
		key := createNamedClusterAutoscaler(fixture, "long-notes")
		DeferCleanup(deleteClusterAutoscaler, key)

		reconciler.Recorder.Eventf(getClusterAutoscaler(Default, key), corev1.EventTypeNormal, "LongNote", "%s", strings.Repeat("x", 3*maxEventMessage))

		expectEvent(fixture.Namespace, key, corev1.EventTypeNormal, "LongNote", SatisfyAll(HaveLen(maxEventMessage), HaveSuffix("...")))
	})
})

var _ = Describe("The events of a node group", func() {
	// What `kubectl describe machinedeployment` shows of the events of
	// reason on the MachineDeployment: each message with its count.
	groupEvents := func(g Gomega, namespace, name, reason string) []string {
		events := &corev1.EventList{}
		g.Expect(k8sClient.List(ctx, events, client.InNamespace(namespace))).To(Succeed())
		var shown []string
		for _, event := range events.Items {
			if event.InvolvedObject.Kind != scalable.KindMachineDeployment || event.InvolvedObject.Name != name || event.Reason != reason {
				continue
			}
			count := max(event.Count, 1)
			if event.Series != nil {
				count = event.Series.Count
			}
			shown = append(shown, fmt.Sprintf("%s (x%d)", event.Message, count))
		}
		return shown
	}

	It("keep every decision's message, and count the repeats of one message in one event", func() {
		fixture := testenv.NewFixture(ctx, k8sClient)
		fixture.Create(ctx, fixture.MachineDeployment("decided", 1, nil), fixture.MachineDeployment("repeated", 1, nil))
		// As the engine records them, one after the other, within seconds.
		recorder := &nodeGroupEventRecorder{ctx: ctx, client: k8sClient, recorder: reconciler.Recorder}
		group := func(name string) string { return scalable.ID(scalable.KindMachineDeployment, fixture.Namespace, name) }

		first := "consolidation: deleting node a (saves 0.1/h)"
		second := "consolidation: deleting node b (saves 0.2/h)"
		recorder.Event(group("decided"), corev1.EventTypeNormal, autoscaler.EventConsolidation, first)
		recorder.Event(group("decided"), corev1.EventTypeNormal, autoscaler.EventConsolidation, second)
		repeated := "consolidation: nothing to save"
		for range 20 {
			recorder.Event(group("repeated"), corev1.EventTypeNormal, autoscaler.EventConsolidation, repeated)
		}

		Eventually(func(g Gomega) []string {
			return groupEvents(g, fixture.Namespace, "decided", autoscaler.EventConsolidation)
		}, waitTimeout).Should(ConsistOf(first+" (x1)", second+" (x1)"), "both decisions can be read")
		Eventually(func(g Gomega) []string {
			return groupEvents(g, fixture.Namespace, "repeated", autoscaler.EventConsolidation)
		}, waitTimeout).Should(Equal([]string{repeated + " (x20)"}), "the repeats are counted in one event")
	})
})
