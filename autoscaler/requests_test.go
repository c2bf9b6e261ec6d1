package autoscaler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/capi-autoscaler/capi-autoscaler/autoscaler"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/nodegroups"
	"github.com/capi-autoscaler/capi-autoscaler/autoscaler/provisioning"
	st "github.com/capi-autoscaler/capi-autoscaler/autoscaler/snapshot/snapshottest"
)

// fakeRequests lists its requests in every loop, keeps the answers of the
// last, and applies them as the controller writes them to the requests'
// status: found or provisioned requests are booked, a scale-up in progress
// is kept with its request, and a failed request is no longer listed.
type fakeRequests struct {
	requests []provisioning.Request
	answers  []provisioning.Answer
	// unwritten drops the scale-ups in progress, as when writing the
	// status fails.
	unwritten bool
}

func (c *fakeRequests) ListRequests(context.Context) ([]provisioning.Request, []provisioning.Answer, error) {
	return c.requests, nil, nil
}

func (c *fakeRequests) Answer(_ context.Context, answers []provisioning.Answer) {
	c.answers = answers
	for _, answer := range answers {
		for i := range c.requests {
			request := &c.requests[i]
			if request.UID != answer.UID {
				continue
			}
			switch answer.Outcome {
			case provisioning.Found, provisioning.Provisioned:
				request.Booked, request.ScaleUp = true, nil
			case provisioning.ScalingUp:
				if !c.unwritten {
					request.ScaleUp = answer.ScaleUp
				}
			case provisioning.ScaleUpFailed:
				request.UID = "failed"
			}
		}
	}
	c.requests = slices.DeleteFunc(c.requests, func(request provisioning.Request) bool { return request.UID == "failed" })
}

// answer is the last answer to the request, or the zero Answer.
func (c *fakeRequests) answer(name string) provisioning.Answer {
	for _, answer := range c.answers {
		if answer.Name == name {
			return answer
		}
	}
	return provisioning.Answer{}
}

// requestOf is a request of the class for count pods requesting cpu and 1Gi.
func requestOf(class provisioning.Class, name string, count int32, cpu string) provisioning.Request {
	template := st.Pod("template", cpu, "1Gi")
	return provisioning.Request{
		Namespace: "default", Name: name, UID: types.UID("uid-" + name), Class: class,
		PodSets: []provisioning.PodSet{{Template: corev1.PodTemplateSpec{Spec: template.Spec}, Count: count}},
	}
}

func checkOf(name string, count int32, cpu string, booked bool) provisioning.Request {
	request := requestOf(provisioning.CheckCapacity, name, count, cpu)
	request.Booked = booked
	return request
}

// withRequests has the fixture's engine answer what lister lists.
func (f *fixture) withRequests(t *testing.T, lister provisioning.Lister) *fixture {
	t.Helper()
	return f.with(t, func(opts *autoscaler.Options) { opts.Requests = lister })
}

