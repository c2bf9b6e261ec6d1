package autoscaler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	provisioningv1 "github.com/capi-autoscaler/capi-autoscaler/api/provisioningrequest/v1"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/buffers"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// recordingBuffers lists the same buffers in every loop and counts the
// status writes asked of it.
type recordingBuffers struct {
	list   []buffers.Buffer
	writes int
}

func (b *recordingBuffers) ListBuffers(context.Context) ([]buffers.Buffer, error)  { return b.list, nil }
func (b *recordingBuffers) WriteStatus(context.Context, map[string]buffers.Window) { b.writes++ }

// recordingRequests lists the same requests in every loop, and the ends
// of requests no longer served, and records the answers asked of it
// without applying them.
type recordingRequests struct {
	requests []provisioning.Request
	ended    []provisioning.Answer
	answered [][]provisioning.Answer
}

func (r *recordingRequests) ListRequests(context.Context) ([]provisioning.Request, []provisioning.Answer, error) {
	return r.requests, r.ended, nil
}

func (r *recordingRequests) Answer(_ context.Context, answers []provisioning.Answer) {
	r.answered = append(r.answered, answers)
}

// smallBuffer is a capacity buffer of one pod requesting 500m and 1Gi.
func smallBuffer() buffers.Buffer {
	template := st.Pod("template", "500m", "1Gi")
	return buffers.Buffer{
		Namespace: "default", Name: "small", UID: "uid-buffer-small",
		CreationTimestamp: metav1.NewTime(st.Now.Add(-time.Hour)),
		Template:          corev1.PodTemplateSpec{Spec: template.Spec}, Replicas: 1,
	}
}

