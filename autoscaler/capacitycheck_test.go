package autoscaler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// recordingChecker lists the same requests in every loop and keeps the
// answers of the last.
type recordingChecker struct {
	requests []provisioning.Request
	answers  []provisioning.Answer
}

func (c *recordingChecker) ListRequests(context.Context) ([]provisioning.Request, error) {
	return c.requests, nil
}

func (c *recordingChecker) Answer(_ context.Context, answers []provisioning.Answer) {
	c.answers = answers
}

// checkOf is a request of count pods requesting cpu and 1Gi.
func checkOf(name string, count int32, cpu string, booked bool) provisioning.Request {
	template := st.Pod("template", cpu, "1Gi")
	return provisioning.Request{
		Namespace: "default", Name: name, UID: types.UID("uid-" + name), Booked: booked,
		PodSets: []provisioning.PodSet{{Template: corev1.PodTemplateSpec{Spec: template.Spec}, Count: count}},
	}
}

// withRequests has the fixture's engine answer what checker lists.
func (f *fixture) withRequests(t *testing.T, checker provisioning.Checker) *fixture {
	t.Helper()
	engine, err := autoscaler.New(autoscaler.Options{
		ClusterName: "default/workload", Config: autoscaler.DefaultConfig(), NodeGroups: f.provider,
		Cluster: f.cluster, Clientset: f.clientset, Recorder: f.recorder, GroupRecorder: f.groupRecorder,
		Metrics: f.metrics, Clock: f.clock, Requests: checker,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.engine = engine
	return f
}

func answerOf(answers []provisioning.Answer, name string) provisioning.Answer {
	for _, answer := range answers {
		if answer.Name == name {
			return answer
		}
	}
	return provisioning.Answer{}
}

// check-capacity answers from the nodes that exist, oldest request first,
// each seeing the room the ones before it booked, and never scales.
func TestCheckCapacityAnswersFromTheNodesThatExistWithoutScaling(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "1", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	checker := &recordingChecker{requests: []provisioning.Request{
		checkOf("first", 2, "1", false),
		checkOf("second", 2, "1", false),
		checkOf("too-big", 1, "8", false),
	}}
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).withRequests(t, checker)

	f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty(), "check-capacity never scales")
	g.Expect(answerOf(checker.answers, "first").Found).To(BeTrue(), "2 of the 3 free cpus")
	g.Expect(answerOf(checker.answers, "second")).To(HaveField("Message", "1 of the 2 pods fit on no node of the cluster as it is"),
		"the first request booked 2 of the 3 free cpus")
	g.Expect(answerOf(checker.answers, "too-big").Found).To(BeFalse())
}

// A booked request keeps its room for the pods still to come: its node is
// not scaled down, and another request does not get that room. Pods that
// consume it already take their share of it.
func TestABookedRequestKeepsRoomForThePodsStillToCome(t *testing.T) {
	t.Run("its node is not scaled down", func(t *testing.T) {
		for _, tc := range []struct {
			name        string
			requests    []provisioning.Request
			wantDeleted int
		}{
			{name: "without a request", wantDeleted: 1},
			{name: "with a booked request of one pod", requests: []provisioning.Request{checkOf("booked", 1, "2", true)}},
			{name: "with a request not booked", requests: []provisioning.Request{checkOf("unanswered", 1, "8", false)}, wantDeleted: 1},
		} {
			t.Run(tc.name, func(t *testing.T) {
				g := NewWithT(t)
				group := &fakeGroup{id: "MachineDeployment/default/md-0", min: 1, max: 10, template: templateNode()}
				nodes := group.addNodes(2)
				busy := st.Pod("busy-0", "3", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
				f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).withRequests(t, &recordingChecker{requests: tc.requests})

				f.runPastUnneededTime(context.Background(), t)

				g.Expect(group.deletedNodes).To(HaveLen(tc.wantDeleted))
			})
		}
	})

	t.Run("pods that consume it take their share", func(t *testing.T) {
		g := NewWithT(t)
		group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
		nodes := group.addNodes(1)
		consumer := st.Pod("job-0", "1", "1Gi", st.OwnedBy("job"), st.OnNode(nodes[0].Name))
		consumer.Annotations = map[string]string{provisioning.ConsumeAnnotations[0]: "booked"}
		checker := &recordingChecker{requests: []provisioning.Request{
			checkOf("booked", 2, "1", true),
			checkOf("next", 2, "1", false),
		}}
		f := newFixture(t, []*fakeGroup{group}, objects(nodes, consumer)...).withRequests(t, checker)

		f.runOnce(t)

		g.Expect(answerOf(checker.answers, "booked")).To(Equal(provisioning.Answer{}), "a booked request is not answered again")
		g.Expect(answerOf(checker.answers, "next").Found).To(BeTrue(),
			"of the 3 free cpus, the booked request keeps 1, for its one pod still to come")
	})
}