// check-capacity answers from the nodes that exist, oldest request first,
// each seeing the room the ones before it booked, and never scales.
func TestCheckCapacityAnswersFromTheNodesThatExistWithoutScaling(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
	nodes := group.addNodes(1)
	busy := st.Pod("busy-0", "1", "1Gi", st.OwnedBy("busy"), st.OnNode(nodes[0].Name))
	requests := &fakeRequests{requests: []provisioning.Request{
		checkOf("first", 2, "1", false),
		checkOf("second", 2, "1", false),
		checkOf("too-big", 1, "8", false),
	}}
	f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).withRequests(t, requests)

	f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty(), "check-capacity never scales")
	g.Expect(requests.answer("first").Outcome).To(Equal(provisioning.Found), "2 of the 3 free cpus")
	g.Expect(requests.answer("second")).To(SatisfyAll(
		HaveField("Outcome", provisioning.NotFound),
		HaveField("Message", "1 of the 2 pods fit on no node of the cluster as it is")),
		"the first request booked 2 of the 3 free cpus")
	g.Expect(requests.answer("too-big").Outcome).To(Equal(provisioning.NotFound))
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
				f := newFixture(t, []*fakeGroup{group}, objects(nodes, busy)...).withRequests(t, &fakeRequests{requests: tc.requests})

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
		requests := &fakeRequests{requests: []provisioning.Request{
			checkOf("booked", 2, "1", true),
			checkOf("next", 2, "1", false),
		}}
		f := newFixture(t, []*fakeGroup{group}, objects(nodes, consumer)...).withRequests(t, requests)

		f.runOnce(t)

		g.Expect(requests.answer("booked")).To(Equal(provisioning.Answer{}), "a booked request is not answered again")
		g.Expect(requests.answer("next").Outcome).To(Equal(provisioning.Found),
			"of the 3 free cpus, the booked request keeps 1, for its one pod still to come")
	})

	t.Run("once all its pods are scheduled, its booking ends as consumed", func(t *testing.T) {
		g := NewWithT(t)
		group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
		nodes := group.addNodes(1)
		var consumers []*corev1.Pod
		for i, key := range provisioning.ConsumeAnnotations {
			consumer := st.Pod(fmt.Sprintf("job-%d", i), "1", "1Gi", st.OwnedBy("job"), st.OnNode(nodes[0].Name))
			consumer.Annotations = map[string]string{key: "booked"}
			consumers = append(consumers, consumer)
		}
		requests := &fakeRequests{requests: []provisioning.Request{checkOf("booked", 2, "1", true)}}
		f := newFixture(t, []*fakeGroup{group}, objects(nodes, consumers...)...).withRequests(t, requests)

		f.runOnce(t)

		answer := requests.answer("booked")
		g.Expect(answer.Outcome).To(Equal(provisioning.BookingConsumed), "the current key and the deprecated one both consume it")
		g.Expect(answer.Conditions(false)).To(ConsistOf(provisioning.Condition{
			Type: "BookingExpired", Status: metav1.ConditionTrue, Reason: "CapacityBookingConsumed",
			Message: "All the 2 pods of the request are scheduled; no capacity is booked for them any more",
		}), "as upstream ends a consumed booking")
	})

	t.Run("while one of its pods is pending, it stays booked", func(t *testing.T) {
		g := NewWithT(t)
		group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
		nodes := group.addNodes(1)
		scheduled := st.Pod("job-0", "1", "1Gi", st.OwnedBy("job"), st.OnNode(nodes[0].Name))
		pending := st.Pod("job-1", "1", "1Gi", st.OwnedBy("job"))
		for _, pod := range []*corev1.Pod{scheduled, pending} {
			pod.Annotations = map[string]string{provisioning.ConsumeAnnotations[0]: "booked"}
		}
		requests := &fakeRequests{requests: []provisioning.Request{checkOf("booked", 2, "1", true)}}
		f := newFixture(t, []*fakeGroup{group}, objects(nodes, scheduled, pending)...).withRequests(t, requests)

		f.runOnce(t)

		g.Expect(requests.answer("booked")).To(Equal(provisioning.Answer{}), "a booked request is not answered again")
	})

	t.Run("pending pods do not take it", func(t *testing.T) {
		g := NewWithT(t)
		group := &fakeGroup{id: "MachineDeployment/default/md-0", max: 10, template: templateNode()}
		nodes := group.addNodes(1)
		pending := st.Pod("web-0", "2", "1Gi", st.OwnedBy("web"))
		requests := &fakeRequests{requests: []provisioning.Request{checkOf("booked", 1, "3", true)}}
		f := newFixture(t, []*fakeGroup{group}, objects(nodes, pending)...).withRequests(t, requests)

		f.runOnce(t)

		g.Expect(group.increases).To(Equal([]int{1}), "of the 4 cpus of the node, the booked request keeps 3")
	})
}

// atomicOf is the best-effort-atomic-scale-up request "job" of count pods
// of 2 cpu.
func atomicOf(count int32) provisioning.Request {
	return requestOf(provisioning.AtomicScaleUp, "job", count, "2")
}

// appear gives a group's target size instances without a node, as Cluster
// API creates Machines for new replicas, now.
func (f *fixture) appear(g *fakeGroup) {
	for len(g.instances) < g.target {
		name := fmt.Sprintf("%s-new-%d", strings.ReplaceAll(g.id, "/", "-"), len(g.instances))
		g.instances = append(g.instances, nodegroups.Instance{ID: "fake://" + name, Name: name, State: nodegroups.InstanceCreating, Removable: true,
			Created: f.clock.Now().Truncate(time.Second)})
	}
}