// A DryRun engine writes nothing but what it publishes about itself (its
// Status: decisions, answers it would give, buffers' room), whatever the
// loop meets: pods to scale up for, nodes to remove, a group whose
// instance failed (backoff) and whose instance never registered, a group
// with a problem, capacity buffers (one with a bad schedule, held at all
// times, one outside its schedule's window) and provisioning requests, one of which ended. The
// workload cluster sees no write and no event, the node
// groups no change and no event, and buffers and requests no status.
func TestADryRunLoopWritesNothingButItsOwnStatus(t *testing.T) {
	g := NewWithT(t)
	busy := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	busyNodes := busy.addNodes(1)
	spare := &fakeGroup{id: "MachineDeployment/default/spare", max: 5, template: templateNode()}
	spareNodes := spare.addNodes(1, st.WithTaint("dedicated", "spare", corev1.TaintEffectNoSchedule))
	broken := &fakeGroup{id: "MachineDeployment/default/broken", max: 10, template: templateNode()}
	broken.instances = append(broken.instances,
		nodegroups.Instance{ID: "fake://failed", State: nodegroups.InstanceCreating, Removable: true,
			Error: &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "quota exceeded"}},
		nodegroups.Instance{ID: "fake://unregistered", State: nodegroups.InstanceCreating, Removable: true})
	broken.target += 2
	running := st.Pod("running", "3", "1Gi", st.OwnedBy("running"), st.OnNode(busyNodes[0].Name))
	pending := st.Replicas("web", 2, "3", "1Gi")
	f := newFixture(t, []*fakeGroup{busy, spare, broken}, objects(append(busyNodes, spareNodes...), append(pending, running)...)...)
	f.provider.problems = []nodegroups.Problem{{ID: "MachineDeployment/default/bad", Reason: "InvalidAnnotation", Message: "max size not an integer"}}
	outsideItsWindow := smallBuffer()
	outsideItsWindow.Name, outsideItsWindow.UID = "nightly", "uid-buffer-nightly"
	outsideItsWindow = scheduled(t, outsideItsWindow, map[string]string{buffers.ScheduleAnnotation: "0 22 * * *", buffers.ScheduleDurationAnnotation: "8h"})
	badSchedule := scheduled(t, smallBuffer(), map[string]string{buffers.ScheduleAnnotation: "0 22 * * *"})
	bufferLister := &recordingBuffers{list: []buffers.Buffer{badSchedule, outsideItsWindow}}
	requests := &recordingRequests{
		requests: []provisioning.Request{checkOf("check", 1, "500m", false), requestOf(provisioning.AtomicScaleUp, "atomic", 2, "3")},
		ended:    []provisioning.Answer{{Namespace: "default", Name: "old", UID: "uid-old", Outcome: provisioning.Expired, Message: "expired"}},
	}
	f.with(t, func(opts *autoscaler.Options) { opts.Buffers, opts.Requests = bufferLister, requests })
	f.apply(t, dryRunConfig())

	first := f.runOnce(t)
	for _, pod := range pending {
		g.Expect(f.cluster.Delete(context.Background(), pod)).To(Succeed())
	}
	f.clock.Step(10 * time.Second)
	second := f.runOnce(t)
	requests.requests = nil
	f.clock.Step(16 * time.Minute)
	last := f.runOnce(t)

	// What the loops met, so that the writes below were not left out for
	// want of something to do.
	expect := func(what string, actual any, matcher OmegaMatcher) { g.Expect(actual).To(matcher, what) }
	expect("the pending pods are planned for", first.Decisions, ContainElement(SatisfyAll(
		HaveField("Kind", autoscaler.ScaleUpDecision), HaveField("Request", ""), HaveField("Pods", Not(BeEmpty())))))
	expect("the failed group backs off", groupRow(first, broken.id).BackoffUntil, Not(BeZero()))
	expect("the problem is on the status", first.NodeGroups, ContainElement(HaveField("ID", "MachineDeployment/default/bad")))
	expect("the buffers' room is held, but outside the window", first.Buffers, ConsistOf(
		SatisfyAll(HaveField("Buffer", "default/small"), HaveField("Held", 1), HaveField("Schedule", ContainSubstring("schedule is ignored"))),
		SatisfyAll(HaveField("Buffer", "default/nightly"), HaveField("Replicas", 0), HaveField("Schedule", ContainSubstring("holds no room"))),
	))
	expect("the requests get the answers they would", first.Requests, ContainElements(
		SatisfyAll(HaveField("Name", "old"), HaveField("Outcome", provisioning.Expired)),
		SatisfyAll(HaveField("Name", "check"), HaveField("Outcome", provisioning.Found))))
	expect("the atomic request is planned for", second.Requests, ContainElement(SatisfyAll(HaveField("Name", "atomic"), HaveField("Outcome", provisioning.ScalingUp))))
	expect("as a decision", second.Decisions, ContainElement(HaveField("Request", "default/atomic")))
	expect("each answer is a decision once, however many loops give it", answersOf(last.Decisions), Equal(map[string][]provisioning.Condition{
		"default/old": {{Type: provisioningv1.FailedCondition, Status: metav1.ConditionTrue, Reason: provisioningv1.ExpiredReason, Message: "expired"}},
		"default/check": {{Type: provisioningv1.ProvisionedCondition, Status: metav1.ConditionTrue, Reason: provisioningv1.CapacityIsFoundReason,
			Message: "The pods fit in the cluster as it is; the capacity is booked for them"}},
		"default/atomic": {{Type: provisioningv1.ProvisionedCondition, Status: metav1.ConditionFalse, Reason: provisioningv1.ScaleUpInProgressReason,
			Message: second.Requests[len(second.Requests)-1].Message}},
	}))
	expect("the spare node would go", last.Decisions, ContainElement(SatisfyAll(
		HaveField("Kind", autoscaler.ScaleDownDecision), HaveField("Nodes", []string{spareNodes[0].Name}))))
	expect("the unregistered instance is long unregistered", groupRow(last, broken.id).LongUnregistered, Equal(1))

	f.expectNoWrites(g)
	for _, group := range []*fakeGroup{busy, spare, broken} {
		g.Expect(group.increases).To(BeEmpty(), group.id)
		g.Expect(group.decreases).To(BeEmpty(), group.id)
		g.Expect(group.deletedInstances).To(BeEmpty(), group.id)
		g.Expect(group.deletedNodes).To(BeEmpty(), group.id)
		g.Expect(group.cancelled).To(BeEmpty(), group.id)
	}
	g.Expect(f.groupRecorder.events).To(BeEmpty(), "no event on the objects behind node groups")
	g.Expect(bufferLister.writes).To(BeZero(), "no buffer status")
	g.Expect(requests.answered).To(BeEmpty(), "no request status")
}