// register gives the group's instances without a node a Ready node,
// created in the fixture's cluster and clientset, and the provider ID the
// node has as their ID.
func (f *fixture) register(t *testing.T, g *fakeGroup) {
	t.Helper()
	for i := range g.instances {
		instance := &g.instances[i]
		if instance.NodeName != "" {
			continue
		}
		// The instance's ID becomes its provider ID, as a Machine's does.
		instance.ID, instance.NodeName, instance.State = "provider://"+instance.Name, instance.Name, nodegroups.InstanceRunning
		node := st.Node(instance.Name, "4", "16Gi")
		if err := f.cluster.Create(context.Background(), node.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		if _, err := f.clientset.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// An atomic request gets nodes for all its pods in one scale-up, over
// several groups when one cannot hold them, and is provisioned once they
// are up; its nodes are then kept for its pods.
func TestAnAtomicRequestGetsNodesForAllItsPodsAtOnce(t *testing.T) {
	g := NewWithT(t)
	small := &fakeGroup{id: "MachineDeployment/default/a", max: 2, template: templateNode()}
	large := &fakeGroup{id: "MachineDeployment/default/b", max: 10, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(6)}}
	f := newFixture(t, []*fakeGroup{small, large}).withRequests(t, requests)

	f.runOnce(t)

	g.Expect(small.increases).To(Equal([]int{2}))
	g.Expect(large.increases).To(Equal([]int{1}), "6 pods of 2 cpus need 3 nodes of 4 cpus; a holds 2")
	g.Expect(requests.answer("job")).To(SatisfyAll(
		HaveField("Outcome", provisioning.ScalingUp),
		HaveField("ScaleUp.Groups", Equal(map[string]int{small.id: 2, large.id: 1}))))

	// The Machines are created, then their nodes register.
	f.appear(small)
	f.appear(large)
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScalingUp))
	g.Expect(requests.answer("job").ScaleUp.Instances).To(HaveKeyWithValue(small.id, HaveLen(2)))
	g.Expect(small.increases).To(HaveLen(1), "no second scale-up while the first is in progress")

	f.register(t, small)
	f.runPastUnneededTime(context.Background(), t)
	f.clock.Step(time.Second)
	f.runOnce(t)
	g.Expect(small.deletedNodes).To(BeEmpty(), "a's nodes wait, empty, for b's")
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScalingUp))

	f.register(t, large)
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.Provisioned))
	g.Expect(requests.requests[0].Booked).To(BeTrue())

	f.clock.Step(20 * time.Minute)
	f.runOnce(t)
	f.clock.Step(20 * time.Minute)
	f.runOnce(t)
	g.Expect(slicesConcat(small.deletedNodes, large.deletedNodes)).To(BeEmpty(), "the booked nodes are kept for the request's pods")
}

func slicesConcat(a, b []string) []string { return append(append([]string{}, a...), b...) }

// A request that no scale-up can serve whole gets nothing: not the part
// that would fit within max sizes, limits and backoffs.
func TestAnAtomicRequestThatCannotBeServedWholeAddsNothing(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/a", max: 2, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(6)}}
	f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)

	f.runOnce(t)

	g.Expect(group.increases).To(BeEmpty())
	g.Expect(requests.answer("job")).To(SatisfyAll(
		HaveField("Outcome", provisioning.NotFound),
		HaveField("Message", ContainSubstring("2 of the 6 pods fit on no new node"))))
}

// A group that fails to grow takes back the other groups' increases.
func TestAnAtomicScaleUpWhoseGroupFailsToGrowTakesBackTheOthers(t *testing.T) {
	g := NewWithT(t)
	small := &fakeGroup{id: "MachineDeployment/default/a", max: 2, template: templateNode()}
	failing := &fakeGroup{id: "MachineDeployment/default/b", max: 10, template: templateNode(), increaseErr: errors.New("conflict")}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(6)}}
	f := newFixture(t, []*fakeGroup{small, failing}).withRequests(t, requests)

	f.runOnce(t)

	g.Expect(small.increases).To(Equal([]int{2}))
	g.Expect(small.decreases).To(Equal([]int{2}))
	g.Expect(small.target).To(Equal(0))
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.NotFound))
}