// answersOf are the conditions the Answer decisions would have set, by
// request, in the order decided.
func answersOf(decisions []autoscaler.Decision) map[string][]provisioning.Condition {
	answers := map[string][]provisioning.Condition{}
	for _, decision := range decisions {
		if decision.Kind == autoscaler.AnswerDecision {
			answers[decision.Request] = append(answers[decision.Request], *decision.Answer)
		}
	}
	return answers
}

// noRetry has request ask not to be tried again.
func noRetry(request provisioning.Request) provisioning.Request {
	request.NoRetry = true
	return request
}

// dryRunTwin is a state of a cluster with a buffer and requests, built
// anew for each engine.
type dryRunTwin struct {
	groups   []*fakeGroup
	objects  []client.Object
	buffers  []buffers.Buffer
	requests []provisioning.Request
}

// DryRun decides, on a cluster with capacity buffers and provisioning
// requests, what Active does in the same state: the same increases, the
// same answers, the same room for the buffers.
func TestDryRunDecidesWhatActiveDoesWithBuffersAndRequests(t *testing.T) {
	for name, state := range map[string]func() dryRunTwin{
		"a buffer that needs nodes, and a request found": func() dryRunTwin {
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			running := st.Pod("running", "3", "1Gi", st.OwnedBy("running"), st.OnNode(nodes[0].Name))
			return dryRunTwin{
				groups: []*fakeGroup{group}, objects: objects(nodes, running),
				buffers: []buffers.Buffer{bufferOf(3)},
				requests: []provisioning.Request{checkOf("check", 1, "1", false), noRetry(checkOf("too-big", 2, "1", false)),
					requestOf(provisioning.AtomicScaleUp, "atomic", 2, "3")},
			}
		},
		"an atomic request that needs nodes, and one that fits": func() dryRunTwin {
			group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
			nodes := group.addNodes(1)
			return dryRunTwin{
				groups: []*fakeGroup{group}, objects: objects(nodes),
				buffers: []buffers.Buffer{bufferOf(1)},
				requests: []provisioning.Request{requestOf(provisioning.AtomicScaleUp, "atomic", 3, "3"),
					requestOf(provisioning.AtomicScaleUp, "fits", 1, "1")},
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			run := func(config autoscaler.Config) (autoscaler.Status, dryRunTwin, *recordingRequests) {
				twin := state()
				f := newFixture(t, twin.groups, twin.objects...)
				requests := &recordingRequests{requests: twin.requests}
				f.with(t, func(opts *autoscaler.Options) {
					opts.Buffers, opts.Requests = &recordingBuffers{list: twin.buffers}, requests
				})
				f.apply(t, config)
				return f.runOnce(t), twin, requests
			}
			active, activeState, activeRequests := run(autoscaler.DefaultConfig())
			dry, twin, dryRequests := run(dryRunConfig())

			increased := map[string]int{}
			for _, group := range activeState.groups {
				for _, delta := range group.increases {
					increased[group.id] += delta
				}
			}
			g.Expect(increased).NotTo(BeEmpty(), "the state needs nodes")
			decided := map[string]int{}
			for _, decision := range dry.Decisions {
				for _, group := range decision.Groups {
					decided[group.ID] += group.Delta
				}
			}
			g.Expect(decided).To(Equal(increased), "the same increases")
			g.Expect(dry.Requests).To(Equal(active.Requests), "the same answers")
			g.Expect(activeRequests.answered).To(Equal([][]provisioning.Answer{active.Requests}), "Active gives them")
			g.Expect(dryRequests.answered).To(BeEmpty(), "DryRun does not")
			written := map[string][]provisioning.Condition{}
			for _, answer := range active.Requests {
				request := answer.Namespace + "/" + answer.Name
				conditions := answer.Conditions(slices.ContainsFunc(twin.requests, func(r provisioning.Request) bool { return r.Key() == request && r.NoRetry }))
				written[request] = conditions[len(conditions)-1:]
			}
			g.Expect(answersOf(dry.Decisions)).To(Equal(written), "DryRun's decisions name each request and the condition Active writes on it")
			g.Expect(dry.Buffers).To(Equal(active.Buffers), "the same room for the buffers")
			g.Expect(dry.Buffers).NotTo(BeEmpty())
		})
	}
}