// When a Machine of the scale-up fails, or its nodes do not all come in
// time, every instance it added is removed, in every group, and nothing
// else: the groups end where they began.
func TestAFailedAtomicScaleUpRemovesEverythingItAdded(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(f *fixture, small, large *fakeGroup)
	}{
		{name: "a Machine fails", fail: func(_ *fixture, _, large *fakeGroup) {
			large.instances[len(large.instances)-1].Error = &nodegroups.InstanceError{Reason: "InfrastructureProvisioningFailed", Message: "no capacity"}
		}},
		{name: "a node does not come in time", fail: func(f *fixture, _, _ *fakeGroup) {
			f.clock.Step(15 * time.Minute)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			small := &fakeGroup{id: "MachineDeployment/default/a", max: 3, template: templateNode()}
			large := &fakeGroup{id: "MachineDeployment/default/b", max: 10, template: templateNode()}
			existing := small.addNodes(1)
			busy := st.Pod("busy-0", "4", "1Gi", st.OwnedBy("busy"), st.OnNode(existing[0].Name))
			requests := &fakeRequests{requests: []provisioning.Request{atomicOf(6)}}
			f := newFixture(t, []*fakeGroup{small, large}, objects(existing, busy)...).withRequests(t, requests)

			f.runOnce(t)
			g.Expect(small.increases).To(Equal([]int{2}))
			g.Expect(large.increases).To(Equal([]int{1}))

			// a's Machines register, b's does not.
			f.appear(small)
			f.register(t, small)
			f.appear(large)
			f.clock.Step(time.Minute)
			f.runOnce(t)
			tc.fail(f, small, large)
			f.clock.Step(time.Second)
			f.runOnce(t)

			g.Expect(requests.answer("job")).To(SatisfyAll(
				HaveField("Outcome", provisioning.ScaleUpFailed),
				HaveField("Message", ContainSubstring("the nodes it added were removed"))))
			g.Expect(small.deletedNodes).To(ConsistOf("MachineDeployment-default-a-new-1", "MachineDeployment-default-a-new-2"),
				"a's two new nodes, not the one it had")
			g.Expect(large.deletedInstances).To(ConsistOf("fake://MachineDeployment-default-b-new-0"))
			g.Expect(small.target).To(Equal(1))
			g.Expect(large.target).To(Equal(0))
			g.Expect(f.groupRecorder.reasons(small.id)).To(ContainElement(autoscaler.EventScaleUpRolledBack))
		})
	}
}

// A manager that restarts during a scale-up follows it from the request's
// status: it starts no second one, and still removes what it added.
func TestAnAtomicScaleUpSurvivesARestart(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
	f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{2}))

	// A new engine, as after a restart, takes the record that the
	// management cluster keeps of the last one's scale-ups, and sees the
	// Machines created since.
	recorded := f.engine.Status().AtomicScaleUps
	g.Expect(recorded).To(HaveKey(atomicOf(4).UID))
	f.with(t, func(opts *autoscaler.Options) { opts.Requests, opts.AtomicScaleUps = requests, recorded })
	f.clock.Step(time.Minute)
	f.runOnce(t)
	f.appear(group)
	f.clock.Step(time.Minute)
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{2}), "no second scale-up")
	g.Expect(requests.answer("job").ScaleUp.Instances[group.id]).To(HaveLen(2))

	f.clock.Step(15 * time.Minute)
	f.runOnce(t)
	g.Expect(requests.answer("job").Outcome).To(Equal(provisioning.ScaleUpFailed))
	g.Expect(group.deletedInstances).To(HaveLen(2))
	g.Expect(group.target).To(Equal(0))
}

// What a ProvisioningRequest's status says of an atomic scale-up is
// written in the workload cluster, where whoever may write
// provisioningrequests/status can write it: it never names what a rollback
// removes. A request whose status claims a scale-up of Machines of the
// group, which the engine never started, gets no rollback of them, whether
// the engine restarted or not.
func TestARollbackNeverRemovesWhatARequestsStatusNames(t *testing.T) {
	for _, restarted := range []bool{false, true} {
		t.Run(fmt.Sprintf("restarted=%t", restarted), func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
			nodes := group.addNodes(2)
			// Two Machines of the group, one without a node yet, one with
			// a node that runs only a DaemonSet pod: what a rollback removes.
			group.instances[0].NodeName = ""
			agent := st.Pod("agent", "100m", "", st.OnNode(nodes[1].Name), daemonSetOwned)
			forged := atomicOf(4)
			forged.ScaleUp = &provisioning.ScaleUp{
				Started:   st.Now.Add(-time.Hour),
				Groups:    map[string]int{group.id: 2},
				Instances: map[string][]string{group.id: {group.instances[0].ID, group.instances[1].ID}},
			}
			requests := &fakeRequests{requests: []provisioning.Request{forged}}
			f := newFixture(t, []*fakeGroup{group}, nodes[1], agent).withRequests(t, requests)
			if restarted {
				f.runOnce(t)
				f.with(t, func(opts *autoscaler.Options) {
					opts.Requests, opts.AtomicScaleUps = requests, f.engine.Status().AtomicScaleUps
				})
			}

			// The forged scale-up started an hour ago: it is past every
			// provision time, and would be rolled back at once.
			named := group.instances[0].ID
			f.runOnce(t)
			f.clock.Step(time.Minute)
			f.runOnce(t)

			g.Expect(group.deletedInstances).NotTo(ContainElement(named), "no Machine the status names is removed")
			g.Expect(group.deletedNodes).NotTo(ContainElement(nodes[1].Name))
			g.Expect(group.instances).To(HaveLen(2))
		})
	}
}

// A request whose atomic scale-up is in progress, marked Provisioned in
// the workload cluster by someone else, with a status that names other
// groups as growing for it: those groups still scale down. What the status
// names never keeps a group from scaling down.
func TestABookedRequestsStatusKeepsNoGroupFromScalingDown(t *testing.T) {
	g := NewWithT(t)
	f, requests, group, other, unneeded := atomicRequestBesideAnUnneededNode(t)
	f.runOnce(t)
	g.Expect(group.increases).To(Equal([]int{2}))

	// Past delayAfterAdd after the scale-up.
	f.clock.Step(11 * time.Minute)

	forged := &requests.requests[0]
	forged.Booked = true
	forged.ScaleUp = &provisioning.ScaleUp{Started: f.clock.Now(), Groups: map[string]int{other.id: 5}, Instances: map[string][]string{}}
	// Past unneededTime.
	for range 3 {
		f.clock.Step(time.Minute)
		f.runOnce(t)
	}

	g.Expect(other.deletedNodes).To(ConsistOf(unneeded[0].Name))
}

// The nodes on their way for an atomic request are the request's: other
// pending pods get nodes of their own, and the request's own pods wait for
// them.
func TestTheNodesOfAnAtomicScaleUpAreTheRequests(t *testing.T) {
	for _, tc := range []struct {
		name          string
		consumes      bool
		wantIncreases []int
	}{
		{name: "another pod", wantIncreases: []int{2, 1}},
		{name: "a pod of the request", consumes: true, wantIncreases: []int{2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
			requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}}
			f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)
			f.runOnce(t)
			g.Expect(group.increases).To(Equal([]int{2}))

			pod := st.Pod("web-0", "2", "1Gi", st.OwnedBy("web"))
			if tc.consumes {
				pod.Annotations = map[string]string{provisioning.ConsumeAnnotations[0]: "job"}
			}
			if err := f.cluster.Create(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			f.clock.Step(time.Minute)
			f.runOnce(t)

			g.Expect(group.increases).To(Equal(tc.wantIncreases))
		})
	}
}

// A scale-up whose record could not be written to the request's status is
// followed all the same: no second one starts.
func TestAnAtomicScaleUpIsFollowedWhenItsStatusCannotBeWritten(t *testing.T) {
	g := NewWithT(t)
	group := &fakeGroup{id: "MachineDeployment/default/a", max: 10, template: templateNode()}
	requests := &fakeRequests{requests: []provisioning.Request{atomicOf(4)}, unwritten: true}
	f := newFixture(t, []*fakeGroup{group}).withRequests(t, requests)

	for range 3 {
		f.runOnce(t)
		f.appear(group)
		f.clock.Step(time.Minute)
	}

	g.Expect(group.increases).To(Equal([]int{2}))
	g.Expect(requests.answer("job").ScaleUp.Instances[group.id]).To(HaveLen(2))
}
